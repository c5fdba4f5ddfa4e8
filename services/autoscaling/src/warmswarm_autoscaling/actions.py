"""The Action values plan() returns and apply() carries out; each says why in `reason`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from warmswarm_models import Owner, Resources


@dataclass(frozen=True, slots=True)
class Launch:
    instance_type: str
    availability_zone: str
    owner: Owner
    task_ids: tuple[str, ...]  # the pending tasks this machine is for
    demand: Resources  # what those tasks reserve, in all
    client_token: str  # makes a retried RunInstances return the same instance
    reason: str
    # The owner's cache volume this machine is for: the boot waits for it and mounts it.
    volume_id: str | None = None


@dataclass(frozen=True, slots=True)
class LabelNode:
    node_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Drain:
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Activate:
    """Undo a drain: the node's owner has work for it again before it was terminated."""

    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Terminate:
    instance_id: str
    reason: str
    # Which of plan()'s two reasons to terminate: a closed set, so metrics can count by it.
    cause: Literal["idle", "start_timeout", "node_down"] = "idle"


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class CreateVolume:
    owner: Owner
    availability_zone: str
    size_gib: int
    volume_type: str
    ttl_s: int
    client_token: str
    reason: str


@dataclass(frozen=True, slots=True)
class AttachVolume:
    volume_id: str
    instance_id: str
    device: str
    reason: str


@dataclass(frozen=True, slots=True)
class DetachVolume:
    volume_id: str
    instance_id: str
    force: bool
    reason: str


@dataclass(frozen=True, slots=True)
class TagVolume:
    volume_id: str
    set_tags: Mapping[str, str] = field(default_factory=dict)
    remove_keys: tuple[str, ...] = ()
    reason: str = ""


@dataclass(frozen=True, slots=True)
class DeleteVolume:
    volume_id: str
    reason: str


Action = (
    Launch
    | LabelNode
    | Drain
    | Activate
    | Terminate
    | RemoveNode
    | CreateVolume
    | AttachVolume
    | DetachVolume
    | TagVolume
    | DeleteVolume
)
