"""Room a pending task counts on instead of a launch (plan/room.py): which tasks need room; nodes of the owner,
drained ones brought back, machines joining, booting or returning, machines of a batch; and what a waiting
task is told, down to why no launch can place it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import Activate, CreateVolume, LabelNode, Launch, Terminate
from warmswarm_autoscaling.plan import Plan, Waiting
from warmswarm_autoscaling.snapshot import Instance, Node, Snapshot, Task
from warmswarm_models import (
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    Owner,
    format_timestamp,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    CACHE_ON,
    CLASS_POLICY,
    ERR_CONSTRAINTS,
    ERR_RESOURCES,
    GRACE_S,
    NOBODY,
    NOW,
    VOL,
    actions_of,
    cached_task,
    class_machine,
    foreign_node,
    instance,
    instance_from_launch,
    labels_of,
    make_policy,
    next_snapshot,
    node_of,
    only,
    pending_task,
    resources,
    run,
    running_task,
    snapshot,
    student,
    volume,
    waiting_for,
    warm_machine,
)


def fits_on(hostname: str) -> str:
    return f"fits on node {hostname}; waiting for the swarm scheduler"


def joining(instance_id: str, instance_type: str = "t3.medium") -> str:
    return f"waiting for instance {instance_id} ({instance_type}) to join the swarm"


def with_owner_labels(node: Node, owner: Owner) -> Node:
    """The node as someone other than warmswarm left it: `owner`'s labels, but not our instance-id label."""
    return dataclasses.replace(node, labels={**node.labels, **owner.labels()}, owner=owner)


# -- which tasks need room ---------------------------------------------------------------------------------


@pytest.mark.parametrize("err", [ERR_RESOURCES, ERR_CONSTRAINTS])
def test_pending_task_the_scheduler_could_not_place_launches_a_machine(err: str) -> None:
    task = pending_task("t1", ALICE, cpus=1.0, memory_gib=1.0, err=err)
    launch = only(run(snapshot(tasks=[task])), Launch)
    assert launch.task_ids == ("t1",)
    assert launch.demand == resources(1.0, 1.0)


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


def test_a_global_services_task_never_causes_a_launch() -> None:
    unbound = replace(pending_task("agent.x", cpus=0.1), global_service=True)
    result = run(snapshot(tasks=[unbound]))
    assert result.actions == ()


def test_a_larger_task_the_scheduler_has_not_tried_yet_does_not_hold_back_a_smaller_one() -> None:
    """Tasks are matched largest first; one not yet given up on by swarm is skipped, not the end of the list."""
    untried = pending_task("t-big", ALICE, cpus=1.5, err="")
    refused = pending_task("t-small", BOB, cpus=0.5)
    result = run(snapshot(tasks=[untried, refused]))
    assert only(result, Launch).task_ids == ("t-small",)


# -- room on a node of the owner ---------------------------------------------------------------------------


ALICE_P1 = Owner(user_id="alice", project_id="p1")
ALICE_P2 = Owner(user_id="alice", project_id="p2")
BOB_P1 = Owner(user_id="bob", project_id="p1")


def _down_foreign_node() -> tuple[list[Node], list[Instance]]:
    return [foreign_node("w9", state="down")], []


def _node_of_a_machine_being_terminated() -> tuple[list[Node], list[Instance]]:
    going = instance("i-09", ALICE, state="shutting-down")
    return [node_of(going)], [going]


def _node_whose_boot_did_not_mount_its_volume() -> tuple[list[Node], list[Instance]]:
    machine = instance("i-09", ALICE, volume_id="vol-9")
    return [node_of(machine, mounted=False)], [machine]


def _unclaimed_buffer_machine_joined() -> tuple[list[Node], list[Instance]]:
    machine = instance("i-09", tags={INSTANCE_BUFFER_TAG: "true"})
    return [node_of(machine, labelled=False)], [machine]


def _joined_node_labelled_by_someone_for_another_owner() -> tuple[list[Node], list[Instance]]:
    machine = instance("i-09", ALICE)
    return [with_owner_labels(node_of(machine, labelled=False), BOB)], [machine]


