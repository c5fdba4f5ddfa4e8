"""plan() (plan/__init__.py): how it wires the decisions together, and the Plan it answers.

The waiting list, the notices and their order, what is in flight, and one answer for one snapshot. (What the
janitor holds is volumes.py's, tested in test_plan_volumes.py; a launched volume's policy is launch.py's.)"""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.plan import Plan
from warmswarm_models import Owner

from .factories import (
    ALICE,
    BOB,
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    foreign_node,
    instance,
    make_policy,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
)

# -- what the plan answers ---------------------------------------------------------------------------------


def _rich_snapshot_plan() -> tuple[Plan, Plan]:
    alice_i = instance("i-01", ALICE)
    bob_i = instance("i-02", BOB, state="pending")
    late_i = instance("i-03", NOBODY, launched_at=NOW - 3600)
    idle_i = instance("i-04", Owner(user_id="dave"), instance_type="m5.large")
    new_i = instance("i-05", Owner(user_id="erin"), zone=ZONE_B)
    nodes = [
        node_of(alice_i),
        node_of(idle_i),
        node_of(new_i, labelled=False),
        foreign_node("mgr", role="manager"),
    ]
    tasks = [
        running_task("r1", nodes[0], ALICE, cpus=1.5),
        pending_task("t1", ALICE),
        pending_task("t2", BOB),
        pending_task("t3", Owner(user_id="carol"), cpus=3.0),
        pending_task("t4", NOBODY, gpus=1),
        pending_task("t5", NOBODY, cpus=512.0),
    ]
    snap = snapshot(
        nodes=nodes,
        tasks=tasks,
        instances=[alice_i, bob_i, late_i, idle_i, new_i],
        idle_since={nodes[1].id: NOW - 1000},
        unavailable={("t3.medium", ZONE_A): NOW + 100, ("m5.large", ZONE_B): NOW - 1},
    )
    return run(snap), run(snap)


def test_every_task_the_scheduler_gave_up_on_is_reported_exactly_once() -> None:
    alice_i = instance("i-01", ALICE)
    tasks = [
        pending_task("fits", ALICE, cpus=0.5),
        pending_task("launch", BOB),
        pending_task("huge", Owner(user_id="carol"), cpus=512.0),
        pending_task("limit", Owner(user_id="dave")),
        pending_task("bad", constraints=["node.labels.node_id==x y"]),
        pending_task("quiet", ALICE, err=""),
    ]
    result = run(
        snapshot(nodes=[node_of(alice_i)], instances=[alice_i], tasks=tasks), make_policy(max_launches_per_cycle=1)
    )
    assert sorted(w.task_id for w in result.waiting) == ["bad", "fits", "huge", "launch", "limit"]


def test_the_clock_ahead_notice_comes_after_the_others() -> None:
    mine = instance("i-21", ALICE)
    node = node_of(mine)
    stray = running_task("stray.1", node)  # nobody's task on alice's node: a notice of its own
    snap = dataclasses.replace(snapshot(nodes=[node], instances=[mine], tasks=[stray]), aws_now=NOW - 600)

    notices = run(snap, make_policy(max_clock_skew_s=60.0)).notices

    assert len(notices) == 2
    assert notices[0].startswith("task stray.1 of service service-stray.1 runs on node")
    assert notices[1].startswith("this replica's clock is 600 s ahead of AWS's")


def test_in_flight_lists_the_live_machines_whose_nodes_have_not_joined_in_snapshot_order() -> None:
    joined = instance("i-1", ALICE)
    booting = instance("i-3", BOB, state="pending", launched_at=NOW - 10)
    running_not_joined = instance("i-2", ALICE, launched_at=NOW - 20)
    stopped = instance("i-4", BOB, state="stopped")
    gone = instance("i-5", BOB, state="shutting-down")

    result = run(snapshot(nodes=[node_of(joined)], instances=[joined, booting, running_not_joined, stopped, gone]))

    assert result.in_flight == ("i-3", "i-2")


def test_plan_is_deterministic() -> None:
    first, second = _rich_snapshot_plan()
    assert first == second
    # The snapshot exercises every kind of decision, so equality is not vacuous.
    kinds = {type(a).__name__ for a in first.actions}
    assert kinds >= {"LaunchBatch", "LabelNode", "Drain", "Terminate"}
    assert first.waiting
