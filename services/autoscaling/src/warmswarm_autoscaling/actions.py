"""The Action values plan() returns and apply() carries out; each says why in `reason`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class RemoveNode:
    node_id: str
    reason: str


Action = Launch | LabelNode | Drain | Activate | Terminate | RemoveNode