def _foreign_node_drained_by_ops() -> tuple[list[Node], list[Instance]]:
    return [foreign_node("w9", availability="drain", labels=ALICE.labels())], []


def _foreign_node_with_unusable_owner_labels() -> tuple[list[Node], list[Instance]]:
    return [foreign_node("w9", labels={"user_id": "Not An Id!"})], []


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


def test_an_owned_task_never_takes_a_node_that_shares_only_one_of_its_ids() -> None:
    """alice/p1's work may not run on alice/p2's node (nor bob/p1's), even when that node has room."""
    alice_p2 = instance("i-01", ALICE_P2)
    bobs = [instance("i-02", BOB_P1), instance("i-03", BOB_P1)]
    world = snapshot(
        nodes=[node_of(alice_p2), *(node_of(b) for b in bobs)],
        instances=[alice_p2, *bobs],
        tasks=[pending_task("t1", ALICE_P1, cpus=0.5)],
    )
    assert only(run(world), Launch).owner == ALICE_P1


@pytest.mark.parametrize(
    "no_room",
    [
        _down_foreign_node,
        _node_of_a_machine_being_terminated,
        _node_whose_boot_did_not_mount_its_volume,
        _unclaimed_buffer_machine_joined,
        _joined_node_labelled_by_someone_for_another_owner,
        _foreign_node_drained_by_ops,
        _foreign_node_with_unusable_owner_labels,
    ],
)
def test_a_node_without_room_for_anyone_does_not_hide_the_nodes_after_it(
    no_room: Callable[[], tuple[list[Node], list[Instance]]],
) -> None:
    """Swarm lists nodes in no order we choose: one we skip must not end the search for the owner's node."""
    nodes, instances = no_room()
    machine = instance("i-01", ALICE)
    node = node_of(machine, hostname="alice-box")
    world = snapshot(nodes=[*nodes, node], instances=[*instances, machine], tasks=[pending_task("t1", ALICE)])
    result = run(world)
    assert waiting_for(result, "t1").reason == fits_on("alice-box")
    assert actions_of(result, Launch) == []


def test_active_node_whose_instance_is_going_takes_no_task() -> None:
    # Terminated from outside (a spot interruption, by hand): swarm still shows it ready for a while.
    shutting = instance("i-01", ALICE, state="shutting-down")
    node = node_of(shutting)
    result = run(snapshot(nodes=[node], instances=[shutting], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


def test_node_labelled_with_an_unusable_owner_id_does_not_break_the_plan() -> None:
    mislabelled = foreign_node("ops-mislabelled", labels={"user_id": "not a valid id"})
    result = run(snapshot(nodes=[mislabelled], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


def test_an_owners_room_is_found_after_another_owner_sharing_an_id_binds_a_batch_machine() -> None:
    """Found by mutation testing: a search resumed at its position in one candidate list, and binding a batch
    machine to bob/p1 made p1's list the shorter one for alice/p1, so alice's second task skipped her own node's
    room and launched a machine."""
    alice_p1, alice_p2, bob_p1 = (
        Owner(user_id=u, project_id=p) for u, p in (("alice", "p1"), ("alice", "p2"), ("bob", "p1"))
    )
    owners = {"i-b1": bob_p1, "i-b2": bob_p1, "i-x1": alice_p1, "i-m1": alice_p2, "i-m2": alice_p2, "i-m3": alice_p2}
    machines = [instance(i, o) for i, o in owners.items()]
    nodes = [node_of(m, hostname=f"h-{m.id}") for m in machines]
    # Every node but alice/p1's own is full.
    tasks = [
        running_task(f"r-{n.id}", n, owners[i], cpus=1.8) for i, n in zip(owners, nodes, strict=True) if i != "i-x1"
    ]
    batch = instance("i-u1", NOBODY, state="pending", tags={INSTANCE_BATCH_TAG: "b1"})
    tasks += [pending_task("t3", alice_p1, cpus=0.5), pending_task("t2", bob_p1, cpus=0.5)]
    tasks += [pending_task("t1", alice_p1, cpus=0.5)]
    result = run(snapshot(nodes=nodes, instances=[*machines, batch], tasks=tasks))
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t1").reason == "fits on node h-i-x1; waiting for the swarm scheduler"
    assert waiting_for(result, "t2").reason == "waiting for instance i-u1 (t3.medium) to join the swarm"


# -- a drained node brought back ---------------------------------------------------------------------------


def test_drained_idle_node_is_brought_back_for_its_owners_task_instead_of_a_launch() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    result = run(
        snapshot(
            nodes=[node],
            instances=[alice_i],
            tasks=[pending_task("t1", ALICE)],
            idle_since={node.id: NOW - 10_000},
        )
    )
    assert only(result, Activate).node_id == node.id
    assert actions_of(result, Launch) == []
    assert actions_of(result, Terminate) == []
    assert node.id not in result.carried.idle_since


def test_drained_node_is_not_brought_back_for_a_task_that_does_not_fit() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    task = pending_task("t1", ALICE, cpus=3.0)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task], idle_since={node.id: NOW - GRACE_S}))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).instance_type == "m5.xlarge"
    assert only(result, Terminate).instance_id == alice_i.id


