"""What every action says of itself: its kind, its target, its title in the journal, and its log fields."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar


class _Described:
    """What every action says of itself; each action names its kind, verb and target, and may add log fields."""

    __slots__ = ()
    kind: ClassVar[str]
    verb: ClassVar[str]  # the action's name in the journal and /v1/status: "Launch", "ReleaseVolume", ...
    target_field: ClassVar[str]  # the field that names what it acts on (a node, an instance, a volume)
    reason: str

    @property
    def target(self) -> str:
        return str(getattr(self, self.target_field))

    @property
    def title(self) -> str:
        """What the journal and /v1/status call it: "Launch m5.large in eu-west-1a", "Drain node-1"."""
        return f"{self.verb} {self.target}"

    def log_fields(self) -> dict[str, object]:
        """The structured fields of its log line: kind, target and reason, and what this kind of action adds."""
        return {"kind": self.kind, "target": self.target, "reason": self.reason, **self.details()}

    def details(self) -> Mapping[str, object]:
        return {}
