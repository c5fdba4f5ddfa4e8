"""The Action values plan() returns and apply() carries out: each says what it means, with typed fields, and why.

Every action describes itself: `kind` is its label in metrics (a closed set, one per kind of change made to the
world; several intents may share one, as binding and claiming a machine both tag an instance), `target` what it
acts on (a node, an instance, a volume; "<type> in <zone>" for a launch), `title` how the journal and /v1/status
name it, `reason` the sentence people read, and `log_fields()` what a log line carries. No action holds a tag or
label string: tags.py writes them, from these fields, at apply time. The machines' and nodes' actions are here, the
volumes' in volumes.py, what every action says of itself in base.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Literal

from warmswarm_models import Owner, Resources

from warmswarm_autoscaling.actions.base import _Described
from warmswarm_autoscaling.actions.recycle import MarkScrubbed, RecycleMachine, StripOwner
from warmswarm_autoscaling.actions.volumes import (
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    ExpireVolume,
    GrowVolume,
    ReleaseVolume,
    RenewVolume,
    SetVolumeTtl,
)

__all__ = [
    "ACTION_KINDS",
    "ACTION_TYPES",
    "Action",
    "Activate",
    "AttachVolume",
    "BindMachine",
    "ClaimBufferMachine",
    "CreateVolume",
    "DeleteVolume",
    "DetachVolume",
    "Drain",
    "ExpireVolume",
    "GrowVolume",
    "LabelNode",
    "Launch",
    "LaunchBatch",
    "LaunchPurpose",
    "MarkScrubbed",
    "RecycleMachine",
    "ReleaseVolume",
    "RemoveNode",
    "RenewVolume",
    "SetVolumeTtl",
    "Start",
    "Stop",
    "StripOwner",
    "Terminate",
    "TerminationCause",
    "identity",
]

# Why a machine is launched (the launch metric's label): pending tasks, or the warm buffer's refill.
LaunchPurpose = Literal["pending_work", "buffer", "hot_buffer"]
TerminationCause = Literal[
    "idle",
    "start_timeout",
    "node_down",
    "stopped",
    "warm_expired",
    "start_failed",
    "volume_missing",
    "outgrown",
    "buffer_surplus",
    "scrub_unproven",
    "stale",
]


@dataclass(frozen=True, slots=True)
class Launch(_Described):
    kind: ClassVar[str] = "launch"
    verb: ClassVar[str] = "Launch"
    instance_type: str
    availability_zone: str
    owner: Owner  # NOBODY for the buffer's machines
    task_ids: tuple[str, ...]  # the pending tasks this machine is for
    demand: Resources  # what those tasks reserve, in all
    client_token: str  # makes a retried RunInstances return the same instance
    reason: str
    # The owner's cache volume this machine is for: the boot waits for it and mounts it.
    volume_id: str | None = None
    # The CreateVolume (its client_token) of this plan whose id apply gives it; no launch if that create fails.
    volume_token: str | None = None
    # The owner's warm tier, tagged on the machine: kept stopped this long once idle (0: terminated).
    warm_ttl_s: int = 0
    # The owner's group lets the machine be recycled once idle (tagged: plan/recycle.py reads it when idle).
    recyclable: bool = False
    # Pending work, or the warm buffer (no owner, no tasks; its boot pulls the buffer's images, then it is stopped).
    purpose: LaunchPurpose = "pending_work"

    @property
    def target(self) -> str:
        return f"{self.instance_type} in {self.availability_zone}"

    def details(self) -> Mapping[str, object]:
        return {"owner": str(self.owner), "purpose": self.purpose}


@dataclass(frozen=True, slots=True)
class LaunchBatch(_Described):
    """One RunInstances for several machines of one type in one zone, none of which carries a volume.

    The machines start anonymous (no owner tags): RunInstances tags every instance of a call alike. Each
    goes to an owner when its node joins: the planner binds it to pending work that fits (one owner per
    machine) and labels the node with that owner. `launches` are the per-owner decisions it serves.
    """

    kind: ClassVar[str] = "launch_batch"
    verb: ClassVar[str] = "LaunchBatch"
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

    def details(self) -> Mapping[str, object]:
        return {"machines": self.count}


@dataclass(frozen=True, slots=True)
class BindMachine(_Described):
    """A machine launched in a batch, whose node was labelled for an owner, gets that owner's tags: the bill by
    owner, the console, a view of the machine that does not need the swarm (the labels already decide)."""

    kind: ClassVar[str] = "tag_instance"
    verb: ClassVar[str] = "BindMachine"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    owner: Owner
    reason: str

    def details(self) -> Mapping[str, object]:
        return {"owner": str(self.owner)}


@dataclass(frozen=True, slots=True)
class ClaimBufferMachine(_Described):
    """A buffer machine becomes one owner's for good: their ids, their cache volume, their warm tier; then the
    volume's attach. A stopped one (the warm buffer) gets a warm-until a start timeout away (it expires if its work
    is gone first) and its per-boot unit mounts the volume; a running one (`hot`, warm_until None) is stamped with
    the claim's moment and mounts the volume as it attaches (node_cache.sh's hot mode)."""

    kind: ClassVar[str] = "tag_instance"
    verb: ClassVar[str] = "ClaimBufferMachine"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    owner: Owner
    volume_id: str | None  # None: the owner's work keeps no cache
    warm_ttl_s: int  # the owner's warm tier (0: none)
    warm_until: float | None  # epoch s; None for a hot claim (the machine runs)
    reason: str
    hot: bool = False
    # epoch s, AWS's clock: an arrival (demand.py), a hot claim's start of hot_attach_s, a session's start path
    claimed_at: float | None = None
    # The CreateVolume (its client_token) of this plan whose id apply gives it; no claim if that create fails.
    volume_token: str | None = None
    # The owner's group lets the machine be recycled once idle (tagged with the claim).
    recyclable: bool = False

    def details(self) -> Mapping[str, object]:
        return {"owner": str(self.owner), "volume_id": self.volume_id, "hot": self.hot}


@dataclass(frozen=True, slots=True)
class LabelNode(_Described):
    """A node that joined gets its owner's labels and the machine's (instance, type, zone, the cache volume it was
    launched for, mounted by its boot), and is activated in the same update."""

    kind: ClassVar[str] = "label_node"
    verb: ClassVar[str] = "LabelNode"
    target_field: ClassVar[str] = "node_id"
    node_id: str
    owner: Owner
    instance_id: str
    instance_type: str
    availability_zone: str
    volume_id: str | None
    reason: str

    def details(self) -> Mapping[str, object]:
        return {"owner": str(self.owner), "instance_id": self.instance_id}


@dataclass(frozen=True, slots=True)
class Drain(_Described):
    """Move the node's work elsewhere and give it no more. `if_still_idle`: the node was idle when observed; apply
    reads its tasks again right before, and a task placed on it since (its owner came back meanwhile) stops it."""

    kind: ClassVar[str] = "drain"
    verb: ClassVar[str] = "Drain"
    target_field: ClassVar[str] = "node_id"
    node_id: str
    reason: str
    if_still_idle: bool = False


@dataclass(frozen=True, slots=True)
class Activate(_Described):
    """Undo a drain: the node's owner has work for it again before it was terminated."""

    kind: ClassVar[str] = "activate"
    verb: ClassVar[str] = "Activate"
    target_field: ClassVar[str] = "node_id"
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Stop(_Described):
    """An idle owner's machine kept stopped (the warm tier): disks, images and cache volume stay, compute stops.

    `warm_until` is tagged on the instance first, so that any replica (after a restart) knows how long to keep it.
    A buffer machine is stopped the same way once its images are pulled, with no warm-until: nobody's yet.
    """

    kind: ClassVar[str] = "stop"
    verb: ClassVar[str] = "Stop"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    warm_until: float | None  # epoch s; None: a buffer machine, kept until an owner claims it
    reason: str