def test_drained_node_is_not_brought_back_for_another_owner() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    result = run(
        snapshot(
            nodes=[node], instances=[alice_i], tasks=[pending_task("t1", BOB)], idle_since={node.id: NOW - GRACE_S}
        )
    )
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == BOB
    assert only(result, Terminate).instance_id == alice_i.id


def test_drained_node_whose_instance_is_going_is_not_brought_back() -> None:
    shutting = instance("i-01", ALICE, state="shutting-down")
    node = node_of(shutting, availability="drain")
    result = run(snapshot(nodes=[node], instances=[shutting], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == ALICE


def test_drained_node_we_did_not_create_is_not_brought_back() -> None:
    drained = foreign_node("by-hand-drained", availability="drain")
    result = run(snapshot(nodes=[drained], tasks=[pending_task("t1", NOBODY)]))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == NOBODY


def test_drained_node_of_the_owner_is_preferred_to_a_machine_still_booting() -> None:
    # Alice's idle node was drained and a machine was launched for her meanwhile: the task goes
    # back to the node she has (no wait for a boot, and her node is not terminated under her).
    drained_i = instance("i-01", ALICE)
    drained = node_of(drained_i, availability="drain")
    booting = instance("i-02", ALICE, state="pending", launched_at=NOW - 5)
    result = run(
        snapshot(
            nodes=[drained],
            instances=[drained_i, booting],
            tasks=[pending_task("t1", ALICE)],
            idle_since={drained.id: NOW - 10_000},
        )
    )
    assert only(result, Activate).node_id == drained.id
    assert actions_of(result, Terminate) == []


def test_back_in_the_swarm_the_resumed_node_is_activated_for_its_owner() -> None:
    machine = warm_machine(state="running")
    node = node_of(machine, availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert only(result, Activate).node_id == node.id
    assert actions_of(result, Launch) == []


def test_a_drained_node_brought_back_says_for_whom() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Activate).reason == f"{ALICE} has pending work for node {node.id} again"


# -- machines that joined or are booting -------------------------------------------------------------------


def _launch_then_observe(node_state: str | None, node_labelled: bool = False) -> tuple[Plan, Plan]:
    """Cycle 1 launches for a pending task; cycle 2 sees the instance (and its node, if any) and the same task."""
    task = pending_task("t1", ALICE, cpus=1.0)
    first = run(snapshot(tasks=[task]))
    ec2_state = "pending" if node_state is None else "running"
    launched = instance_from_launch(only(first, Launch), "i-new", launched_at=NOW + 1, state=ec2_state)
    nodes = [] if node_state is None else [node_of(launched, state=node_state, labelled=node_labelled, owner=ALICE)]
    second = run(next_snapshot(first, now=NOW + 30, nodes=nodes, tasks=[task], instances=[launched]))
    return first, second


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


def test_a_joined_unlabelled_machine_that_mounted_the_owners_volume_takes_the_cache_work() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    node = node_of(machine, labelled=False)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[cached_task("t1", ALICE_N1)]))
    assert waiting_for(result, "t1").reason == joining("i-01")
    assert only(result, LabelNode).node_id == node.id
    assert actions_of(result, Launch) == []


