"""Where a task may go: swarm's owner and constraint rules against a node, or a node warmswarm would launch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from warmswarm_models import Owner
from warmswarm_models.constraint import LABEL_PREFIX, Constraint

from warmswarm_autoscaling.snapshot import Node

# What a new node of ours looks like to a placement constraint before it exists.
_NEW_NODE_ATTRIBUTES: Final[Mapping[str, str]] = {
    "node.role": "worker",
    "node.platform.os": "linux",
    "node.platform.arch": "x86_64",
}


def owner_fits(task_owner: Owner, node_owner: Owner) -> bool:
    """Swarm's rule (every owner constraint matches a label), plus ours: unowned work stays off owned nodes."""
    if task_owner.is_nobody:
        return node_owner.is_nobody
    return (
        (task_owner.user_id is None or task_owner.user_id == node_owner.user_id)
        and (task_owner.project_id is None or task_owner.project_id == node_owner.project_id)
        and (task_owner.node_id is None or task_owner.node_id == node_owner.node_id)
    )


def node_attributes(node: Node) -> dict[str, str]:
    attributes = dict(_NEW_NODE_ATTRIBUTES)
    attributes["node.role"] = node.role
    attributes["node.hostname"] = node.hostname
    attributes["node.id"] = node.id
    attributes.update({LABEL_PREFIX + k: v for k, v in node.labels.items()})
    return attributes


def new_node_attributes(owner: Owner) -> dict[str, str]:
    attributes = dict(_NEW_NODE_ATTRIBUTES)
    attributes.update({LABEL_PREFIX + k: v for k, v in owner.items()})
    return attributes


def all_hold(constraints: Iterable[Constraint], attributes: Mapping[str, str]) -> bool:
    return all(constraint.holds(attributes) for constraint in constraints)


def first_unmet_on_new_node(constraints: Iterable[Constraint], owner: Owner) -> Constraint | None:
    """A constraint no machine warmswarm launches for `owner` can meet, or None."""
    constraints = tuple(constraints)
    if not constraints:
        return None  # most tasks carry only their owner's constraints, which are held apart
    attributes = new_node_attributes(owner)
    return next((c for c in constraints if not c.holds(attributes)), None)
