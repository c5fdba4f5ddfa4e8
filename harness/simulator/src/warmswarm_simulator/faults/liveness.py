"""Liveness once the faults stop: every owned pending task runs, or says why it waits, the same way, for a cause.

Checked after the last cycle, which comes K cycles (scenario.liveness_bound) after the last fault: each session
still open, requested before those K cycles began, must have its task running, or, over the last STABLE_CYCLES
cycles, every plan must name the task among those that wait, with the same reason each time, for a cause that still
holds once K calm cycles are over. K covers every cause a fault leaves behind (a machine on its way, a machine given
up after max_start_s, an offering avoided for capacity_backoff_s, a volume detaching or being readied), so only two
remain: the request itself cannot be met (the planner's "unschedulable"), or the fleet is at max_instances (checked
on the world: that many machines live). A third is bounded rather than covered by K: a back-off that grew
with failures repeated during the faults (plan/backoff.py), which the plan names with the moment it ends; that
moment must still be ahead, and no later than the largest back-off after the calm's start (backoff_ends_by). Any
other reason at the end, however stable, is one that will not end by
itself ("launching…" forever, a volume "still detaching" from a machine that keeps it). A cycle whose observation
failed made no plan and names nothing: an autoscaler that cannot observe is not live either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from warmswarm_autoscaling.settings import AutoscalingSettings

from warmswarm_simulator.faults.checks import LIVENESS
from warmswarm_simulator.faults.worldparts import Parts

STABLE_CYCLES = 3
# The most a back-off may grow to, in capacity_backoff_s: the check's own bound (docs/operations.md promises 16x),
# stated here rather than read from the planner, which it judges.
BACKOFF_CAP = 16


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str
    starting: bool  # its machine is on its way (the planner's own word for it)
    unschedulable: bool = False  # no launch can help: the request must change
    until: float | None = None  # the wait ends by itself then (a back-off; AWS's clock)


@dataclass(frozen=True, slots=True)
class CycleView:
    """What one cycle's plan said of the waiting tasks, by service name; `plan` False when no plan was made."""

    cycle: int
    plan: bool
    waits: Mapping[str, Wait]
    error: str = ""


def backoff_ends_by(calm_epoch_s: float, settings: AutoscalingSettings) -> float:
    """The latest a back-off may end (AWS's clock): a failure seen up to max_start_s after the calm began (a machine
    launched before it), then the largest back-off."""
    return calm_epoch_s + settings.max_start_s + settings.capacity_backoff_s * BACKOFF_CAP


def _holds(wait: Wait, parts: Parts, max_instances: int, ends_by_s: float) -> bool:
    """Whether the cause a stable reason names still holds after the calm (see the module's docstring)."""
    if wait.unschedulable:
        return True
    if wait.until is not None:
        return parts.world.epoch() < wait.until <= ends_by_s
    live = sum(1 for i in parts.cloud.instances.values() if i.state in ("pending", "running"))
    return wait.reason.startswith(f"max_instances={max_instances} reached") and live >= max_instances


def check(
    parts: Parts,
    views: Sequence[CycleView],
    max_instances: int,
    owed_before_s: float = float("inf"),
    backoffs_end_by_s: float = float("-inf"),
    owed_after_backoff_before: float = float("inf"),
) -> list[tuple[str, str]]:
    """(check, message) for each open session whose task neither runs nor waits for a stable cause that holds;
    `owed_before_s`: only sessions requested before it (when the last K cycles began) are owed it;
    `backoffs_end_by_s`: the latest moment a back-off named by a wait may end (backoff_ends_by);
    `owed_after_backoff_before`: AWS's clock when the last K cycles began: a session whose back-off ended later has
    not had K cycles since, and is owed nothing yet (its back-off must still end within the bound). An owner's next
    session is requested when the one before ends, which may be a moment before the end of the campaign."""
    failures: list[tuple[str, str]] = []
    last = list(views[-STABLE_CYCLES:])
    for record in parts.platform.records:
        if record.service_id is None or record.ended_s is not None or record.requested_s > owed_before_s:
            continue
        service = parts.swarm.services.get(record.service_id)
        if service is None or service.task_id is None:
            continue
        task = parts.swarm.tasks.get(service.task_id)
        if task is not None and task.state == "running":
            continue
        state = task.state if task is not None else "gone"
        ends = [w.until for view in views if (w := view.waits.get(service.name)) is not None and w.until is not None]
        if ends and max(ends) > backoffs_end_by_s:
            failures.append((LIVENESS, f"{service.name} is {state} and backs off past the bound: {max(ends):.0f}"))
            continue
        if ends and max(ends) > owed_after_backoff_before:
            continue  # its back-off ended within the last K cycles: a cold start may still be on its way
        waits = [view.waits.get(service.name) for view in last]
        if any(not view.plan for view in last):
            errors = sorted({view.error for view in last if not view.plan})
            failures.append((LIVENESS, f"{service.name} is {state} and the last cycles made no plan: {errors[0]}"))
        elif any(w is None for w in waits):
            failures.append((LIVENESS, f"{service.name} is {state} and the last plans do not say why it waits"))
        elif len({w.reason for w in waits if w is not None}) > 1:
            reasons = " / ".join(dict.fromkeys(w.reason for w in waits if w is not None))
            failures.append((LIVENESS, f"{service.name} is {state}; its reason changes: {reasons}"))
        elif (wait := waits[-1]) is not None and not _holds(wait, parts, max_instances, backoffs_end_by_s):
            how = "still on its way" if wait.starting else "waiting for a cause that no longer holds"
            failures.append((LIVENESS, f"{service.name} is {state}, {how} after the calm: {wait.reason}"))
    return failures