def test_a_joined_node_already_carrying_its_owners_labels_is_room_for_that_owner() -> None:
    """Labels naming the very owner the machine was launched for are no conflict."""
    machine = instance("i-01", ALICE)
    node = with_owner_labels(node_of(machine, labelled=False), ALICE)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert waiting_for(result, "t1").reason == joining("i-01")
    assert actions_of(result, Launch) == []


def test_a_node_whose_machine_was_launched_without_a_volume_takes_work_whatever_it_mounted() -> None:
    """Only a machine launched for a volume needs that volume mounted before work goes there."""
    machine = instance("i-01", ALICE)
    node = dataclasses.replace(node_of(machine, hostname="alice-box"), mounted_volume_id="vol-other")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert waiting_for(result, "t1").reason == fits_on("alice-box")


def test_a_node_claiming_our_machine_from_another_address_lends_it_no_cache() -> None:
    """An impostor labelled for the owner gets no cache work: the owner's machine (and volume) is still joining."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1", state="pending")
    impostor = node_of(machine, labelled=False, availability="active", hostname="impostor", addr="10.9.9.9")
    impostor = with_owner_labels(impostor, ALICE_N1)
    result = run(snapshot(nodes=[impostor], instances=[machine], tasks=[cached_task("t1", ALICE_N1)]))
    assert waiting_for(result, "t1").reason == joining("i-01")


def test_a_booting_machine_whose_owner_tags_cannot_be_read_is_nobodys_room() -> None:
    unreadable = instance("i-01", state="pending", tags={"user_id": "Not An Id!"})
    result = run(snapshot(instances=[unreadable], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


def test_a_booting_machine_of_a_type_ec2_does_not_describe_offers_no_room() -> None:
    unknown = instance("i-01", ALICE, state="pending", instance_type="c5.large")
    result = run(snapshot(instances=[unknown], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


# -- machines of a batch, bound to the first owner whose work takes one ------------------------------------


def test_machines_on_their_way_cover_the_class_after_a_restart() -> None:
    """A new leader (nothing carried over) sees the batch's anonymous machines and launches nothing more."""
    tasks = [pending_task(f"t{n}", student(n)) for n in range(10)]
    booting = [class_machine(f"i-{n:02d}") for n in range(10)]

    result = run(snapshot(tasks=tasks, instances=booting, now=NOW + 20), CLASS_POLICY)

    assert actions_of(result, Launch) == []
    assert all("waiting for instance" in waiting_for(result, f"t{n}").reason for n in range(10))


def test_a_student_with_two_tasks_takes_one_machine_and_leaves_the_other_free() -> None:
    tasks = [pending_task("t-a", student(1), cpus=0.5), pending_task("t-b", student(1), cpus=0.5)]
    machines = [class_machine(f"i-{n:02d}", state="running") for n in range(2)]
    joined = [node_of(m, labelled=False) for m in machines]

    result = run(snapshot(tasks=tasks, instances=machines, nodes=joined, now=NOW + 20), CLASS_POLICY)

    [label] = actions_of(result, LabelNode)
    assert Owner.from_labels(labels_of(label)) == student(1)


def test_unowned_work_never_takes_a_machine_launched_for_owners() -> None:
    machine = class_machine("i-01", state="running")
    joined = node_of(machine, labelled=False)

    result = run(snapshot(tasks=[pending_task("t-shared", NOBODY)], instances=[machine], nodes=[joined]), CLASS_POLICY)

    assert actions_of(result, LabelNode) == []


def test_a_machine_too_small_for_a_task_is_not_taken_and_the_smallest_that_fits_is() -> None:
    small = instance("i-small", NOBODY, state="pending", tags={INSTANCE_BATCH_TAG: "b1"}, instance_type="t3.medium")
    large = instance("i-large", NOBODY, state="pending", tags={INSTANCE_BATCH_TAG: "b2"}, instance_type="m5.xlarge")
    big_task = pending_task("t-big", student(1), cpus=3.0, memory_gib=8.0)
    small_task = pending_task("t-small", student(2), cpus=1.0, memory_gib=1.0)

    result = run(snapshot(tasks=[small_task, big_task], instances=[small, large], now=NOW + 20), CLASS_POLICY)

    assert actions_of(result, Launch) == []  # the big task took the large machine, the small one the small
    assert "i-large" in waiting_for(result, "t-big").reason
    assert "i-small" in waiting_for(result, "t-small").reason


