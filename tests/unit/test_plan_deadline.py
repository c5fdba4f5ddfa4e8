"""When the loop looks again (plan/deadline.py): the plan is busy while something moves, else it wakes at its
first deadline ahead."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.snapshot import Instance, Node, Task
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, format_timestamp

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    GRACE_S,
    MAX_START_S,
    NOW,
    attachment,
    foreign_node,
    instance,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
    volume,
)


def working_machine() -> tuple[list[Instance], list[Node], list[Task]]:
    """A machine whose node runs a task: nothing to wait for, nothing moving."""
    machine = instance("i-busy", BOB)
    node = node_of(machine)
    return [machine], [node], [running_task("t-run", node, BOB)]


# -- deadlines ---------------------------------------------------------------------------------------------


def warm_tags(until: float) -> dict[str, str]:
    return {INSTANCE_WARM_TTL_TAG: "3600", INSTANCE_WARM_UNTIL_TAG: format_timestamp(until)}


def test_a_cluster_at_rest_is_not_busy_and_has_no_deadline() -> None:
    machines, nodes, tasks = working_machine()
    result = run(snapshot(instances=machines, nodes=nodes, tasks=tasks))
    assert result.busy is False
    assert result.deadline is None


def test_an_idle_node_wakes_the_loop_when_its_grace_ends() -> None:
    machine = instance("i-01", BOB)
    node = node_of(machine)
    result = run(snapshot(instances=[machine], nodes=[node], idle_since={node.id: NOW - 100.0}))
    assert result.deadline == NOW - 100.0 + GRACE_S
    assert result.busy is False


def test_a_booting_machine_wakes_the_loop_when_its_start_timeout_ends() -> None:
    machine = instance("i-01", BOB, state="pending", launched_at=NOW - 60.0)
    result = run(snapshot(instances=[machine]))
    assert result.deadline == NOW - 60.0 + MAX_START_S


def test_a_warm_machine_wakes_the_loop_when_its_tier_ends_and_its_down_node_is_not_motion() -> None:
    machine = instance("i-01", ALICE_N1, state="stopped", tags=warm_tags(NOW + 1800.0), volume_id="vol-1")
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(instances=[machine], nodes=[node]))
    assert result.deadline == NOW + 1800.0
    # Its node is down until someone starts it: looking again every few seconds would learn nothing.
    assert result.busy is False


def test_the_warm_until_of_a_running_machine_is_no_deadline() -> None:
    # A resumed machine keeps its old warm-until tag; it only matters again once the machine is stopped.
    machine = instance("i-01", BOB, tags=warm_tags(NOW + 100.0))
    node = node_of(machine)
    result = run(snapshot(instances=[machine], nodes=[node], tasks=[running_task("t-run", node, BOB)]))
    assert result.deadline is None


def test_a_machine_stopped_by_someone_else_wakes_the_loop_when_its_wait_ends() -> None:
    machine = instance("i-01", BOB, state="stopped")
    result = run(snapshot(instances=[machine], stopped_since={"i-01": NOW - 100.0}))
    assert result.deadline == NOW - 100.0 + MAX_START_S


def test_an_available_volume_wakes_the_janitor_when_it_expires() -> None:
    released = volume("vol-1", released_at=NOW - 100.0, expires_at=NOW + 500.0)
    assert run(snapshot(volumes=[released])).deadline == NOW + 500.0


def test_the_expiry_tag_of_a_volume_in_use_is_no_deadline() -> None:
    # An expiry on an attached volume is an old one: the janitor never deletes a volume in use.
    machines, nodes, tasks = working_machine()
    held = volume(
        "vol-1", state="in-use", released_at=NOW - 100.0, expires_at=NOW + 500.0, attached_to=[attachment("i-busy")]
    )
    result = run(snapshot(instances=machines, nodes=nodes, tasks=tasks, volumes=[held]))
    assert result.deadline is None


def test_a_volume_without_an_expiry_is_no_deadline() -> None:
    assert run(snapshot(volumes=[volume("vol-1", ttl_s=None)])).deadline is None


@pytest.mark.parametrize("expires_at", [NOW - 10.0, NOW], ids=["past", "now"])
def test_a_deadline_not_ahead_is_no_deadline(expires_at: float) -> None:
    # A deadline already reached was acted on in this plan (or, in a dry run, never will be): waking for it again
    # would spin.
    assert run(snapshot(volumes=[volume("vol-1", released_at=NOW - 3600.0, expires_at=expires_at)])).deadline is None


def test_the_first_deadline_ahead_wins() -> None:
    machine = instance("i-01", BOB)
    node = node_of(machine)
    released = volume("vol-1", released_at=NOW - 100.0, expires_at=NOW + 500.0)
    later = volume("vol-2", BOB, released_at=NOW - 100.0, expires_at=NOW + 900.0)
    world = snapshot(instances=[machine], nodes=[node], volumes=[later, released], idle_since={node.id: NOW - 100.0})
    assert run(world).deadline == NOW + 200.0


# -- motion: look again soon -------------------------------------------------------------------------------


def test_a_plan_with_work_waiting_tells_the_loop_to_look_again_soon() -> None:
    waiting = run(snapshot(tasks=[pending_task("t1", ALICE)]))
    at_rest = run(snapshot())

    assert (waiting.busy, at_rest.busy) == (True, False)


def test_a_task_waiting_for_room_keeps_the_loop_busy() -> None:
    result = run(snapshot(tasks=[pending_task("t-1", BOB)]))
    assert result.waiting
    assert result.busy is True


def test_a_new_task_the_scheduler_has_not_marked_yet_keeps_the_loop_busy() -> None:
    # Room exists, so nothing waits and nothing launches; but swarm has not placed the task yet, and no event
    # follows its "no suitable node" mark, should it come.
    machine = instance("i-01", BOB)
    node = node_of(machine)
    result = run(snapshot(instances=[machine], nodes=[node], tasks=[pending_task("t-1", BOB, err="")]))
    assert result.waiting == ()
    assert result.actions == ()
    assert result.busy is True


@pytest.mark.parametrize("state", ["shutting-down", "stopping"])
def test_a_machine_on_its_way_down_keeps_the_loop_busy(state: str) -> None:
    machines, nodes, tasks = working_machine()
    leaving = instance("i-02", BOB, state=state)
    assert run(snapshot(instances=[*machines, leaving], nodes=nodes, tasks=tasks)).busy is True


@pytest.mark.parametrize("state", ["down", "unknown"])
def test_a_running_machines_node_away_keeps_the_loop_busy(state: str) -> None:
    machines, nodes, tasks = working_machine()
    machine = instance("i-02", BOB)
    away = node_of(machine, state=state)
    result = run(snapshot(instances=[*machines, machine], nodes=[*nodes, away], tasks=tasks))
    assert result.busy is True


def test_a_node_not_ours_that_is_down_is_not_motion() -> None:
    machines, nodes, tasks = working_machine()
    theirs = foreign_node("m-1", state="down")
    assert run(snapshot(instances=machines, nodes=[*nodes, theirs], tasks=tasks)).busy is False
