"""The actions that recycle an owner's machine for the buffers: marked and stopped, stripped, its scrub proven."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from warmswarm_models import Owner

from warmswarm_autoscaling.actions.base import _Described


@dataclass(frozen=True, slots=True)
class RecycleMachine(_Described):
    """An idle owner's machine is to serve again: tagged with the scrub its next boot owes (its token: generation
    `generation`, marked at `marked_at`), its recycle count and the owners it served; then stopped (`stop`; a stopped
    one already is), so that the OS unmounts the owner's volume cleanly before it is detached. From the tag on, nothing
    gives it work or offers it."""

    kind: ClassVar[str] = "recycle"
    verb: ClassVar[str] = "RecycleMachine"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    owner: Owner
    generation: int
    # The mark's moment, whole epoch seconds of AWS's clock (int(cluster.now)): with the generation, the scrub token,
    # unique per mark, so that a count lost or set back never asks again for a token whose proof lies on the disk.
    marked_at: int
    earlier_owners: tuple[str, ...]  # the audit record before this recycle, oldest first, as read (its owner is added)
    stop: bool
    reason: str

    @property
    def token(self) -> str:
        """What the scrub tag asks and the node's proof must show, exactly: `<generation>.<marked_at>`."""
        return f"{self.generation}.{self.marked_at}"

    def details(self) -> Mapping[str, object]:
        return {"owner": str(self.owner), "generation": self.generation, "token": self.token, "stop": self.stop}


@dataclass(frozen=True, slots=True)
class StripOwner(_Described):
    """A recycling machine, stopped and detached, is nobody's again: its nodes lose the owner's and the machine's
    labels (drained), the instance its owner's tags (ids, volume, warm tier, claim and start moments) and gains the
    buffer's (`hot`: the hot buffer's). Its scrub is still owed: no claim takes it before the proof."""

    kind: ClassVar[str] = "strip_owner"
    verb: ClassVar[str] = "StripOwner"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    node_ids: tuple[str, ...]
    hot: bool
    reason: str

    def details(self) -> Mapping[str, object]:
        return {"nodes": list(self.node_ids), "hot": self.hot}


@dataclass(frozen=True, slots=True)
class MarkScrubbed(_Described):
    """The node of a recycled machine proved the scrub its tag asked (its boot's engine label showed that very token):
    the instance's scrub tag says so (done-<token>), and from then on it is a buffer machine like any other."""

    kind: ClassVar[str] = "tag_instance"
    verb: ClassVar[str] = "MarkScrubbed"
    target_field: ClassVar[str] = "instance_id"
    instance_id: str
    token: str  # `<generation>.<mark's epoch s>`, as the pending tag said it
    reason: str

    def details(self) -> Mapping[str, object]:
        return {"token": self.token}