def test_a_batch_machine_takes_work_whose_constraints_its_labelled_node_will_meet() -> None:
    """Its node will be a worker labelled for the owner: a constraint on that holds; one on a manager does not."""
    unbound = instance("i-u1", NOBODY, state="pending", tags={INSTANCE_BATCH_TAG: "batch-1"})
    on_workers = pending_task("t1", ALICE, constraints=["node.role==worker"])
    result = run(snapshot(instances=[unbound], tasks=[on_workers]))
    assert waiting_for(result, "t1").reason == joining("i-u1")
    assert actions_of(result, Launch) == []

    on_managers = pending_task("t1", ALICE, constraints=["node.role==manager"])
    waiting = waiting_for(run(snapshot(instances=[unbound], tasks=[on_managers])), "t1")
    assert waiting.reason == "constraint 'node.role==manager' cannot be met by a node warmswarm launches"
    assert waiting.unschedulable


def test_a_batch_machine_whose_old_registration_takes_the_work_is_labelled_for_that_owner() -> None:
    """Two registrations of one batch machine: the labelled one takes alice's work, so the machine is alice's and
    its fresh registration is labelled for her too (not left unbound for anyone's work)."""
    unbound = instance("i-u1", NOBODY, tags={INSTANCE_BATCH_TAG: "batch-1"})
    old = node_of(unbound, node_id="node-old", hostname="old", owner=ALICE)
    fresh = node_of(unbound, node_id="node-new", hostname="new", labelled=False)
    result = run(snapshot(nodes=[old, fresh], instances=[unbound], tasks=[pending_task("t1", ALICE)]))
    assert waiting_for(result, "t1").reason == fits_on("old")
    label = only(result, LabelNode)
    assert (label.node_id, Owner.from_labels(labels_of(label))) == ("node-new", ALICE)


# -- nodes that dropped out while their machine runs -------------------------------------------------------


def down_while_runs(hostname: str, owner: Owner, instance_id: str) -> str:
    return (
        f"node {hostname} of {owner} is down while {instance_id} runs: waiting for it to come back"
        " (terminated and replaced after max_start_s)"
    )


def claimed_buffer_machine(owner: Owner = ALICE) -> Instance:
    """A warm-buffer machine an owner claimed: its node joined (unlabelled) before it was stopped."""
    return instance("i-b1", owner, tags={INSTANCE_BUFFER_TAG: "true"})


def test_a_node_that_dropped_out_is_waited_for_not_replaced_until_max_start_s() -> None:
    """Re-integration: a reboot or a network cut must not buy the owner a second machine while the first comes back."""
    policy = make_policy(max_start_s=600.0)
    alice_i = instance("i-01", ALICE)
    down = node_of(alice_i, state="down")
    rescheduled = pending_task("t1.2", ALICE)  # swarm's new task for the one that ran there

    first = run(snapshot(nodes=[down], instances=[alice_i], tasks=[rescheduled], now=NOW), policy)
    assert actions_of(first, Launch) == []
    assert "waiting for it to come back" in waiting_for(first, "t1.2").reason
    assert first.carried.down_since == {down.id: NOW}

    still = run(next_snapshot(first, now=NOW + 599, nodes=[down], instances=[alice_i], tasks=[rescheduled]), policy)
    assert actions_of(still, Launch) == []

    late = run(next_snapshot(still, now=NOW + 600, nodes=[down], instances=[alice_i], tasks=[rescheduled]), policy)
    assert only(late, Terminate).cause == "node_down"
    assert [launch.owner for launch in actions_of(late, Launch)] == [ALICE]


