"""What one observation of the world holds: plain, frozen values the planner decides from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from warmswarm_models import Resources

# Swarm task states after which a task never runs again.
TERMINAL_TASK_STATES = frozenset({"complete", "shutdown", "failed", "rejected", "orphaned", "remove"})
# EC2 states of an instance that is, or is about to be, a machine we pay for.
LIVE_INSTANCE_STATES = frozenset({"pending", "running"})

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    hostname: str
    state: str  # swarm node status: "ready", "down", "unknown", "disconnected"
    availability: str  # "active", "pause", "drain"
    role: str  # "worker" or "manager"
    resources: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # The instance id the node's own daemon declares (engine label); None for nodes we did not boot.
    engine_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    service_id: str
    service_name: str
    state: str  # swarm task state: "new", "pending", "assigned", ..., "running", "complete", ...
    desired_state: str
    reservations: Resources
    constraints: tuple[str, ...] = ()
    node_id: str | None = None
    err: str = ""  # Status.Err: why the scheduler could not place it
    # The labels of the task's service (the director writes the owner's cache policy there).
    service_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    # Of a global service (one task on every node, like a monitoring agent): it follows the nodes,
    # so it never keeps a node busy, and a new machine is never launched for it.
    global_service: bool = False

    @property
    def is_active(self) -> bool:
        """Not finished: it runs, or is on its way to run (a restart's new task included)."""
        return self.state not in TERMINAL_TASK_STATES and self.desired_state not in TERMINAL_TASK_STATES


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    instance_type: str
    availability_zone: str
    state: str  # EC2: "pending", "running", "shutting-down", "terminated", "stopping", "stopped"
    launched_at: float  # epoch seconds
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_INSTANCE_STATES


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    instance_id: str
    state: str  # "attaching", "attached", "detaching", "detached"
    attached_at: float  # epoch seconds (AttachTime)
    device: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    """An EBS cache volume of this cluster."""

    id: str
    availability_zone: str
    state: str  # "creating", "available", "in-use", "deleting", "deleted", "error"
    size_gib: int
    volume_type: str
    created_at: float  # epoch seconds
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    attachments: tuple[VolumeAttachment, ...] = ()


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    resources: Resources  # what the type offers, before the per-node overhead
    max_ebs_attachments: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The world as one cycle saw it, plus the bookkeeping earlier cycles left (may be lost)."""

    now: float  # epoch seconds
    nodes: tuple[Node, ...]
    tasks: tuple[Task, ...]
    instances: tuple[Instance, ...]  # this cluster's instances, any state but terminated
    instance_types: Mapping[str, InstanceType]
    volumes: tuple[Volume, ...] = ()  # this cluster's cache volumes
    # node id -> when it was first seen idle (epoch s); kept between cycles by the loop
    idle_since: Mapping[str, float] = field(default_factory=dict)
    # (instance type, availability zone) -> until when not to try it (epoch s)
    unavailable_offerings: Mapping[tuple[str, str], float] = field(default_factory=dict)
