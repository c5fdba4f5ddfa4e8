"""The room a pending task counts on instead of a launch: nodes, joining or returning machines; what it is told."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from warmswarm_autoscaling.actions import Activate, LabelNode, Launch
from warmswarm_autoscaling.plan import Plan, Waiting
from warmswarm_autoscaling.snapshot import Instance, Node, Snapshot
from warmswarm_models import (
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    Owner,
    format_timestamp,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    NOBODY,
    NOW,
    actions_of,
    cached_task,
    foreign_node,
    instance,
    node_of,
    only,
    pending_task,
    run,
    running_task,
    snapshot,
    waiting_for,
)

ALICE_P1 = Owner(user_id="alice", project_id="p1")
ALICE_P2 = Owner(user_id="alice", project_id="p2")
BOB_P1 = Owner(user_id="bob", project_id="p1")


def fits_on(hostname: str) -> str:
    return f"fits on node {hostname}; waiting for the swarm scheduler"


def joining(instance_id: str, instance_type: str = "t3.medium") -> str:
    return f"waiting for instance {instance_id} ({instance_type}) to join the swarm"


def down_while_runs(hostname: str, owner: Owner, instance_id: str) -> str:
    return (
        f"node {hostname} of {owner} is down while {instance_id} runs: waiting for it to come back"
        " (terminated and replaced after max_start_s)"
    )


def with_owner_labels(node: Node, owner: Owner) -> Node:
    """The node as someone other than warmswarm left it: `owner`'s labels, but not our instance-id label."""
    return dataclasses.replace(node, labels={**node.labels, **owner.labels()}, owner=owner)


def claimed_buffer_machine(owner: Owner = ALICE) -> Instance:
    """A warm-buffer machine an owner claimed: its node joined (unlabelled) before it was stopped."""
    return instance("i-b1", owner, tags={INSTANCE_BUFFER_TAG: "true"})


# -- what a waiting task is told, word for word -------------------------------------------------------------


def _cache_on_for_a_half_pinned_owner() -> Snapshot:
    return snapshot(tasks=[cached_task("t1", ALICE)])


def _no_allowed_type_known() -> Snapshot:
    return snapshot(tasks=[pending_task("t1", ALICE)], instance_types={})


def _a_warm_machine_of_the_owner() -> Snapshot:
    tags = {INSTANCE_WARM_TTL_TAG: "3600", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 1800)}
    machine = instance("i-01", ALICE_N1, state="stopped", tags=tags, volume_id="vol-1")
    node = node_of(machine, state="down", availability="drain")
    return snapshot(nodes=[node], instances=[machine], tasks=[cached_task("t1", ALICE_N1)])


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


# -- nodes that offer no room ---------------------------------------------------------------------------------


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


# -- machines that joined or are booting ----------------------------------------------------------------------


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
    assert (label.node_id, Owner.from_labels(label.labels)) == ("node-new", ALICE)


# -- nodes that dropped out while their machine runs --------------------------------------------------------


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


# -- what the status lists for each waiting task ------------------------------------------------------------


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


def test_a_drained_node_brought_back_says_for_whom() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Activate).reason == f"{ALICE} has pending work for node {node.id} again"


def test_a_larger_task_the_scheduler_has_not_tried_yet_does_not_hold_back_a_smaller_one() -> None:
    """Tasks are matched largest first; one not yet given up on by swarm is skipped, not the end of the list."""
    untried = pending_task("t-big", ALICE, cpus=1.5, err="")
    refused = pending_task("t-small", BOB, cpus=0.5)
    result = run(snapshot(tasks=[untried, refused]))
    assert only(result, Launch).task_ids == ("t-small",)


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
