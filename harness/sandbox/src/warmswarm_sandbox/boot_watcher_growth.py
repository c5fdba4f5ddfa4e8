"""The boot watcher's volume growth: a volume EC2 modified to a larger size grows on the host, seen by its machine."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

from warmswarm_sandbox import disks

# On AWS a modified volume's new size is usable from the "optimizing" state on (EBS User Guide, "Extend the file
# system after resizing a volume"): until then the machine still sees the old size.
USABLE_STATES: Final = frozenset({"optimizing", "completed"})
# While a file is smaller than EC2's size, its modification's state is asked at most this often: the strict layer
# throttles describes as AWS does, and the services' calls share its buckets.
LOOK_EVERY_S: Final = 0.5

log = logging.getLogger(__name__)


def grown_bytes(size_gib: int, file_bytes: int, modification_state: str | None) -> int | None:
    """The size a volume's file grows to now: EC2's size, once its modification is usable (optimizing or
    completed) and when it is larger than the file; None otherwise. Never smaller: EBS volumes only grow."""
    size_bytes = size_gib * disks.GIB
    if size_bytes <= file_bytes or modification_state not in USABLE_STATES:
        return None
    return size_bytes


def smaller_than_ec2(sizes_gib: dict[str, int], file_bytes: dict[str, int]) -> list[str]:
    """The volumes whose file is smaller than EC2's size for them: those whose modification's state is asked."""
    return sorted(
        vid for vid, size_gib in sizes_gib.items() if vid in file_bytes and size_gib * disks.GIB > file_bytes[vid]
    )


class VolumeGrowth:
    """Grows the file of each attached volume EC2 says is larger (once usable), refreshes its loop device's size
    and tells the machine (its udev `change` event), as a Nitro machine sees an EBS volume grow."""

    def __init__(self, strict_ec2: Any, volume_file: Callable[[str], Path]) -> None:
        # The strict layer, not moto: moto shows the new size at once, the strict layer's modification says
        # when the machine may use it.
        self._strict_ec2 = strict_ec2
        self._volume_file = volume_file
        self._next_look_s = 0.0

    def grow(self, sizes_gib: dict[str, int]) -> list[str]:
        """Grow the attached volumes (`sizes_gib`: EC2's size of each) whose modification is usable now; the
        volume ids grown (their machines are to be told)."""
        files = {vid: self._volume_file(vid) for vid in sizes_gib}
        file_bytes = {vid: path.stat().st_size for vid, path in files.items() if path.is_file()}
        asked = smaller_than_ec2(sizes_gib, file_bytes)
        now_s = time.monotonic()
        if not asked or now_s < self._next_look_s:
            return []
        self._next_look_s = now_s + LOOK_EVERY_S
        try:
            states = self._states(asked)
        except Exception as error:  # the strict layer busy or throttling: look again next time
            log.warning("DescribeVolumesModifications failed: %s", error)
            return []
        grown = []
        for volume_id in asked:
            to_bytes = grown_bytes(sizes_gib[volume_id], file_bytes[volume_id], states.get(volume_id))
            if to_bytes is None or not disks.grow_backing(files[volume_id], to_bytes):
                continue
            device = disks.loop_of(files[volume_id])
            if device is not None:
                disks.refresh_capacity(device)
            log.info(
                "%s: modification %s; its blocks grew from %d to %d bytes (%s sees %s)",
                volume_id,
                states.get(volume_id),
                file_bytes[volume_id],
                to_bytes,
                device or "no disk",
                "the new size" if device is None else f"{disks.device_bytes(device)} bytes",
            )
            grown.append(volume_id)
        return grown

    def _states(self, volume_ids: Iterable[str]) -> dict[str, str]:
        answer = self._strict_ec2.describe_volumes_modifications(VolumeIds=list(volume_ids))
        return {m["VolumeId"]: m.get("ModificationState", "") for m in answer.get("VolumesModifications", [])}
