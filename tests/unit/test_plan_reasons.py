"""Why tasks wait: what no launch can fix (unschedulable) and what a later cycle will."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.actions import Launch
from warmswarm_autoscaling.snapshot import Task
from warmswarm_models import Owner

from .factories import (
    ALICE,
    BOB,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    waiting_for,
)


def _unschedulable(task: Task, **policy_changes: object) -> str:
    """Plan for `task` alone; assert nothing launches and the task is unschedulable; return the reason."""
    result = run(snapshot(tasks=[task]), make_policy(**policy_changes))
    assert result.actions == ()
    waiting = waiting_for(result, task.id)
    assert waiting.unschedulable
    return waiting.reason


def test_task_too_large_for_every_allowed_type_is_unschedulable_and_says_what_it_needs() -> None:
    reason = _unschedulable(pending_task("t1", ALICE, cpus=512.0, memory_gib=1.0))
    assert "needs 512 CPU" in reason
    assert "no allowed instance type fits" in reason
    # It says what the largest type offers, so the request can be fixed.
    assert "3.9 CPU" in reason


def test_gpu_task_when_no_allowed_type_has_a_gpu_is_unschedulable() -> None:
    reason = _unschedulable(
        pending_task("t1", ALICE, cpus=1.0, gpus=1),
        allowed_instance_types=("t3.medium", "m5.large", "m5.xlarge"),
    )
    assert "1 gpu" in reason
    assert "no allowed instance type fits" in reason


def test_task_that_fits_only_with_the_overhead_ignored_is_unschedulable() -> None:
    reason = _unschedulable(pending_task("t1", ALICE, cpus=2.0), allowed_instance_types=("t3.medium", "m5.large"))
    assert "overhead (0.1 CPU" in reason


@pytest.mark.parametrize(
    "constraint", ["node.role==manager", "node.hostname==x", "node.labels.other==y", "node.labels.USER_ID==alice"]
)
def test_task_whose_constraints_no_launch_can_satisfy_is_unschedulable_and_names_the_constraint(
    constraint: str,
) -> None:
    reason = _unschedulable(pending_task("t1", ALICE, constraints=[constraint]))
    assert constraint in reason
    assert "cannot be met" in reason


@pytest.mark.parametrize(
    "constraint",
    # Swarm compares values, and the names of node attributes, regardless of case.
    [
        "node.role==worker",
        "node.platform.os==linux",
        "node.labels.other!=y",
        "Node.Role==Worker",
        "node.platform.os==Linux",
    ],
)
def test_constraints_a_new_node_meets_do_not_stop_a_launch(constraint: str) -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE, constraints=[constraint])]))
    assert only(result, Launch).owner == ALICE


def test_task_excluding_its_own_owner_is_unschedulable() -> None:
    reason = _unschedulable(pending_task("t1", ALICE, constraints=["node.labels.user_id!=alice"]))
    assert "node.labels.user_id!=alice" in reason


def test_task_with_a_malformed_owner_label_is_unschedulable_and_says_which_id() -> None:
    reason = _unschedulable(pending_task("t1", constraints=["node.labels.user_id==bad id!"]))
    assert "user_id='bad id!' is not a valid id" in reason


def test_task_with_contradicting_owner_constraints_is_unschedulable() -> None:
    task = pending_task("t1", constraints=["node.labels.project_id==1", "node.labels.project_id==2"])
    reason = _unschedulable(task)
    assert "project_id==1 and project_id==2" in reason


def test_malformed_task_the_scheduler_has_not_tried_yet_is_not_reported() -> None:
    task = pending_task("t1", constraints=["node.labels.user_id==bad id!"], err="")
    result = run(snapshot(tasks=[task]))
    assert result == run(snapshot())


def test_unschedulable_task_does_not_hold_back_the_others() -> None:
    tasks = [pending_task("t1", ALICE, cpus=512.0), pending_task("t2", BOB)]
    result = run(snapshot(tasks=tasks), make_policy(max_launches_per_cycle=1))
    assert only(result, Launch).task_ids == ("t2",)
    assert waiting_for(result, "t1").unschedulable
    assert not waiting_for(result, "t2").unschedulable


def test_task_waiting_for_capacity_is_not_unschedulable() -> None:
    unavailable = {
        (t, z): NOW + 100 for t in ("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge") for z in (ZONE_A, ZONE_B)
    }
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable=unavailable))
    assert actions_of(result, Launch) == []
    waiting = waiting_for(result, "t1")
    assert not waiting.unschedulable
    assert "out of capacity" in waiting.reason
    assert "capacity_backoff_s=600" in waiting.reason


def test_task_waiting_for_a_machine_on_its_way_names_it() -> None:
    booting = instance("i-0b", ALICE, state="pending")
    waiting = waiting_for(run(snapshot(instances=[booting], tasks=[pending_task("t1", ALICE)])), "t1")
    assert waiting.reason == "waiting for instance i-0b (t3.medium) to join the swarm"
    assert not waiting.unschedulable


def test_task_that_fits_an_existing_node_waits_for_the_swarm_scheduler() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, hostname="alice-box")
    waiting = waiting_for(run(snapshot(nodes=[node], instances=[alice_i], tasks=[pending_task("t1", ALICE)])), "t1")
    assert waiting.reason == "fits on node alice-box; waiting for the swarm scheduler"
    assert waiting.owner == ALICE


def test_task_bringing_back_a_drained_node_says_so() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, hostname="alice-box", availability="drain")
    waiting = waiting_for(run(snapshot(nodes=[node], instances=[alice_i], tasks=[pending_task("t1", ALICE)])), "t1")
    assert "alice-box" in waiting.reason
    assert "brought back from drain" in waiting.reason


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
