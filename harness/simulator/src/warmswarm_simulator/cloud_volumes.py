"""The modelled EBS: create, attach, detach, tag and delete cache volumes, with AWS's rules and timings.

Rules AWS documents and the model enforces: a volume attaches only to an instance in its own zone, to one instance
at a time, only once it is "available", and only to a running or stopped instance; DeleteVolume needs "available".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from warmswarm_simulator.billing import CACHE, Meter
from warmswarm_simulator.cloud_values import CloudError, SimAttachment, SimInstance, SimVolume
from warmswarm_simulator.config import EbsTiming
from warmswarm_simulator.world import World

VolumeListener = Callable[[SimVolume], None]


class VolumeStore:
    def __init__(
        self, world: World, timing: EbsTiming, meter: Meter, instance: Callable[[str], SimInstance | None]
    ) -> None:
        self._world = world
        self._timing = timing
        self._meter = meter
        self._instance = instance
        self.volumes: dict[str, SimVolume] = {}
        self._by_token: dict[str, str] = {}
        self._deleted: set[str] = set()
        self._next = 0
        self.listeners: list[VolumeListener] = []
        self.version = 0  # bumped at every change: a reader may keep what it built from an unchanged store

    @property
    def created(self) -> int:
        return self._next

    def get(self, volume_id: str) -> SimVolume | None:
        return self.volumes.get(volume_id)

    def create(self, zone: str, size_gib: int, volume_type: str, tags: Mapping[str, str], token: str) -> str:
        """A new blank volume, "creating" then "available"; the same token answers the same volume."""
        if token and token in self._by_token:
            volume_id = self._by_token[token]
            if volume_id in self._deleted:
                raise CloudError("CreateVolume", "TokenSpent", f"client token {token} made {volume_id}, now deleted")
            return volume_id
        self._next += 1
        volume_id = f"vol-{self._next:017x}"
        now_s = self._world.now_s
        volume = SimVolume(volume_id, zone, size_gib, volume_type, dict(tags), now_s, self._world.day_epoch_s)
        self.volumes[volume_id] = volume
        if token:
            self._by_token[token] = volume_id
        self._meter.disk_created(volume_id, CACHE, size_gib, now_s)
        self._changed(volume)
        self._world.after(self._timing.create_s, self._created, volume, volume.generation)
        return volume_id

    def _created(self, volume: SimVolume, generation: int) -> None:
        if volume.generation == generation and volume.state == "creating":
            volume.state = "available"
            self._changed(volume)

    def attach(self, volume_id: str, instance_id: str, device: str) -> None:
        volume = self._existing("AttachVolume", volume_id)
        instance = self._instance(instance_id)
        if instance is None or instance.state in ("shutting-down", "terminated"):
            raise CloudError("AttachVolume", "InvalidInstanceID.NotFound", f"no instance {instance_id}")
        if volume.availability_zone != instance.availability_zone:
            raise CloudError(
                "AttachVolume",
                "InvalidVolume.ZoneMismatch",
                f"{volume_id} is in {volume.availability_zone}, {instance_id} in {instance.availability_zone}",
            )
        if volume.attachment is not None or volume.state == "in-use":
            raise CloudError("AttachVolume", "VolumeInUse", f"{volume_id} is attached to another instance")
        if volume.state != "available":
            raise CloudError("AttachVolume", "IncorrectState", f"{volume_id} is {volume.state}")
        if instance.state not in ("running", "stopped"):
            raise CloudError("AttachVolume", "IncorrectInstanceState", f"{instance_id} is {instance.state}")
        volume.state = "in-use"
        volume.attachment = SimAttachment(instance_id, "attaching", self._world.now_s, device)
        self._changed(volume)
        self._world.after(self._timing.attach_s, self._attached, volume, volume.generation)

    def _attached(self, volume: SimVolume, generation: int) -> None:
        if volume.generation == generation and volume.attachment is not None:
            volume.attachment.state = "attached"
            self._changed(volume)

    def detach(self, volume_id: str, instance_id: str) -> None:
        volume = self._existing("DetachVolume", volume_id)
        attachment = volume.attachment
        if attachment is None or attachment.instance_id != instance_id:
            raise CloudError("DetachVolume", "IncorrectState", f"{volume_id} is not attached to {instance_id}")
        if attachment.state == "detaching":
            return
        attachment.state = "detaching"
        self._changed(volume)
        self._world.after(self._timing.detach_s, self._detached, volume, volume.generation)

    def _detached(self, volume: SimVolume, generation: int) -> None:
        if volume.generation == generation:
            self.release(volume)

    def release(self, volume: SimVolume) -> None:
        """Detached: "available" again (what terminating its instance does too, DeleteOnTermination being false)."""
        volume.attachment = None
        volume.state = "available"
        self._changed(volume)

    def released_by(self, instance: SimInstance) -> None:
        """Its instance terminated: every volume attached to it is available again, data kept."""
        for volume in list(self.volumes.values()):
            if volume.attachment is not None and volume.attachment.instance_id == instance.id:
                self.release(volume)

    def attached_to(self, instance_id: str) -> list[SimVolume]:
        return [
            v
            for v in self.volumes.values()
            if v.attachment is not None and v.attachment.instance_id == instance_id and v.attachment.state == "attached"
        ]

    def set_tags(self, volume_id: str, tags: Mapping[str, str]) -> None:
        volume = self._existing("CreateTags", volume_id)
        volume.tags.update(tags)
        self._changed(volume)

    def delete_tags(self, volume_id: str, keys: Iterable[str]) -> None:
        volume = self._existing("DeleteTags", volume_id)
        for key in keys:
            volume.tags.pop(key, None)
        self._changed(volume)

    def delete(self, volume_id: str) -> None:
        volume = self.volumes.get(volume_id)
        if volume is None:
            return  # already gone: not an error, as for AWS's InvalidVolume.NotFound the adapter ignores
        if volume.state != "available" or volume.attachment is not None:
            raise CloudError("DeleteVolume", "VolumeInUse", f"{volume_id} is {volume.state}")
        del self.volumes[volume_id]
        self._deleted.add(volume_id)
        volume.state = "deleted"
        self._meter.disk_deleted(volume_id, self._world.now_s)
        self._changed(volume)

    def _existing(self, operation: str, volume_id: str) -> SimVolume:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise CloudError(operation, "InvalidVolume.NotFound", f"no volume {volume_id}")
        return volume

    def _changed(self, volume: SimVolume) -> None:
        self.version += 1
        volume.changed()
        for listener in self.listeners:
            listener(volume)