@dataclass(frozen=True, slots=True)
class Start(_Described):
    """Resume a warm machine for its owner's pending work: the same instance, node, labels and cache come back."""

    kind: ClassVar[str] = "start"
    verb: ClassVar[str] = "Start"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    reason: str
    # AWS's clock, tagged just before the start (warmswarm:started-at): a session's start path reads it.
    started_at: float | None = None


@dataclass(frozen=True, slots=True)
class Terminate(_Described):
    kind: ClassVar[str] = "terminate"
    verb: ClassVar[str] = "Terminate"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    reason: str
    # Why plan() terminates: a closed set, so metrics can count by it. Named at every decision, never assumed.
    cause: TerminationCause

    def details(self) -> Mapping[str, object]:
        return {"cause": self.cause}


@dataclass(frozen=True, slots=True)
class RemoveNode(_Described):
    kind: ClassVar[str] = "remove_node"
    verb: ClassVar[str] = "RemoveNode"
    target_field: ClassVar[str] = "node_id"
    node_id: str
    reason: str


Action = (
    Launch
    | LaunchBatch
    | BindMachine
    | ClaimBufferMachine
    | LabelNode
    | Drain
    | Activate
    | Terminate
    | Stop
    | Start
    | RemoveNode
    | RecycleMachine
    | StripOwner
    | MarkScrubbed
    | CreateVolume
    | AttachVolume
    | DetachVolume
    | GrowVolume
    | ReleaseVolume
    | RenewVolume
    | SetVolumeTtl
    | DeleteVolume
    | ExpireVolume
)

# Every type an Action has, in a stable order; their kinds, once each, are the metric's label values.
ACTION_TYPES: tuple[type[Action], ...] = (
    Launch,
    LaunchBatch,
    BindMachine,
    ClaimBufferMachine,
    LabelNode,
    Drain,
    Activate,
    Terminate,
    Stop,
    Start,
    RemoveNode,
    RecycleMachine,
    StripOwner,
    MarkScrubbed,
    CreateVolume,
    AttachVolume,
    DetachVolume,
    GrowVolume,
    ReleaseVolume,
    RenewVolume,
    SetVolumeTtl,
    DeleteVolume,
    ExpireVolume,
)
ACTION_KINDS: tuple[str, ...] = tuple(dict.fromkeys(t.kind for t in ACTION_TYPES))


def identity(action: Action) -> tuple[str, str, str]:
    """What tells planned actions apart from cycle to cycle: what it is, its target, and for a launch its tasks
    (for a new volume its owner). Never the client token, which a later decision may change."""
    if isinstance(action, Launch):
        return (action.verb, action.target, ",".join(action.task_ids))
    if isinstance(action, LaunchBatch):
        return (action.verb, action.target, ",".join(t for launch in action.launches for t in launch.task_ids))
    if isinstance(action, CreateVolume):
        return (action.verb, action.target, str(action.owner))
    return (action.verb, action.target, "")
