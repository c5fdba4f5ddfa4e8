"""When the planner needs to look again: soon while something moves, else at the next deadline of its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.grow import GROW_COOLDOWN_S
from warmswarm_autoscaling.plan.result import Hold


def in_motion(cluster: Cluster) -> bool:
    """Tasks are not on a node yet (they wait for room, or the scheduler has not marked them), machines stop,
    or nodes join or leave."""
    snapshot = cluster.snapshot
    # Every task the plan says waits is one of these. And a new service's task is unplaced for a moment before
    # swarm marks it "no suitable node"; no event follows that mark, so look again soon, not a resync later.
    if any(t.node_id is None and t.is_active for t in snapshot.tasks):
        return True
    if any(i.state in ("shutting-down", "stopping") or i.scrub_owed for i in snapshot.instances):
        return True  # machines stop, go, or are being recycled (a step each cycle: recycle.py)
    # A node away while its machine runs (joining, or expected back); not the node of a stopped machine
    # (warm, or in the buffer), which is down until it is started, and has deadlines of its own.
    stopped = {i.id for i in snapshot.instances if not i.is_live}
    return any(
        n.state != "ready" and n.engine_instance_id not in stopped for n in snapshot.nodes if n.engine_instance_id
    )


def next_deadline(
    cluster: Cluster,
    idle_since: Mapping[str, float],
    stopped_since: Mapping[str, float] | None = None,
    holds: Sequence[Hold] = (),
) -> float | None:
    """The first moment still ahead at which a grace, a start timeout, a stopped machine's wait, a warm tier, a
    volume's expiry or growth cooldown or a reservation's window starts or ends, on this replica's clock. Every
    decision the plan takes by time alone must be named here: a cycle that finds the same world takes the last plan
    again until this moment (plan_reuse.py)."""
    policy = cluster.policy
    deadlines = [since + policy.idle_grace_s for since in idle_since.values()]
    deadlines += [since + policy.max_start_s for since in (stopped_since or {}).values()]
    deadlines += [i.launched_at + policy.max_start_s for i in cluster.booting]
    # A warm machine is terminated when its tier ends.
    deadlines += [i.warm_until for i in cluster.snapshot.instances if i.warm_until is not None and not i.is_live]
    # The janitor's deadlines: a volume is deleted as soon as it expires, not a resync later.
    deadlines += [v.expires_at for v in cluster.snapshot.volumes if v.state == "available" and v.expires_at is not None]
    # A volume grown within AWS's six hours may grow again when they end (plan/grow.py): a decision by time alone.
    deadlines += [v.grown_at + GROW_COOLDOWN_S for v in cluster.snapshot.volumes if v.grown_at is not None]
    # A reservation's buffer starts filling, or is released, at its own moments (the buffer decision's holds).
    deadlines += [m for hold in holds for m in (hold.fill_from, hold.reservation.released_at)]
    # Only deadlines still ahead: one already past was acted on, or (dry run) never will be, and
    # waking at once for it again would spin.
    upcoming = [d for d in deadlines if d > cluster.now]
    # Kept by AWS's clock (plan/clock.py), told on this replica's, which the loop sleeps by.
    return None if not upcoming else cluster.clock.own_time_of(min(upcoming))
