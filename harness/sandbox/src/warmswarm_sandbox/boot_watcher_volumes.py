"""The boot watcher's volumes: an attached volume is a loop device shown to its machine; a deleted one's file goes."""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, disks, node
from warmswarm_sandbox.boot_watcher_growth import VolumeGrowth
from warmswarm_sandbox.boot_watcher_udev import Udev
from warmswarm_sandbox.layout import Layout
from warmswarm_sandbox.node import NodeRecord

# A volume id becomes a file name on the host: accept only EC2's own form, never "../…".
_VOLUME_ID = re.compile(r"^vol-[0-9a-f]+$")
# A volume's file is its data: it is removed only once the volume has been missing from this many listings in a
# row, spread over at least this long, so that one listing that misses a volume (an answer read while moto's state
# changes, a restart) never destroys a disk that still exists.
_MISSING_LISTINGS_BEFORE_REMOVAL = 3
_MISSING_S_BEFORE_REMOVAL = 2.0

log = logging.getLogger(__name__)


class VolumeSync:
    """Keeps each running machine's device dir in step with the volumes EC2 says are attached to its instance: each
    attached volume's file is bound to a loop device (its disk, kept while it is attached, through stops), and a
    running machine's device dir links to the disks it may see."""

    def __init__(self, layout: Layout, attach_s: float, ec2: Any, strict_ec2: Any = None) -> None:
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
        # A volume EC2 grew grows on the host (asked of the strict layer: when its new size is usable).
        self._growth = None if strict_ec2 is None else VolumeGrowth(strict_ec2, layout.volume_file)

    def sync(
        self, instances: dict[str, dict[str, Any]], records: dict[str, NodeRecord], powering_off: Collection[str]
    ) -> None:
        """Bind each attached volume to a loop device and show it to its running machine; hide detached ones and
        release their devices; remove the files of volumes EC2 no longer has."""
        try:
            volumes = {vid: v for vid, v in aws.all_volumes(self._ec2).items() if _VOLUME_ID.match(vid)}
        except Exception as error:  # as for instances: look again next time
            log.warning("DescribeVolumes failed: %s", error)
            return
        now_s = time.monotonic()
        attached: set[tuple[str, str]] = set()
        sizes_gib: dict[str, int] = {}  # EC2's size of each attached volume
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
                sizes_gib[volume_id] = int(volume.get("Size") or 1)
                if key not in self._attach_seen_at_s:
                    self._attach_seen_at_s[key] = now_s
                    # Its first attachment is when a volume needs blocks on the host: a sparse file of its size
                    # that reads as zeros, as a new EBS volume does. It keeps them until DeleteVolume, through
                    # any number of instances.
                    size_gib = int(volume.get("Size") or 1)
                    backing = self._layout.volume_file(volume_id)
                    if disks.make_backing(backing, size_gib * disks.GIB):
                        log.info("%s: its blocks are %s (%d GiB, sparse)", volume_id, backing, size_gib)
                seen_at_s = self._attach_seen_at_s[key]
                # A hidden volume (Sandbox.hide_volume) is attached but never shows up in the machine, as a
                # device that fails to enumerate.
                hidden = (self._layout.faults_dir / f"{volume_id}.hidden").exists()
                if now_s >= seen_at_s + self._attach_s and not hidden:
                    shown.setdefault(key[1], {})[volume_id] = seen_at_s
        self._attach_seen_at_s = {key: at_s for key, at_s in self._attach_seen_at_s.items() if key in attached}
        try:
            devices = self._bind_attached({volume_id for volume_id, _ in attached}, records)
        except disks.DiskError as error:  # look again next time; nothing is shown without its disk
            log.warning("loop devices: %s", error)
            return
        grown = self._grow(sizes_gib)

        for instance_id, record in records.items():
            instance = instances.get(instance_id)
            # A machine on its way off is left alone: its power-off (in a pool thread) removes the
            # whole run dir, and a link made meanwhile would outlive it.
            if instance is None or instance["State"]["Name"] != "running" or instance_id in powering_off:
                continue
            if record.is_powered_on():
                seen = shown.get(instance_id, {})
                self._show_devices(record, {vid: devices[vid] for vid in seen if vid in devices}, seen)
                for volume_id in sorted(grown & seen.keys()):
                    self._udev.disk_changed(record, volume_id)  # a resized disk's uevent, as the kernel sends it

        self._remove_deleted(volumes, now_s)

    def _grow(self, sizes_gib: dict[str, int]) -> set[str]:
        if self._growth is None:
            return set()
        try:
            return set(self._growth.grow(sizes_gib))
        except (OSError, disks.DiskError) as error:  # a file or device gone meanwhile: look again next time
            log.warning("volume growth: %s", error)
            return set()

    def _bind_attached(self, attached: set[str], records: dict[str, NodeRecord]) -> dict[str, str]:
        """Each attached volume's disk (bound now if it has none), as a machine is shown it: a broken volume
        (Sandbox.break_volume) shows the failing disk instead. A disk whose volume is attached nowhere is
        taken away: unmounted in any machine that still has it mounted, then released."""
        bound = disks.loops_under([self._layout.volumes_dir])
        devices: dict[str, str] = {}
        for volume_id in sorted(attached):
            backing = self._layout.volume_file(volume_id)
            if not backing.is_file():
                continue  # attached before the sandbox knew it (a restart): made at its next first sighting
            device = disks.bind(backing, bound)
            if (self._layout.faults_dir / volume_id).exists():
                failing = disks.failing_disk_device(self._layout.failing_disk_dir)
                if failing is None:
                    continue  # broken, but its failing disk is not there yet: shown once it is
                device = failing
            devices[volume_id] = device
        for device, loop in sorted(bound.items()):
            if loop.back_file.name not in attached and not loop.released:
                disks.unbind(device, loop.back_file, _init_pids(records.values()))
                log.info("%s: attached nowhere; its disk %s is released", loop.back_file.name, device)
        return devices

    def _remove_deleted(self, volumes: Collection[str], now_s: float) -> None:
        """Remove the files of volumes EC2 has deleted: missing from several listings over a few seconds."""
        if not self._layout.volumes_dir.is_dir():
            return
        missing: dict[str, tuple[int, float]] = {}
        for backing in sorted(self._layout.volumes_dir.iterdir()):
            if backing.name in volumes or not _VOLUME_ID.match(backing.name):
                continue
            times, since_s = self._missing.get(backing.name, (0, now_s))
            times += 1
            if times >= _MISSING_LISTINGS_BEFORE_REMOVAL and now_s - since_s >= _MISSING_S_BEFORE_REMOVAL:
                # A deleted volume is attached nowhere: its disk was released when it was detached.
                if disks.loop_of(backing) is not None:
                    log.warning("%s: deleted in EC2 but its disk is still bound; removed once it is not", backing.name)
                    missing[backing.name] = (times, since_s)
                    continue
                backing.unlink(missing_ok=True)
                log.info(
                    "%s: deleted in EC2 (missing from %d listings); its file %s is gone", backing.name, times, backing
                )
                continue
            missing[backing.name] = (times, since_s)
        self._missing = missing

    def _show_devices(self, record: NodeRecord, devices: dict[str, str], seen_at_s: dict[str, float]) -> None:
        """Make the machine's device dir hold exactly these volumes, each a link to its disk (/dev/loopN), as
        /dev/disk/by-id links to an NVMe disk on EC2. The machine's /dev is the host's devtmpfs, so it sees a loop
        device bound after it booted. A broken volume's link is turned to the failing disk, and back on repair:
        the same disk, now failing (no udev event, as a disk going bad sends none)."""
        device_dir = Path(record.device_dir)
        try:
            # A name starting with a dot is a link being swapped in (below), not a volume.
            entries = [entry for entry in device_dir.iterdir() if not entry.name.startswith(".")]
            present = {entry.name: os.readlink(entry) for entry in entries}
        except FileNotFoundError:
            return  # the machine is being powered off or was never fully made
        for volume_id in sorted(devices.keys() - present.keys()):
            (device_dir / volume_id).symlink_to(devices[volume_id])
            log.info(
                "%s: volume %s appears at %s/%s (%s), %.2f s after the attach was seen",
                record.instance_id,
                volume_id,
                device_dir,
                volume_id,
                devices[volume_id],
                time.monotonic() - seen_at_s[volume_id],
            )
            self._udev.disk_added(record, volume_id)
        for volume_id in sorted(devices.keys() & present.keys()):
            if present[volume_id] != devices[volume_id]:
                swapped = device_dir / f".{volume_id}.swap"
                swapped.unlink(missing_ok=True)
                swapped.symlink_to(devices[volume_id])
                swapped.replace(device_dir / volume_id)  # at once: the machine never sees it missing
                log.info("%s: volume %s is now %s", record.instance_id, volume_id, devices[volume_id])
        for volume_id in sorted(present.keys() - devices.keys()):
            (device_dir / volume_id).unlink(missing_ok=True)
            log.info("%s: volume %s detached; gone from %s", record.instance_id, volume_id, device_dir)


def _init_pids(records: Collection[NodeRecord]) -> list[int]:
    """The init pids of the machines powered on now: the mount namespaces a disk may be mounted in."""
    pids = []
    for record in records:
        try:
            pids.append(node.init_pid(record))
        except (OSError, ProcessLookupError):
            continue  # off, or on its way off: its mounts go with it
    return pids
