"""The modelled EBS: create, attach, detach, grow, tag and delete cache volumes, with AWS's timings.

AWS's rules (a volume attaches only to an instance in its own zone, to one instance at a time, only once it is
"available", and only to a running or stopped instance; DeleteVolume needs "available"; ClientTokens) are
warmswarm_ec2rules'; this store keeps the volumes, their timers and their meter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from warmswarm_ec2rules import instances, volumes
from warmswarm_ec2rules.modifications import Modification, Timing, modify_refusal
from warmswarm_ec2rules.refusals import Refusal, instance_not_found, volume_not_found
from warmswarm_ec2rules.tokens import ClientTokens

from warmswarm_simulator.billing import CACHE, Meter
from warmswarm_simulator.cloud_values import CloudError, SimAttachment, SimInstance, SimVolume, SpentToken
from warmswarm_simulator.config import EbsTiming
from warmswarm_simulator.world import World

VolumeListener = Callable[[SimVolume], None]
# A size change's modifying and optimizing (AWS: seconds, then minutes to hours by the volume's size; the model keeps
# one figure), and AWS's six hours between two modifications of a volume (warmswarm_ec2rules.modifications).
# [assumed] 30 s and 600 s: AWS publishes no duration, only that the new size is usable from "optimizing" on (which
# is what the 30 s delays); no sensitivity row yet. The six hours is AWS's documented rule.
MODIFICATION_TIMING = Timing(modifying_s=30.0, optimizing_s=600.0)


class VolumeStore:
    def __init__(
        self, world: World, timing: EbsTiming, meter: Meter, instance: Callable[[str], SimInstance | None]
    ) -> None:
        self._world = world
        self._timing = timing
        self._meter = meter
        self._instance = instance
        self.volumes: dict[str, SimVolume] = {}
        self._tokens: ClientTokens[str] = ClientTokens()
        self._deleted: set[str] = set()
        self._next = 0
        self.listeners: list[VolumeListener] = []
        self._modifications: dict[str, Modification] = {}  # volume id -> its last modification
        self.grown = 0  # ModifyVolume calls that took
        self.version = 0  # bumped at every change: a reader may keep what it built from an unchanged store

    @property
    def created(self) -> int:
        return self._next

    def get(self, volume_id: str) -> SimVolume | None:
        return self.volumes.get(volume_id)

    def create(self, zone: str, size_gib: int, volume_type: str, tags: Mapping[str, str], token: str) -> str:
        """A new blank volume, "creating" then "available"; the same token answers the same volume (SpentToken
        once it is deleted)."""
        arguments = (zone, size_gib, volume_type, tuple(sorted(tags.items())))
        replay = self._tokens.recall("CreateVolume", token, arguments)
        if isinstance(replay, Refusal):
            raise CloudError("CreateVolume", replay)
        if replay is not None:
            if replay.answer in self._deleted:
                raise SpentToken(token, replay.answer)
            return replay.answer
        self._next += 1
        volume_id = f"vol-{self._next:017x}"
        now_s = self._world.now_s
        volume = SimVolume(volume_id, zone, size_gib, volume_type, dict(tags), now_s, self._world.day_epoch_s)
        self.volumes[volume_id] = volume
        self._tokens.remember("CreateVolume", token, arguments, volume_id, succeeded=True)
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
        if instance is None or instance.state == instances.TERMINATED:
            raise CloudError("AttachVolume", instance_not_found(instance_id))
        seen = volumes.Ec2Instance(instance.id, instance.availability_zone, instance.state)
        refused = volumes.attach_refusal(_seen(volume), seen)
        if refused is not None:
            raise CloudError("AttachVolume", refused)
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
        refused = volumes.detach_refusal(_seen(volume), instance_id)
        if refused is not None:
            raise CloudError("DetachVolume", refused)
        assert volume.attachment is not None  # the rule refuses a volume without one
        volume.attachment.state = "detaching"
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

    def modify(self, volume_id: str, size_gib: int) -> None:
        """ModifyVolume of its size, by AWS's rules: only larger, one at a time, six hours apart. The size is the
        target's at once, as DescribeVolumes shows it, and billed from now; usable once "modifying" is over."""
        volume = self._existing("ModifyVolume", volume_id)
        now_s = self._world.now_s
        last = self._modifications.get(volume_id)
        refused = modify_refusal(volume_id, volume.state, volume.size_gib, size_gib, last, now_s, MODIFICATION_TIMING)
        if refused is not None:
            raise CloudError("ModifyVolume", refused)
        self._modifications[volume_id] = Modification(volume_id, volume.size_gib, size_gib, now_s)
        # The file system keeps the old size until AWS lets the new one be used (EBS User Guide, "Monitor the progress
        # of volume modifications": the new size is usable once the modification is "optimizing"); the node's grow
        # of its file system then is quick (seconds), counted in no figure.
        volume.usable_gib = volume.usable_size_gib
        volume.size_gib = size_gib
        self.grown += 1
        self._meter.disk_resized(volume_id, size_gib, now_s)
        self._changed(volume, transition=False)
        self._world.after(MODIFICATION_TIMING.modifying_s, self._usable, volume, size_gib)

    def _usable(self, volume: SimVolume, size_gib: int) -> None:
        """AWS's modification reached "optimizing": the file system grows into the new size."""
        if volume.state != "deleted" and volume.size_gib == size_gib:
            volume.usable_gib = None
            self._changed(volume, transition=False)

    def set_tags(self, volume_id: str, tags: Mapping[str, str]) -> None:
        volume = self._existing("CreateTags", volume_id)
        volume.tags.update(tags)
        self._changed(volume, transition=False)

    def delete_tags(self, volume_id: str, keys: Iterable[str]) -> None:
        volume = self._existing("DeleteTags", volume_id)
        for key in keys:
            volume.tags.pop(key, None)
        self._changed(volume, transition=False)

    def delete(self, volume_id: str) -> None:
        volume = self.volumes.get(volume_id)
        if volume is None:
            return  # already gone: not an error, as for AWS's InvalidVolume.NotFound the adapter ignores
        refused = volumes.delete_refusal(_seen(volume))
        if refused is not None:
            raise CloudError("DeleteVolume", refused)
        del self.volumes[volume_id]
        self._deleted.add(volume_id)
        volume.state = "deleted"
        self._meter.disk_deleted(volume_id, self._world.now_s)
        self._changed(volume)

    def _existing(self, operation: str, volume_id: str) -> SimVolume:
        volume = self.volumes.get(volume_id)
        if volume is None:
            raise CloudError(operation, volume_not_found(volume_id))
        return volume

    def _changed(self, volume: SimVolume, *, transition: bool = True) -> None:
        """Tell the readers; `transition`: its state or attachment changed, which supersedes a pending timer."""
        self.version += 1
        if transition:
            volume.transitioned()
        else:
            volume.touch()
        for listener in self.listeners:
            listener(volume)


def _seen(volume: SimVolume) -> volumes.EbsVolume:
    """The volume as the rules read it."""
    attachment = volume.attachment
    if attachment is None:
        return volumes.EbsVolume(volume.id, volume.availability_zone, volume.state)
    return volumes.EbsVolume(
        volume.id, volume.availability_zone, volume.state, attachment.state, attachment.instance_id
    )