def test_a_down_node_that_never_was_labelled_is_a_machine_still_joining() -> None:
    """Not labelled and not a claimed buffer machine: its boot is not over; the task waits for the join."""
    machine = instance("i-01", ALICE)
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert waiting_for(result, "t1").reason == joining("i-01")


def test_unowned_work_does_not_wait_for_a_shared_node_that_is_down() -> None:
    machine = instance("i-01", NOBODY)
    node = node_of(machine, state="down")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", NOBODY)]))
    assert only(result, Launch).owner == NOBODY


@pytest.mark.parametrize(
    ("written", "waits"),
    [(None, True), (ALICE, True), (BOB, False)],
    ids=["no-owner-labels", "its-owners-labels", "another-owners-labels"],
)
def test_a_claimed_buffer_machine_whose_node_is_down_is_waited_for_unless_labelled_for_another(
    written: Owner | None, waits: bool
) -> None:
    machine = claimed_buffer_machine(ALICE)
    node = node_of(machine, labelled=False, state="down", hostname="buf")
    if written is not None:
        node = with_owner_labels(node, written)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    if waits:
        assert waiting_for(result, "t1").reason == down_while_runs("buf", ALICE, "i-b1")
        assert actions_of(result, Launch) == []
    else:
        assert only(result, Launch).owner == ALICE


def test_a_down_node_offers_only_the_room_its_tasks_leave() -> None:
    machine = instance("i-01", ALICE)  # t3.medium: 2 CPU
    node = node_of(machine, state="down", hostname="box")
    busy = running_task("t0", node, ALICE, cpus=1.5)

    def result_for(cpus: float) -> Plan:
        return run(snapshot(nodes=[node], instances=[machine], tasks=[busy, pending_task("t1", ALICE, cpus=cpus)]))

    assert waiting_for(result_for(0.5), "t1").reason == down_while_runs("box", ALICE, "i-01")
    assert only(result_for(1.0), Launch).task_ids == ("t1",)


