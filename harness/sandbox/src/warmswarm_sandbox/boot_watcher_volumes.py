"""The boot watcher's volumes: an attached volume shown to its machine as a device folder, a deleted one's removed."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, host
from warmswarm_sandbox.boot_watcher_udev import Udev
from warmswarm_sandbox.layout import Layout
from warmswarm_sandbox.node import NodeRecord

# A volume id becomes a file name on the host: accept only EC2's own form, never "../…".
_VOLUME_ID = re.compile(r"^vol-[0-9a-f]+$")
# A volume's folder is its data: it is removed only once the volume has been missing from this many listings in a
# row, spread over at least this long, so that one listing that misses a volume (an answer read while moto's state
# changes, a restart) never destroys a disk that still exists.
_MISSING_LISTINGS_BEFORE_REMOVAL = 3
_MISSING_S_BEFORE_REMOVAL = 2.0

log = logging.getLogger(__name__)


class VolumeSync:
    """Keeps each running machine's device dir in step with the volumes EC2 says are attached to its instance."""

    def __init__(self, layout: Layout, attach_s: float, ec2: Any) -> None:
        self._layout = layout
        self._attach_s = attach_s
        self._ec2 = ec2
        # (volume id, instance id) -> when we first saw moto call it attached (monotonic s). moto
        # attaches at once; the strict layer shows `attaching` for attach_s and so do we.
        self._attach_seen_at_s: dict[tuple[str, str], float] = {}
        # volume id -> (listings in a row it was missing from, when it was first missed: monotonic s)
        self._missing: dict[str, tuple[int, float]] = {}
        # A disk that appears on a running machine is an event for its udev rules (a hot attach).
        self._udev = Udev(layout)

    def sync(
        self, instances: dict[str, dict[str, Any]], records: dict[str, NodeRecord], powering_off: Collection[str]
    ) -> None:
        """Show each attached volume to its running machine, hide detached ones, and remove the
        folders of volumes EC2 no longer has."""
        try:
            volumes = {vid: v for vid, v in aws.all_volumes(self._ec2).items() if _VOLUME_ID.match(vid)}
        except Exception as error:  # as for instances: look again next time
            log.warning("DescribeVolumes failed: %s", error)
            return
        now_s = time.monotonic()
        attached: set[tuple[str, str]] = set()
        # instance id -> the volume ids its machine sees -> when moto was first seen attaching it
        shown: dict[str, dict[str, float]] = {}
        for volume_id, volume in volumes.items():
            for attachment in volume.get("Attachments") or []:
                instance = instances.get(str(attachment.get("InstanceId")))
                if attachment.get("State") != "attached" or instance is None:
                    continue
                if attachment.get("Device") == instance.get("RootDeviceName"):
                    continue  # moto's root volume: the machine's root disk is its own data dir
                key = (volume_id, instance["InstanceId"])
                attached.add(key)
                if key not in self._attach_seen_at_s:
                    self._attach_seen_at_s[key] = now_s
                    # Its first attachment is when a volume needs a place on the host; it keeps it
                    # until DeleteVolume, through any number of instances.
                    self._layout.volume_dir(volume_id).mkdir(parents=True, exist_ok=True)
                seen_at_s = self._attach_seen_at_s[key]
                # A hidden volume (Sandbox.hide_volume) is attached but never shows up in the machine, as a
                # device that fails to enumerate.
                hidden = (self._layout.faults_dir / f"{volume_id}.hidden").exists()
                if now_s >= seen_at_s + self._attach_s and not hidden:
                    shown.setdefault(key[1], {})[volume_id] = seen_at_s
        self._attach_seen_at_s = {key: at_s for key, at_s in self._attach_seen_at_s.items() if key in attached}

        for instance_id, record in records.items():
            instance = instances.get(instance_id)
            # A machine on its way off is left alone: its power-off (in a pool thread) removes the
            # whole run dir, and a link made meanwhile would outlive it.
            if instance is None or instance["State"]["Name"] != "running" or instance_id in powering_off:
                continue
            if record.is_powered_on():
                self._show_devices(record, shown.get(instance_id, {}))

        self._remove_deleted(volumes, now_s)

    def _remove_deleted(self, volumes: Collection[str], now_s: float) -> None:
        """Remove the folders of volumes EC2 has deleted: missing from several listings over a few seconds."""
        if not self._layout.volumes_dir.is_dir():
            return
        missing: dict[str, tuple[int, float]] = {}
        for folder in sorted(self._layout.volumes_dir.iterdir()):
            if folder.name in volumes:
                continue
            times, since_s = self._missing.get(folder.name, (0, now_s))
            times += 1
            if times >= _MISSING_LISTINGS_BEFORE_REMOVAL and now_s - since_s >= _MISSING_S_BEFORE_REMOVAL:
                host.remove_tree(folder)
                log.info(
                    "%s: deleted in EC2 (missing from %d listings); its folder %s is gone", folder.name, times, folder
                )
                continue
            missing[folder.name] = (times, since_s)
        self._missing = missing

    def _show_devices(self, record: NodeRecord, volumes: dict[str, float]) -> None:
        """Make the machine's device dir hold exactly these volumes, each a link to its folder.
        A link, not a mount: the machine's mount namespace has private propagation, so it sees host
        folders made later but not host mounts made later."""
        device_dir = Path(record.device_dir)
        try:
            present = {entry.name for entry in device_dir.iterdir()}
        except FileNotFoundError:
            return  # the machine is being powered off or was never fully made
        for volume_id in sorted(volumes.keys() - present):
            (device_dir / volume_id).symlink_to(self._layout.volume_dir(volume_id))
            log.info(
                "%s: volume %s appears at %s/%s, %.2f s after the attach was seen",
                record.instance_id,
                volume_id,
                device_dir,
                volume_id,
                time.monotonic() - volumes[volume_id],
            )
            self._udev.disk_added(record, volume_id)
        for volume_id in sorted(present - volumes.keys()):
            (device_dir / volume_id).unlink(missing_ok=True)
            log.info("%s: volume %s detached; gone from %s", record.instance_id, volume_id, device_dir)
