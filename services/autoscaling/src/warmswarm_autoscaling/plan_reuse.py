"""Whether a cycle may take the last plan again instead of planning: the same world, no deadline passed, not too old.

plan() is pure in (snapshot, policy): a snapshot that holds the same nodes, tasks, instances, volumes, types,
reservations and carried bookkeeping as the last one planned gives the same decisions, except where the plan keeps
time. What the plan decides by time alone it names as its `deadline` (plan/deadline.py), so until that moment the
last plan stands. At 10,000 machines a plan costs about 250 ms of CPU, most of an idle cycle's budget; an idle
fleet's cycles find the same world again and again.

What this gives up, and its bound: a decision by time that next_deadline does not name is taken up to MAX_REUSE_S
late (every plan older than that is made again, whatever the world), where the resync alone made it up to the resync
interval (30 s) late. Those known: a machine's recycle by age, the buffers' demand window sliding, an offering's or a
volume's back-off running out. None of them keeps a user waiting: a task that waits makes the plan busy, and a busy
plan is never reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.snapshot import Snapshot

# The backstop above: a decision by time that no deadline names is at most this late. The EC2 full listing's
# default interval, so an idle fleet plans afresh about as often as it reads everything.
MAX_REUSE_S: Final = 120.0
# AWS's Date has whole seconds: a skew that moved by less is the same clock read at another moment.
_SKEW_TOLERANCE_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Planned:
    """The last plan made (not reused), the snapshot it was made from, and when (the replica's clock, epoch s)."""

    snapshot: Snapshot
    plan: Plan
    planned_at: float


def reusable(last: Planned | None, snapshot: Snapshot) -> Plan | None:
    """The last plan, when `snapshot` would be planned the same; None when it must be planned afresh.

    Never reused: a plan with actions (they change the world, or, not applied, must be planned and said again), a
    busy one (something moves: its next look must see how), one past its deadline or MAX_REUSE_S old, or a world
    that differs in anything but the moment it was read.
    """
    if last is None:
        return None
    result, before = last.plan, last.snapshot
    if result.actions or result.busy:
        return None
    if snapshot.now - last.planned_at >= MAX_REUSE_S or snapshot.now < last.planned_at:
        return None
    if result.deadline is not None and snapshot.now >= result.deadline:
        return None
    return result if same_world(before, snapshot) else None


def same_world(before: Snapshot, now: Snapshot) -> bool:
    """Everything the planner reads but the moment: the readings (the adapters reuse unchanged ones, so most
    comparisons are by identity), the bookkeeping carried in, and the gap between this replica's and AWS's clocks."""
    return (
        before.nodes == now.nodes
        and before.tasks == now.tasks
        and before.instances == now.instances
        and before.volumes == now.volumes
        and before.instance_types == now.instance_types
        and before.carried == now.carried
        and before.reservations == now.reservations
        and before.reservations_problem == now.reservations_problem
        and before.reservations_unread == now.reservations_unread
        and _same_skew(before, now)
    )


def _same_skew(before: Snapshot, now: Snapshot) -> bool:
    if before.aws_now is None or now.aws_now is None:
        return before.aws_now is None and now.aws_now is None
    skew_before_s, skew_now_s = before.aws_now - before.now, now.aws_now - now.now
    return abs(skew_before_s - skew_now_s) <= _SKEW_TOLERANCE_S