def test_a_stale_registration_listed_first_does_not_draw_work_from_the_rejoined_node() -> None:
    machine = instance("i-01", ALICE)
    stale = node_of(machine, node_id="node-old", hostname="old", state="down")
    fresh = node_of(machine, node_id="node-new", hostname="new")
    result = run(snapshot(nodes=[stale, fresh], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert waiting_for(result, "t1").reason == fits_on("new")


def test_a_down_node_whose_machine_is_gone_is_not_waited_for() -> None:
    gone = instance("i-01", ALICE)
    node = node_of(gone, state="down")  # labelled by us earlier: still known as ours
    result = run(snapshot(nodes=[node], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


# -- cache work goes only where its volume is --------------------------------------------------------------


def test_cached_task_is_not_matched_to_its_owners_machine_without_a_volume() -> None:
    plain = instance("i-plain", ALICE_N1)
    result = run(snapshot(nodes=[node_of(plain)], instances=[plain], tasks=[cached_task("t1", ALICE_N1)]))
    assert only(result, CreateVolume).owner == ALICE_N1, "a machine with the volume is on its way instead"
    assert not waiting_for(result, "t1").reason.startswith("fits on node")


def test_cached_task_does_not_bring_back_its_owners_drained_machine_without_a_volume() -> None:
    plain = instance("i-plain", ALICE_N1)
    drained = node_of(plain, availability="drain")
    result = run(
        snapshot(
            nodes=[drained], instances=[plain], tasks=[cached_task("t1", ALICE_N1)], volumes=[volume(VOL, ALICE_N1)]
        )
    )
    assert actions_of(result, Activate) == []
    assert only(result, Launch).volume_id == VOL


def test_cached_task_is_matched_to_its_owners_machine_with_the_volume() -> None:
    carrying = instance("i-vol", ALICE_N1, volume_id=VOL)
    result = run(snapshot(nodes=[node_of(carrying)], instances=[carrying], tasks=[cached_task("t1", ALICE_N1)]))
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert waiting_for(result, "t1").reason.startswith("fits on node")


def test_cache_work_is_never_matched_to_a_node_without_its_mount() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    drained = node_of(machine, mounted=False, availability="drain")
    task = cached_task("t1", ALICE_N1)

    result = run(snapshot(nodes=[drained], instances=[machine], tasks=[task], volumes=[volume("vol-1")]))

    assert actions_of(result, Activate) == []
    assert not waiting_for(result, "t1").reason.startswith("node")


# -- what a waiting task is told ---------------------------------------------------------------------------


def _cache_on_for_a_half_pinned_owner() -> Snapshot:
    return snapshot(tasks=[cached_task("t1", ALICE)])


def _no_allowed_type_known() -> Snapshot:
    return snapshot(tasks=[pending_task("t1", ALICE)], instance_types={})


def _a_warm_machine_of_the_owner() -> Snapshot:
    tags = {INSTANCE_WARM_TTL_TAG: "3600", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 1800)}
    machine = instance("i-01", ALICE_N1, state="stopped", tags=tags, volume_id="vol-1")
    node = node_of(machine, state="down", availability="drain")
    return snapshot(nodes=[node], instances=[machine], tasks=[cached_task("t1", ALICE_N1)])


def test_a_task_whose_machine_is_booting_waits_for_it_to_join() -> None:
    booting = instance("i-boot", ALICE, state="pending", launched_at=NOW - 30)

    result = run(snapshot(tasks=[pending_task("t1", ALICE)], instances=[booting]))

    waiting = waiting_for(result, "t1")
    assert waiting.reason == "waiting for instance i-boot (t3.medium) to join the swarm"
    assert waiting.starting
    assert not waiting.unschedulable


def test_task_waiting_for_a_machine_on_its_way_names_it() -> None:
    booting = instance("i-0b", ALICE, state="pending")
    waiting = waiting_for(run(snapshot(instances=[booting], tasks=[pending_task("t1", ALICE)])), "t1")
    assert waiting.reason == "waiting for instance i-0b (t3.medium) to join the swarm"
    assert not waiting.unschedulable


def test_a_task_that_fits_on_a_labelled_node_waits_for_the_scheduler() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11")

    result = run(snapshot(nodes=[node], tasks=[pending_task("t1", ALICE)], instances=[machine]))

    assert waiting_for(result, "t1").reason == "fits on node ip-10-0-0-11; waiting for the swarm scheduler"
    assert result.actions == ()


def test_task_that_fits_an_existing_node_waits_for_the_swarm_scheduler() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, hostname="alice-box")
    waiting = waiting_for(run(snapshot(nodes=[node], instances=[alice_i], tasks=[pending_task("t1", ALICE)])), "t1")
    assert waiting.reason == "fits on node alice-box; waiting for the swarm scheduler"
    assert waiting.owner == ALICE


def test_a_drained_node_of_the_owner_is_brought_back_and_says_so() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11", availability="drain")

    result = run(snapshot(nodes=[node], tasks=[pending_task("t1", ALICE)], instances=[machine]))

    assert waiting_for(result, "t1").reason == f"node ip-10-0-0-11 of {ALICE} is brought back from drain"
    assert [a.kind for a in result.actions] == ["activate"]


def test_task_bringing_back_a_drained_node_says_so() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, hostname="alice-box", availability="drain")
    waiting = waiting_for(run(snapshot(nodes=[node], instances=[alice_i], tasks=[pending_task("t1", ALICE)])), "t1")
    assert "alice-box" in waiting.reason
    assert "brought back from drain" in waiting.reason


def test_a_returning_owners_node_that_is_down_is_waited_for_while_its_machine_runs() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11", state="down")
    task = pending_task("t1", ALICE)
    earlier = running_task("t0", node, ALICE)

    result = run(snapshot(nodes=[node], tasks=[task, earlier], instances=[machine], down_since={node.id: NOW - 5}))

    assert waiting_for(result, "t1").reason == (
        f"node ip-10-0-0-11 of {ALICE} is down while i-1 runs: waiting for it to come back"
        " (terminated and replaced after max_start_s)"
    )


@pytest.mark.parametrize(
    ("world", "reason"),
    [
        (
            _cache_on_for_a_half_pinned_owner,
            "the cache is on but the service is not pinned to one owner: it needs the constraints"
            " node.labels.user_id==…, node.labels.project_id==… and node.labels.node_id==…",
        ),
        (
            _no_allowed_type_known,
            "needs 1 CPU, 1 GiB but no allowed instance type fits it after the per-node overhead"
            " (0.1 CPU, 0.25 GiB); the largest offers nothing (no allowed type is known to EC2)",
        ),
        (
            _a_warm_machine_of_the_owner,
            f"resuming your machine i-01 (stopped, kept warm for {ALICE_N1}): the same node comes back with its"
            " labels and cache",
        ),
    ],
    ids=["cache-needs-a-full-owner", "nothing-offered", "warm-machine-resumed"],
)
def test_a_waiting_task_is_told_exactly_why(world: Callable[[], Snapshot], reason: str) -> None:
    """The status, the journal and the CLI show this text to the task's owner."""
    assert waiting_for(run(world()), "t1").reason == reason


def test_each_waiting_task_is_listed_with_its_service_and_owner() -> None:
    """The status groups waiting tasks by service and owner: matched, unschedulable and unreadable alike."""
    machine = instance("i-01", ALICE)
    node = node_of(machine, hostname="alice-box")
    unreadable = pending_task("t-bad", constraints=["node.labels.user_id==Not An Id!"])
    tasks = [pending_task("t-fits", ALICE), pending_task("t-huge", BOB, cpus=64.0), unreadable]
    result = run(snapshot(nodes=[node], instances=[machine], tasks=tasks))
    assert waiting_for(result, "t-fits") == Waiting(
        "t-fits", "service-t-fits", ALICE, fits_on("alice-box"), starting=True
    )
    huge = waiting_for(result, "t-huge")
    assert (huge.service_name, huge.owner, huge.unschedulable) == ("service-t-huge", BOB, True)
    assert waiting_for(result, "t-bad") == Waiting(
        "t-bad", "service-t-bad", NOBODY, unreadable.owner_problem, unschedulable=True
    )
    assert unreadable.owner_problem


# -- what no launch can place: unschedulable ---------------------------------------------------------------


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


def test_when_ec2_knows_none_of_the_allowed_types_nothing_is_offered() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], instance_types={}), make_policy())

    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    assert "nothing (no allowed type is known to EC2)" in waiting.reason
    assert result.actions == ()


