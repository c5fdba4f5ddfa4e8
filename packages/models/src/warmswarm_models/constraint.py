"""Swarm placement constraints as values: one `Constraint` the director writes and the planner evaluates."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

LABEL_PREFIX: Final = "node.labels."

Operator = Literal["==", "!=", ""]


@dataclass(frozen=True, slots=True)
class Constraint:
    """`key==value` or `key!=value`, as swarm reads it; `op` "" marks text swarm would not accept (never holds)."""

    key: str
    op: Operator
    value: str

    @classmethod
    def parse(cls, text: str) -> Constraint:
        stripped = text.strip()
        for op in ("==", "!="):
            if op in stripped:
                key, _, value = stripped.partition(op)
                return cls(key.strip(), op, value.strip())
        return cls(stripped, "", "")

    @classmethod
    def label_equals(cls, label: str, value: str) -> Constraint:
        return cls(LABEL_PREFIX + label, "==", value)

    @property
    def label(self) -> str | None:
        """The node label it tests (`node.labels.<label>`), None for other attributes."""
        if self.key[: len(LABEL_PREFIX)].lower() == LABEL_PREFIX:
            return self.key[len(LABEL_PREFIX) :]
        return None

    def holds(self, attributes: Mapping[str, str]) -> bool:
        """Swarm's semantics. As swarm does, values compare regardless of case, and so do the names of node
        attributes (`Node.Role`); a label's own name is compared as written."""
        if not self.op:
            return False
        label = self.label
        name = LABEL_PREFIX + label if label is not None else self.key.lower()
        actual = attributes.get(name)
        matches = actual is not None and actual.casefold() == self.value.casefold()
        return matches if self.op == "==" else not matches

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}" if self.op else self.key


def parse_all(texts: Iterable[str]) -> tuple[Constraint, ...]:
    return tuple(Constraint.parse(text) for text in texts)
