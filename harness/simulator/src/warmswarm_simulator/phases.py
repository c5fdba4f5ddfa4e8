"""A session's wait cut into its phases: request -> launch call -> joined -> assigned -> image -> running -> data.

Each phase ends at an event of the machine or task the session first ran with data on; an event that came before
the request (a machine launched for an earlier session, a buffer machine already joined, an image already pulled)
makes its phase zero, so the phases of one session always add up to its wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# In order; each is the time from the previous phase's end (or the request) to its own event.
PHASES: tuple[str, ...] = (
    "to launch call",  # the autoscaler decides: RunInstances (or StartInstances for a stopped machine) is called
    "boot to join",  # pending, boot, user data, the node joins the swarm (or comes back after a stop)
    "join to assigned",  # volume attach and mount, labels, activation; the scheduler places the task
    "image pull",  # the session image pulled on that node (zero when the node has it)
    "container start",  # image present -> the container runs
    "data download",  # the session's data fetched when it was not in place on the cache volume
)


@dataclass(frozen=True, slots=True)
class Marks:
    """The day seconds of the events one session's wait went through (None: the event did not happen for it)."""

    requested_s: float
    launch_call_s: float | None  # RunInstances, or the StartInstances that brought a stopped machine back
    joined_s: float  # the node joined (or came back)
    assigned_s: float
    image_ready_s: float
    running_s: float
    ready_s: float

    def durations_s(self) -> tuple[float, ...]:
        """The six phases' durations, each at least zero, adding up to ready_s - requested_s."""
        events = (
            self.launch_call_s if self.launch_call_s is not None else self.requested_s,
            self.joined_s,
            self.assigned_s,
            self.image_ready_s,
            self.running_s,
            self.ready_s,
        )
        durations, before_s = [], self.requested_s
        for event_s in events:
            end_s = max(before_s, event_s)
            durations.append(end_s - before_s)
            before_s = end_s
        return tuple(durations)


@dataclass(frozen=True, slots=True)
class SessionPhases:
    """One session's phases, whether it was the owner's first session of the day, and whether its machine had run
    another owner's session before (a machine reused across owners)."""

    first: bool
    reused_across_owners: bool
    durations_s: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class PhaseSummary:
    """The median and p95 of each phase over a set of sessions (nearest rank), and how many sessions it covers."""

    sessions: int
    p50_s: tuple[float, ...]
    p95_s: tuple[float, ...]


def summarise(sessions: Iterable[SessionPhases]) -> PhaseSummary:
    chosen = list(sessions)
    columns = [sorted(s.durations_s[i] for s in chosen) for i in range(len(PHASES))]
    return PhaseSummary(
        sessions=len(chosen),
        p50_s=tuple(_nearest_rank(c, 50) for c in columns),
        p95_s=tuple(_nearest_rank(c, 95) for c in columns),
    )


def _nearest_rank(sorted_values: Sequence[float], p: float) -> float:
    """As results.percentile (the smallest value with at least p % at or below it); zero for no sessions."""
    if not sorted_values:
        return 0.0
    return sorted_values[max(1, math.ceil(p / 100.0 * len(sorted_values))) - 1]
