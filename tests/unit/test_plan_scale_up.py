"""Scale up: which pending tasks launch machines, of what type, for whom, and never twice."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.actions import Activate, LabelNode, Launch
from warmswarm_autoscaling.plan import Plan
from warmswarm_models import Owner

from .factories import (
    ALICE,
    BOB,
    ERR_CONSTRAINTS,
    ERR_RESOURCES,
    INSTANCE_TYPES,
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    foreign_node,
    instance,
    instance_from_launch,
    make_policy,
    next_snapshot,
    node_of,
    only,
    pending_task,
    resources,
    run,
    running_task,
    snapshot,
    waiting_for,
)


@pytest.mark.parametrize("err", [ERR_RESOURCES, ERR_CONSTRAINTS])
def test_pending_task_the_scheduler_could_not_place_launches_a_machine(err: str) -> None:
    task = pending_task("t1", ALICE, cpus=1.0, memory_gib=1.0, err=err)
    launch = only(run(snapshot(tasks=[task])), Launch)
    assert launch.task_ids == ("t1",)
    assert launch.demand == resources(1.0, 1.0)


@pytest.mark.parametrize(
    "owner",
    [Owner(user_id="42"), Owner(project_id="7"), Owner(node_id="3"), Owner(user_id="42", project_id="7", node_id="3")],
    ids=str,
)
def test_launch_is_for_the_owner_the_placement_constraints_name(owner: Owner) -> None:
    launch = only(run(snapshot(tasks=[pending_task("t1", owner)])), Launch)
    assert launch.owner == owner


@pytest.mark.parametrize(
    ("state", "err"),
    [("pending", ""), ("new", ""), ("allocated", ""), ("pending", "some other scheduler message")],
)
def test_unassigned_task_the_scheduler_has_not_given_up_on_launches_nothing(state: str, err: str) -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE, state=state, err=err)]))
    assert result.actions == ()
    assert result.waiting == ()


@pytest.mark.parametrize("state", ["assigned", "preparing", "starting", "running"])
def test_assigned_or_running_task_launches_nothing(state: str) -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    task = running_task("t1", node, ALICE, state=state)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task]))
    assert actions_of(result, Launch) == []


def test_task_that_is_being_shut_down_launches_nothing() -> None:
    task = pending_task("t1", ALICE, desired_state="shutdown")
    assert run(snapshot(tasks=[task])).actions == ()


def test_pending_task_that_fits_an_existing_node_of_its_owner_launches_nothing() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, hostname="alice-box")
    busy = running_task("t0", node, ALICE, cpus=1.0, memory_gib=1.0)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[busy, pending_task("t1", ALICE, cpus=0.5)]))
    assert actions_of(result, Launch) == []
    assert "alice-box" in waiting_for(result, "t1").reason


def test_existing_node_of_the_owner_without_room_does_not_stop_a_launch() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    busy = running_task("t0", node, ALICE, cpus=1.5, memory_gib=1.0)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[busy, pending_task("t1", ALICE, cpus=1.0)]))
    assert only(result, Launch).task_ids == ("t1",)


def test_existing_node_of_another_owner_is_not_shared() -> None:
    bob_i = instance("i-01", BOB)
    bob_node = node_of(bob_i)
    result = run(snapshot(nodes=[bob_node], instances=[bob_i], tasks=[pending_task("t1", ALICE, cpus=0.5)]))
    assert only(result, Launch).owner == ALICE


def test_unowned_task_never_goes_to_an_owned_node() -> None:
    alice_i = instance("i-01", ALICE)
    alice_node = node_of(alice_i)
    result = run(snapshot(nodes=[alice_node], instances=[alice_i], tasks=[pending_task("t1", NOBODY, cpus=0.5)]))
    assert only(result, Launch).owner == NOBODY


def test_unowned_task_fits_an_unowned_node_of_ours() -> None:
    shared_i = instance("i-01", NOBODY)
    shared_node = node_of(shared_i)
    result = run(snapshot(nodes=[shared_node], instances=[shared_i], tasks=[pending_task("t1", NOBODY, cpus=0.5)]))
    assert actions_of(result, Launch) == []
    assert shared_node.hostname in waiting_for(result, "t1").reason


def test_owned_task_does_not_take_room_on_an_unowned_node() -> None:
    shared_i = instance("i-01", NOBODY)
    shared_node = node_of(shared_i)
    result = run(snapshot(nodes=[shared_node], instances=[shared_i], tasks=[pending_task("t1", ALICE, cpus=0.5)]))
    assert only(result, Launch).owner == ALICE


def test_existing_node_is_preferred_to_a_machine_on_its_way() -> None:
    ready_i = instance("i-01", ALICE)
    node = node_of(ready_i, hostname="alice-ready")
    booting_i = instance("i-02", ALICE, state="pending")
    result = run(snapshot(nodes=[node], instances=[ready_i, booting_i], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, Launch) == []
    assert "alice-ready" in waiting_for(result, "t1").reason


@pytest.mark.parametrize("ec2_state", ["pending", "running"])
def test_machine_on_its_way_takes_its_owners_task_instead_of_a_launch(ec2_state: str) -> None:
    booting = instance("i-02", ALICE, state=ec2_state)
    result = run(snapshot(instances=[booting], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, Launch) == []
    assert "i-02" in waiting_for(result, "t1").reason


def test_machine_on_its_way_for_another_owner_does_not_take_the_task() -> None:
    booting = instance("i-02", BOB, state="pending")
    result = run(snapshot(instances=[booting], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


def _launch_then_observe(node_state: str | None, node_labelled: bool = False) -> tuple[Plan, Plan]:
    """Cycle 1 launches for a pending task; cycle 2 sees the instance (and its node, if any) and the same task."""
    task = pending_task("t1", ALICE, cpus=1.0)
    first = run(snapshot(tasks=[task]))
    ec2_state = "pending" if node_state is None else "running"
    launched = instance_from_launch(only(first, Launch), "i-new", launched_at=NOW + 1, state=ec2_state)
    nodes = [] if node_state is None else [node_of(launched, state=node_state, labelled=node_labelled, owner=ALICE)]
    second = run(next_snapshot(first, now=NOW + 30, nodes=nodes, tasks=[task], instances=[launched]))
    return first, second


@pytest.mark.parametrize(
    ("node_state", "labelled"),
    [
        (None, False),  # EC2 pending, no node yet
        ("unknown", False),  # the daemon registered, the manager has not heard its first heartbeat
        ("down", False),
        ("ready", False),  # joined, drained and unlabelled: labelled this cycle
        ("ready", True),  # labelled, still drained: brought back for the task
    ],
)
def test_booting_instance_never_causes_a_second_launch_for_the_same_task(
    node_state: str | None, labelled: bool
) -> None:
    first, second = _launch_then_observe(node_state, labelled)
    assert len(actions_of(first, Launch)) + len(actions_of(second, Launch)) == 1


def test_one_launch_over_a_whole_start_from_ec2_pending_to_labelled_node() -> None:
    task = pending_task("t1", ALICE, cpus=1.0)
    cycles = [run(snapshot(tasks=[task]))]
    launched = instance_from_launch(only(cycles[0], Launch), "i-new", launched_at=NOW + 1)
    running = instance_from_launch(only(cycles[0], Launch), "i-new", launched_at=NOW + 1, state="running")
    worlds = [
        ([], launched),
        ([], running),
        ([node_of(running, state="unknown", labelled=False)], running),
        ([node_of(running, labelled=False)], running),
        ([node_of(running, labelled=True, availability="drain", owner=ALICE)], running),
    ]
    for step, (nodes, inst) in enumerate(worlds, start=1):
        cycles.append(run(next_snapshot(cycles[-1], now=NOW + 30 * step, nodes=nodes, tasks=[task], instances=[inst])))
    assert sum(len(actions_of(c, Launch)) for c in cycles) == 1
    assert only(cycles[4], LabelNode).node_id == "node-i-new"
    assert only(cycles[5], Activate).node_id == "node-i-new"


def test_booting_instance_takes_only_the_tasks_that_fit_it() -> None:
    booting = instance("i-02", ALICE, state="pending", instance_type="t3.medium")  # 1.9 CPU after overhead
    tasks = [pending_task("t1", ALICE, cpus=1.0), pending_task("t2", ALICE, cpus=1.0)]
    result = run(snapshot(instances=[booting], tasks=tasks))
    assert len(only(result, Launch).task_ids) == 1


def test_cheapest_type_that_fits_is_launched() -> None:
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE, cpus=1.0, memory_gib=1.0)])), Launch)
    assert launch.instance_type == "t3.medium"
    assert "0.0416" in launch.reason


def test_task_needing_all_vcpus_of_a_type_does_not_fit_it_after_the_overhead() -> None:
    # t3.medium and m5.large have 2 vCPUs, 1.9 after the 0.1 CPU overhead.
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE, cpus=2.0, memory_gib=1.0)])), Launch)
    assert launch.instance_type == "m5.xlarge"


def test_task_needing_all_memory_of_a_type_does_not_fit_it_after_the_overhead() -> None:
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE, cpus=1.0, memory_gib=4.0)])), Launch)
    assert launch.instance_type == "m5.large"


def test_gpu_task_gets_a_gpu_type() -> None:
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE, cpus=2.0, memory_gib=8.0, gpus=1)])), Launch)
    assert launch.instance_type == "g4dn.xlarge"
    assert launch.demand.gpus == 1


def test_only_allowed_types_are_launched() -> None:
    policy = make_policy(allowed_instance_types=("m5.large", "m5.xlarge"))
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)]), policy), Launch)
    assert launch.instance_type == "m5.large"


def test_tasks_of_one_owner_share_a_new_node() -> None:
    tasks = [pending_task("t1", ALICE, cpus=0.5), pending_task("t2", ALICE, cpus=0.5, memory_gib=2.0)]
    launch = only(run(snapshot(tasks=tasks)), Launch)
    assert launch.owner == ALICE
    assert launch.task_ids == ("t1", "t2")
    assert launch.demand == resources(1.0, 3.0)


def test_tasks_of_one_owner_that_do_not_fit_one_node_get_more_nodes() -> None:
    tasks = [pending_task(f"t{i}", ALICE, cpus=1.5) for i in range(3)]
    launches = actions_of(run(snapshot(tasks=tasks)), Launch)
    assert sorted(launch.task_ids for launch in launches) == [("t0",), ("t1",), ("t2",)]
    assert {launch.instance_type for launch in launches} == {"t3.medium"}


def test_tasks_of_two_owners_never_share_a_new_node() -> None:
    tasks = [pending_task("t1", ALICE, cpus=0.5), pending_task("t2", BOB, cpus=0.5)]
    launches = actions_of(run(snapshot(tasks=tasks)), Launch)
    assert sorted((launch.owner.user_id, launch.task_ids) for launch in launches) == [
        ("alice", ("t1",)),
        ("bob", ("t2",)),
    ]


def test_tasks_with_overlapping_but_different_owners_do_not_share_a_new_node() -> None:
    tasks = [pending_task("t1", Owner(user_id="42")), pending_task("t2", Owner(user_id="42", project_id="7"))]
    launches = actions_of(run(snapshot(tasks=tasks)), Launch)
    assert sorted(str(launch.owner) for launch in launches) == ["user_id=42", "user_id=42,project_id=7"]


def test_unowned_tasks_are_packed_together_on_an_unowned_node() -> None:
    tasks = [pending_task(f"t{i}", NOBODY, cpus=0.5) for i in range(3)]
    launch = only(run(snapshot(tasks=tasks)), Launch)
    assert launch.owner == NOBODY
    assert launch.task_ids == ("t0", "t1", "t2")


def test_unowned_and_owned_tasks_do_not_share_a_new_node() -> None:
    tasks = [pending_task("t1", NOBODY, cpus=0.5), pending_task("t2", ALICE, cpus=0.5)]
    assert sorted(str(launch.owner) for launch in actions_of(run(snapshot(tasks=tasks)), Launch)) == [
        "nobody",
        "user_id=alice",
    ]


def test_tasks_waiting_for_a_launch_say_which_machine() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE)]))
    waiting = waiting_for(result, "t1")
    assert waiting.owner == ALICE
    assert waiting.reason == f"launching a t3.medium in {ZONE_A}"
    assert not waiting.unschedulable


def test_max_instances_counts_live_instances_and_names_the_limit_for_the_rest() -> None:
    live = [instance("i-01", BOB, state="running"), instance("i-02", BOB, state="pending")]
    gone = [instance("i-03", BOB, state="shutting-down"), instance("i-04", BOB, state="stopped")]
    tasks = [pending_task("t1", ALICE, cpus=1.5), pending_task("t2", Owner(user_id="carol"), cpus=1.0)]
    result = run(snapshot(instances=[*live, *gone], tasks=tasks), make_policy(max_instances=3))
    assert only(result, Launch).task_ids == ("t1",)  # largest first
    assert "max_instances=3" in waiting_for(result, "t2").reason
    assert not waiting_for(result, "t2").unschedulable


def test_max_instances_already_reached_launches_nothing() -> None:
    live = [instance("i-01", BOB), instance("i-02", BOB)]
    result = run(snapshot(instances=live, tasks=[pending_task("t1", ALICE)]), make_policy(max_instances=2))
    assert actions_of(result, Launch) == []
    assert "max_instances=2" in waiting_for(result, "t1").reason


def test_max_launches_per_cycle_and_names_the_limit_for_the_rest() -> None:
    tasks = [pending_task("t1", ALICE, cpus=1.5), pending_task("t2", BOB, cpus=1.0)]
    result = run(snapshot(tasks=tasks), make_policy(max_launches_per_cycle=1))
    assert only(result, Launch).task_ids == ("t1",)
    assert "max_launches_per_cycle=1" in waiting_for(result, "t2").reason


def test_a_task_sharing_a_launch_is_not_held_back_by_the_launch_limit() -> None:
    tasks = [
        pending_task("t1", ALICE, cpus=1.0),
        pending_task("t2", ALICE, cpus=0.5),
        pending_task("t3", BOB, cpus=0.25),
    ]
    result = run(snapshot(tasks=tasks), make_policy(max_launches_per_cycle=1))
    assert only(result, Launch).task_ids == ("t1", "t2")
    assert "max_launches_per_cycle=1" in waiting_for(result, "t3").reason


def test_launches_spread_across_availability_zones() -> None:
    tasks = [pending_task("t1", ALICE), pending_task("t2", BOB)]
    zones = sorted(launch.availability_zone for launch in actions_of(run(snapshot(tasks=tasks)), Launch))
    assert zones == [ZONE_A, ZONE_B]


def test_launch_goes_to_the_zone_with_fewer_of_our_machines() -> None:
    result = run(snapshot(instances=[instance("i-01", BOB, zone=ZONE_A)], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).availability_zone == ZONE_B


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


def test_plan_is_deterministic() -> None:
    first, second = _rich_snapshot_plan()
    assert first == second
    # The snapshot exercises every kind of decision, so equality is not vacuous.
    kinds = {type(a).__name__ for a in first.actions}
    assert kinds >= {"LaunchBatch", "LabelNode", "Drain", "Terminate"}
    assert first.waiting


def test_client_token_is_stable_within_a_start_window_and_at_most_64_chars() -> None:
    policy = make_policy(max_start_s=600.0)
    window_start = (NOW // 600.0) * 600.0
    task = pending_task("t1", ALICE)
    tokens = {only(run(snapshot(now=now, tasks=[task]), policy), Launch).client_token for now in (window_start, NOW)}
    tokens.add(only(run(snapshot(now=window_start + 599.0, tasks=[task]), policy), Launch).client_token)
    assert len(tokens) == 1
    token = tokens.pop()
    assert 0 < len(token) <= 64
    assert token.isascii()


def test_client_token_differs_for_different_launches_in_one_cycle() -> None:
    tasks = [pending_task("t1", ALICE), pending_task("t2", BOB)]
    tokens = [launch.client_token for launch in actions_of(run(snapshot(tasks=tasks)), Launch)]
    assert len(tokens) == 2
    assert len(set(tokens)) == 2


def test_instance_types_unknown_to_ec2_are_not_launched() -> None:
    types = {name: t for name, t in INSTANCE_TYPES.items() if name != "t3.medium"}
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)], instance_types=types)), Launch)
    assert launch.instance_type == "m5.large"
