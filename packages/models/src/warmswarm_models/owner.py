"""Owner of a piece of work (user, project, node) and its placement constraints."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from warmswarm_models.constraint import Constraint
from warmswarm_models.keys import OWNER_KEYS

# Ids become swarm labels and EC2 tag values: keep them to a safe, unambiguous alphabet. Lower case
# only: swarm compares constraint values without regard to case, so the tasks of "Alice" would be
# placed on the nodes of "alice" (and see her cache). Refusing such an id keeps users apart.
_ID_PATTERN: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")


class InvalidOwner(ValueError):
    """An owner id or constraint that cannot be used as a label; the message says which and why."""


def _check_id(key: str, value: str) -> str:
    if not _ID_PATTERN.fullmatch(value):
        raise InvalidOwner(
            f"{key}={value!r} is not a valid id: use 1-128 characters of lower-case letters, digits, '.', '_'"
            " or '-', starting with a letter or digit (swarm matches constraints regardless of case,"
            " so ids that differ only in case would share machines)"
        )
    return value


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a node or a task belongs to. An owner with no ids is 'nobody': shared, unowned work."""

    user_id: str | None = None
    project_id: str | None = None
    node_id: str | None = None

    def __post_init__(self) -> None:
        for key, value in self.items():
            _check_id(key, value)

    def items(self) -> list[tuple[str, str]]:
        """The ids that are set, in the order of OWNER_KEYS."""
        user_key, project_key, node_key = OWNER_KEYS
        items = []
        if self.user_id is not None:
            items.append((user_key, self.user_id))
        if self.project_id is not None:
            items.append((project_key, self.project_id))
        if self.node_id is not None:
            items.append((node_key, self.node_id))
        return items

    @property
    def is_nobody(self) -> bool:
        return self.user_id is None and self.project_id is None and self.node_id is None

    def labels(self) -> dict[str, str]:
        """Swarm node labels (and EC2 tags) that mark a node as this owner's."""
        return dict(self.items())

    def constraints(self) -> list[str]:
        """Placement constraints that pin a service to this owner's nodes."""
        return [str(Constraint.label_equals(key, value)) for key, value in self.items()]

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Owner:
        """The owner a node's labels (or an instance's tags) declare; other keys are ignored."""
        user_key, project_key, node_key = OWNER_KEYS
        if cls is not Owner:
            return cls(labels.get(user_key), labels.get(project_key), labels.get(node_key))
        return _interned(labels.get(user_key), labels.get(project_key), labels.get(node_key))

    def __str__(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.items()) or "nobody"


@functools.lru_cache(maxsize=65_536)
def _interned(user_id: str | None, project_id: str | None, node_id: str | None) -> Owner:
    """One Owner per distinct ids, checked once: every cycle reads each owner's node, instance, volume and
    tasks again, and at 10,000 nodes checking the same ids each time was a fifth of an idle cycle's CPU."""
    return Owner(user_id, project_id, node_id)


def parse_constraints(constraints: Iterable[str]) -> tuple[Owner, list[str]]:
    """Split swarm placement constraints into the owner they pin to and the rest (stripped, as written).

    Raises InvalidOwner for an owner constraint that is malformed or contradicts another.
    """
    ids: dict[str, str] = {}
    rest: list[str] = []
    for raw in constraints:
        constraint = Constraint.parse(raw)
        if constraint.label in OWNER_KEYS and constraint.op == "==" and constraint.key.startswith("node.labels."):
            label = constraint.label
            assert label is not None
            if label in ids and ids[label] != constraint.value:
                raise InvalidOwner(f"constraints ask for {label}=={ids[label]} and {label}=={constraint.value}")
            ids[label] = _check_id(label, constraint.value)
        else:
            rest.append(raw.strip())
    return Owner(**ids), rest
