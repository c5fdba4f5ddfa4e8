"""The Action values plan() returns and apply() carries out; each names its kind and target and says why.

`kind` is the action's label in metrics and logs; `target` is what it acts on (a node, an instance, a
volume; "<type> in <zone>" for a launch); `reason` is the sentence people read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Literal

from warmswarm_models import Owner, Resources


@dataclass(frozen=True, slots=True)
class Launch:
    kind: ClassVar[str] = "launch"
    instance_type: str
    availability_zone: str
    owner: Owner
    task_ids: tuple[str, ...]  # the pending tasks this machine is for
    demand: Resources  # what those tasks reserve, in all
    client_token: str  # makes a retried RunInstances return the same instance
    reason: str
    # The owner's cache volume this machine is for: the boot waits for it and mounts it.
    volume_id: str | None = None
    # The owner's warm tier, tagged on the machine: kept stopped this long once idle (0: terminated).
    warm_ttl_s: int = 0
    # For the warm buffer: no owner (NOBODY), no tasks; its boot pulls the buffer's images, then it is stopped.
    buffer: bool = False

    @property
    def target(self) -> str:
        return f"{self.instance_type} in {self.availability_zone}"


@dataclass(frozen=True, slots=True)
class LaunchBatch:
    """One RunInstances for several machines of one type in one zone, none of which carries a volume.

    The machines start anonymous (no owner tags): RunInstances tags every instance of a call alike. Each
    goes to an owner when its node joins: the planner binds it to pending work that fits (one owner per
    machine) and labels the node with that owner. `launches` are the per-owner decisions it serves.
    """

    kind: ClassVar[str] = "launch_batch"
    instance_type: str
    availability_zone: str
    launches: tuple[Launch, ...]
    client_token: str  # the seats' decisions together: a retried call returns the same instances
    reason: str

    @property
    def count(self) -> int:
        return len(self.launches)

    @property
    def target(self) -> str:
        return f"{self.count}x {self.instance_type} in {self.availability_zone}"


@dataclass(frozen=True, slots=True)
class TagInstance:
    """Owner tags on a machine launched anonymously and since bound (its node labelled): for billing and ops."""

    kind: ClassVar[str] = "tag_instance"
    instance_id: str
    tags: Mapping[str, str]
    reason: str

    @property
    def target(self) -> str:
        return self.instance_id


@dataclass(frozen=True, slots=True)
class LabelNode:
    kind: ClassVar[str] = "label_node"
    node_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""
    # Labelled and activated in one update; False leaves it drained (its owner's cache is not mounted).
    activate: bool = True

    @property
    def target(self) -> str:
        return self.node_id


@dataclass(frozen=True, slots=True)
class Drain:
    kind: ClassVar[str] = "drain"
    node_id: str
    reason: str

    @property
    def target(self) -> str:
        return self.node_id


@dataclass(frozen=True, slots=True)
class Activate:
    """Undo a drain: the node's owner has work for it again before it was terminated."""

    kind: ClassVar[str] = "activate"
    node_id: str
    reason: str

    @property
    def target(self) -> str:
        return self.node_id


@dataclass(frozen=True, slots=True)
class Stop:
    """An idle owner's machine kept stopped (the warm tier): disks, images and cache volume stay, compute stops.

    `warm_until` is tagged on the instance first, so that any replica (after a restart) knows how long to keep it.
    A buffer machine is stopped the same way once its images are pulled, with no warm-until: nobody's yet.
    """

    kind: ClassVar[str] = "stop"
    instance_id: str
    warm_until: float | None  # epoch s; None: a buffer machine, kept until an owner claims it
    reason: str

    @property
    def target(self) -> str:
        return self.instance_id


@dataclass(frozen=True, slots=True)
class Start:
    """Resume a warm machine for its owner's pending work: the same instance, node, labels and cache come back."""

    kind: ClassVar[str] = "start"
    instance_id: str
    reason: str

    @property
    def target(self) -> str:
        return self.instance_id


TerminationCause = Literal["idle", "start_timeout", "node_down", "stopped", "warm_expired", "start_failed"]


@dataclass(frozen=True, slots=True)
class Terminate:
    kind: ClassVar[str] = "terminate"
    instance_id: str
    reason: str
    # Why plan() terminates: a closed set, so metrics can count by it. Named at every decision, never assumed.
    cause: TerminationCause

    @property
    def target(self) -> str:
        return self.instance_id


@dataclass(frozen=True, slots=True)
class RemoveNode:
    kind: ClassVar[str] = "remove_node"
    node_id: str
    reason: str

    @property
    def target(self) -> str:
        return self.node_id


@dataclass(frozen=True, slots=True)
class CreateVolume:
    kind: ClassVar[str] = "create_volume"
    owner: Owner
    availability_zone: str
    size_gib: int
    volume_type: str
    ttl_s: int
    client_token: str
    reason: str

    @property
    def target(self) -> str:
        return f"{self.owner} in {self.availability_zone}"


@dataclass(frozen=True, slots=True)
class AttachVolume:
    kind: ClassVar[str] = "attach_volume"
    volume_id: str
    instance_id: str
    device: str
    reason: str

    @property
    def target(self) -> str:
        return self.volume_id


@dataclass(frozen=True, slots=True)
class DetachVolume:
    kind: ClassVar[str] = "detach_volume"
    volume_id: str
    instance_id: str
    force: bool
    reason: str

    @property
    def target(self) -> str:
        return self.volume_id


@dataclass(frozen=True, slots=True)
class TagVolume:
    kind: ClassVar[str] = "tag_volume"
    volume_id: str
    set_tags: Mapping[str, str] = field(default_factory=dict)
    remove_keys: tuple[str, ...] = ()
    reason: str = ""

    @property
    def target(self) -> str:
        return self.volume_id


@dataclass(frozen=True, slots=True)
class DeleteVolume:
    kind: ClassVar[str] = "delete_volume"
    volume_id: str
    reason: str

    @property
    def target(self) -> str:
        return self.volume_id


Action = (
    Launch
    | LaunchBatch
    | TagInstance
    | LabelNode
    | Drain
    | Activate
    | Terminate
    | Stop
    | Start
    | RemoveNode
    | CreateVolume
    | AttachVolume
    | DetachVolume
    | TagVolume
    | DeleteVolume
)

# Every kind an Action has, in a stable order (metric label values), and the operator's early expiry.
ACTION_TYPES: tuple[type[Action], ...] = (
    Launch,
    LaunchBatch,
    TagInstance,
    LabelNode,
    Drain,
    Activate,
    Terminate,
    Stop,
    Start,
    RemoveNode,
    CreateVolume,
    AttachVolume,
    DetachVolume,
    TagVolume,
    DeleteVolume,
)
EXPIRE_VOLUME = "expire_volume"  # not planned: an operator's POST /v1/volumes/{id}/expire
ACTION_KINDS: tuple[str, ...] = (*(t.kind for t in ACTION_TYPES), EXPIRE_VOLUME)


def identity(action: Action) -> tuple[str, str, str]:
    """What tells planned actions apart from cycle to cycle: kind, target, and for a launch its tasks
    (for a new volume its owner). Never the client token, which a later decision may change."""
    if isinstance(action, Launch):
        return (action.kind, action.target, ",".join(action.task_ids))
    if isinstance(action, LaunchBatch):
        return (action.kind, action.target, ",".join(t for launch in action.launches for t in launch.task_ids))
    if isinstance(action, CreateVolume):
        return (action.kind, action.target, str(action.owner))
    return (action.kind, action.target, "")