@pytest.mark.parametrize(
    "constraint", ["node.role==manager", "node.hostname==x", "node.labels.other==y", "node.labels.USER_ID==alice"]
)
def test_task_whose_constraints_no_launch_can_satisfy_is_unschedulable_and_names_the_constraint(
    constraint: str,
) -> None:
    reason = _unschedulable(pending_task("t1", ALICE, constraints=[constraint]))
    assert constraint in reason
    assert "cannot be met" in reason


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


@pytest.mark.parametrize(
    "owner",
    [
        Owner(project_id="p1", node_id="n1"),
        Owner(user_id="alice", node_id="n1"),
        Owner(user_id="alice", project_id="p1"),
        Owner(user_id="alice"),
        Owner(),
    ],
    ids=str,
)
def test_cached_task_not_pinned_to_all_three_owner_ids_is_unschedulable(owner: Owner) -> None:
    result = run(snapshot(tasks=[cached_task("t1", owner)]))
    assert result.actions == ()
    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    missing = [key for key in ("user_id", "project_id", "node_id") if getattr(owner, key) is None]
    assert all(f"node.labels.{key}" in waiting.reason for key in missing)
    assert "cache" in waiting.reason


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (SERVICE_LABEL_CACHE_TTL_S, "abc"),
        (SERVICE_LABEL_CACHE_SIZE_GIB, "0"),
        (SERVICE_LABEL_CACHE_VOLUME_TYPE, "gp9"),
        (SERVICE_LABEL_CACHE_ENABLED, "yes"),
    ],
)
def test_malformed_cache_labels_make_the_task_unschedulable_naming_the_label(key: str, value: str) -> None:
    labels = {**CACHE_ON.to_labels(), key: value}
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=labels)]))
    assert result.actions == ()
    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    assert key in waiting.reason
    assert value in waiting.reason
    assert "service-t1" in waiting.reason


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
