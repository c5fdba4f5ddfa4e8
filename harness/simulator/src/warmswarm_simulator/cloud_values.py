"""The modelled cloud's mutable records (instances, volumes, attachments) and AWS's error, with the typed views the
autoscaler reads (built with its own readings.py, exactly as its adapters build them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from warmswarm_autoscaling.readings import read_instance, read_volume
from warmswarm_autoscaling.snapshot import Instance, Volume, VolumeAttachment
from warmswarm_ec2rules.refusals import Refusal

# Instance states in which it exists for AWS (listed by DescribeInstances with the autoscaler's filter).
LISTED_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


class CloudError(Exception):
    """An EC2 error answer to `operation`: AWS's refusal (code such as InvalidVolume.ZoneMismatch, message, status)."""

    def __init__(self, operation: str, refusal: Refusal) -> None:
        super().__init__(f"{operation}: {refusal.code}: {refusal.message}")
        self.operation = operation
        self.refusal = refusal

    @property
    def code(self) -> str:
        return self.refusal.code

    @property
    def message(self) -> str:
        return self.refusal.message


class SpentToken(Exception):
    """A CreateVolume token replayed after its volume was deleted: AWS answers (the volume, "deleted"), no error."""

    def __init__(self, token: str, volume_id: str) -> None:
        super().__init__(f"client token {token} made {volume_id}, now deleted")
        self.token = token
        self.volume_id = volume_id


@dataclass(slots=True)
class SimInstance:
    id: str
    instance_type: str
    availability_zone: str
    private_ip: str
    tags: dict[str, str]
    launched_at_s: float  # day seconds of the RunInstances call (AWS's LaunchTime)
    day_epoch_s: float
    state: str = "pending"
    # Bumped at every state change: a timer set for an earlier state finds it changed and does nothing.
    generation: int = 0
    boots: int = 0  # how many times it came up "running" (1 after launch, +1 per start)
    started_s: float | None = None  # day seconds of its last StartInstances; None: never started again
    _value: Instance | None = None

    def set_state(self, state: str) -> None:
        self.state = state
        self.generation += 1
        self._value = None

    def touch(self) -> None:
        self._value = None

    def value(self) -> Instance:
        if self._value is None:
            self._value = read_instance(
                id=self.id,
                instance_type=self.instance_type,
                availability_zone=self.availability_zone,
                state=self.state,
                launched_at=self.day_epoch_s + self.launched_at_s,
                tags=self.tags,
                private_ip=self.private_ip,
            )
        return self._value


@dataclass(slots=True)
class SimAttachment:
    instance_id: str
    state: str  # "attaching", "attached", "detaching"
    since_s: float  # day seconds of the AttachVolume call (AWS's AttachTime)
    device: str


@dataclass(slots=True)
class SimVolume:
    id: str
    availability_zone: str
    size_gib: int
    volume_type: str
    tags: dict[str, str]
    created_s: float
    day_epoch_s: float
    state: str = "creating"
    attachment: SimAttachment | None = None
    # Bumped at every change of its state or attachment: a timer set for an earlier one (a create, attach or
    # detach in progress) finds it superseded and does nothing. A tag change is no such change (AWS completes an
    # attach whatever CreateTags does meanwhile): it only touches the value.
    generation: int = 0
    # What it holds: the keys of the projects whose data was written to it (a new volume is blank).
    data: set[str] = field(default_factory=set)
    # How much it holds, GB (cache_writes.py), and the size its file system can use, GiB: None while that is the size
    # AWS provisioned; the old size from a ModifyVolume until AWS makes the new one usable (its "optimizing").
    used_gb: float = 0.0
    usable_gib: int | None = None
    _value: Volume | None = None

    @property
    def usable_size_gib(self) -> int:
        return self.size_gib if self.usable_gib is None else self.usable_gib

    def transitioned(self) -> None:
        self.generation += 1
        self._value = None

    def touch(self) -> None:
        self._value = None

    def value(self) -> Volume:
        if self._value is None:
            attachments: tuple[VolumeAttachment, ...] = ()
            if self.attachment is not None:
                a = self.attachment
                attachments = (VolumeAttachment(a.instance_id, a.state, self.day_epoch_s + a.since_s, a.device),)
            self._value = read_volume(
                id=self.id,
                availability_zone=self.availability_zone,
                state=self.state,
                size_gib=self.size_gib,
                volume_type=self.volume_type,
                created_at=self.day_epoch_s + self.created_s,
                tags=self.tags,
                attachments=attachments,
            )
        return self._value
