"""The EC2 book (issue 23): a full listing when one is due (first, on the interval, at a term, after a failed action,
on request), else by id only the instances and volumes that can move; an id asked for and absent is dropped."""

from __future__ import annotations

import dataclasses

import pytest
from warmswarm_autoscaling.actions import Terminate
from warmswarm_autoscaling.ec2_book import MOVING_WINDOW_S, Ec2Book
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.ports import Ec2Error
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_autoscaling.snapshot import Instance, Node

from .factories import ALICE_N1, BOB, CLUSTER, NOW, attachment, instance, launch, node_of, pending_task, running_task
from .factories import volume as cache_volume
from .fakes import Clock, ClusterEc2, FakeEc2, FakeSwarm, autoscaler

LONG_AGO = NOW - 3600.0
INTERVAL_S = 120.0  # the setting's default, which autoscaler() wires
FULL = [("list_instances", ()), ("list_volumes", ())]


def steady(instance_id: str) -> Instance:
    return instance(instance_id, ALICE_N1, launched_at=LONG_AGO)


def ready(*instances: Instance) -> list[Node]:
    return [node_of(i) for i in instances]


async def read(book: Ec2Book, now: float, nodes: list[Node]) -> None:
    """One cycle's reads, as observe() makes them."""
    first = await book.refresh(now)
    await book.follow_nodes(nodes, first)


def a_steady_world() -> tuple[FakeSwarm, ClusterEc2, Clock, Reconciler]:
    """One machine of alice's, long launched, its node ready and busy: a cycle plans nothing."""
    machine = steady("i-steady")
    node = node_of(machine)
    swarm = FakeSwarm(nodes=[node], tasks=[running_task("t1", node, ALICE_N1)])
    ec2 = ClusterEc2(instances=[machine], volumes=[cache_volume("vol-steady", attached_to=[attachment("i-steady")])])
    clock = Clock()
    return swarm, ec2, clock, autoscaler(swarm, ec2, clock=clock)


# -- through the reconciler -------------------------------------------------------------------------------------------


async def test_the_first_cycle_lists_everything_and_an_idle_one_after_reads_no_machine() -> None:
    _swarm, ec2, clock, scaler = a_steady_world()

    first = await scaler.cycle()
    assert first.ok, first
    assert first.actions == 0
    assert ec2.reads == FULL
    ec2.reads.clear()

    clock.now += 30.0
    second = await scaler.cycle()

    assert second.ok
    assert second.actions == 0
    assert ec2.reads == [], "a steady machine and its volume are not described"
    snapshot = scaler.last.snapshot
    assert snapshot is not None
    assert [i.id for i in snapshot.instances] == ["i-steady"], "the snapshot still holds what the book knows"
    assert [v.id for v in snapshot.volumes] == ["vol-steady"]


async def test_the_interval_brings_a_full_listing_which_sees_a_tag_changed_behind_our_back() -> None:
    _swarm, ec2, clock, scaler = a_steady_world()
    await scaler.cycle()
    ec2.reads.clear()
    await ec2.untag_instance("i-steady", list(ALICE_N1.labels()))  # by hand: nothing of ours moves

    clock.now += INTERVAL_S - 1.0
    await scaler.cycle()
    snapshot = scaler.last.snapshot
    assert ec2.reads == []
    assert snapshot is not None
    assert snapshot.instances[0].owner == ALICE_N1, "not seen before the interval"

    clock.now += 1.0
    await scaler.cycle()
    snapshot = scaler.last.snapshot
    assert ec2.reads == FULL
    assert snapshot is not None
    assert snapshot.instances[0].owner != ALICE_N1, "seen at the full listing"


async def test_a_new_term_and_a_request_each_bring_a_full_listing() -> None:
    _swarm, ec2, clock, scaler = a_steady_world()
    await scaler.cycle()

    for ask in (scaler.begin_term, lambda: scaler.request_full_listing("a test asks")):
        ec2.reads.clear()
        ask()
        clock.now += 1.0
        await scaler.cycle()
        assert ec2.reads == FULL
        ec2.reads.clear()
        await scaler.cycle()
        assert ec2.reads == [], "once"


async def test_after_a_failed_action_the_next_cycle_lists_everything_after_a_good_one_only_the_new_machine() -> None:
    swarm = FakeSwarm(tasks=[pending_task("t1", BOB)])
    ec2 = ClusterEc2()
    clock = Clock()
    scaler = autoscaler(swarm, ec2, clock=clock)
    ec2.failing["RunInstances"] = "InternalError"  # no answer: the launch may or may not have happened

    failed = await scaler.cycle()
    assert failed.actions == 1
    assert ec2.launched == []
    ec2.reads.clear()
    del ec2.failing["RunInstances"]
    clock.now += 1.0

    launched = await scaler.cycle()
    assert launched.actions == 1
    assert len(ec2.launched) == 1
    assert ec2.reads == FULL, "after the failed launch: the world may differ from what we think"
    ec2.reads.clear()
    clock.now += 1.0

    await scaler.cycle()
    new_id = ec2.instances[0].id
    assert ec2.reads == [("describe_instances", (new_id,))], "the launch succeeded: its machine, by id"
    snapshot = scaler.last.snapshot
    assert snapshot is not None
    assert [i.id for i in snapshot.instances] == [new_id]


# -- the book's own rules ---------------------------------------------------------------------------------------------


async def test_only_what_can_move_is_described_and_an_id_gone_is_dropped() -> None:
    machines = [
        steady("i-steady"),
        dataclasses.replace(steady("i-pending"), state="pending"),
        dataclasses.replace(steady("i-stopping"), state="stopping"),
        dataclasses.replace(steady("i-going"), state="shutting-down"),
        instance("i-new", ALICE_N1, launched_at=NOW - MOVING_WINDOW_S + 5.0),
        steady("i-down"),  # its node is down: stopped or terminated by hand, or rebooting
        steady("i-nodeless"),  # no node names it
    ]
    volumes = [
        cache_volume("vol-steady", attached_to=[attachment("i-steady")]),
        cache_volume("vol-free"),
        cache_volume("vol-creating", state="creating"),
        cache_volume("vol-attaching", state="in-use", attached_to=[attachment("i-steady", state="attaching")]),
        cache_volume("vol-on-going", state="in-use", attached_to=[attachment("i-going")]),
        cache_volume("vol-on-down", state="in-use", attached_to=[attachment("i-down")]),
    ]
    ec2 = FakeEc2(instances=machines, volumes=volumes)
    book = Ec2Book(ec2, CLUSTER, INTERVAL_S)
    nodes = [*ready(*machines[:5]), node_of(machines[5], state="down")]
    await read(book, NOW, nodes)
    assert ec2.reads == FULL
    ec2.reads.clear()
    ec2.instances = [i for i in ec2.instances if i.id != "i-going"]  # terminated meanwhile

    await read(book, NOW + 1.0, nodes)

    assert ec2.reads == [
        ("describe_instances", ("i-going", "i-new", "i-pending", "i-stopping")),
        ("describe_volumes", ("vol-attaching", "vol-creating", "vol-on-going")),
        ("describe_instances", ("i-down", "i-nodeless")),
        ("describe_volumes", ("vol-on-down",)),
    ]
    assert "i-going" not in {i.id for i in book.instances}, "asked for and absent: gone"
    assert {i.id for i in book.instances} == {i.id for i in machines} - {"i-going"}


async def test_what_an_action_named_is_described_for_ten_minutes_and_a_launchs_new_ids_join_the_book() -> None:
    machine = steady("i-1")
    aws = Clock()  # AWS's clock, which launch times are compared with
    ec2 = FakeEc2(instances=[machine], volumes=[cache_volume("vol-a")], clock=aws)
    book = Ec2Book(ec2, CLUSTER, float("inf"))
    await read(book, NOW, ready(machine))
    ec2.reads.clear()
    ec2.instances.append(instance("i-2", ALICE_N1, state="pending", launched_at=NOW))
    book.note_outcomes(
        [
            Outcome(Terminate("i-1", "idle", "idle")),
            Outcome(launch("vol-a"), instance_id="i-2", instance_ids=("i-2",)),
        ],
        NOW,
    )

    aws.now = NOW + 1.0
    await read(book, aws.now, ready(*ec2.instances))
    assert ec2.reads == [("describe_instances", ("i-1", "i-2")), ("describe_volumes", ("vol-a",))]
    assert {i.id for i in book.instances} == {"i-1", "i-2"}

    ec2.instances = [dataclasses.replace(i, state="running") for i in ec2.instances]
    aws.now = NOW + MOVING_WINDOW_S - 1.0
    await read(book, aws.now, ready(*ec2.instances))
    assert ec2.reads[-2:] == [("describe_instances", ("i-1", "i-2")), ("describe_volumes", ("vol-a",))]

    ec2.reads.clear()
    aws.now = NOW + MOVING_WINDOW_S
    await read(book, aws.now, ready(*ec2.instances))
    assert ec2.reads == [], "ten minutes on, what settled is not read again"


async def test_a_failed_read_by_id_leaves_the_book_and_its_full_listing_as_they_were() -> None:
    machine = dataclasses.replace(steady("i-1"), state="pending")
    ec2 = FakeEc2(instances=[machine])
    book = Ec2Book(ec2, CLUSTER, INTERVAL_S)
    await read(book, NOW, ready(machine))
    ec2.failing["DescribeInstances"] = "RequestLimitExceeded"

    with pytest.raises(Ec2Error, match="RequestLimitExceeded"):
        await read(book, NOW + 1.0, ready(machine))
    assert [i.state for i in book.instances] == ["pending"]
    assert book.full_listing_due(NOW + 1.0) is None
    assert book.full_listing_due(NOW + INTERVAL_S) is not None


async def test_a_plain_no_capacity_lists_nothing_more_but_another_failure_lists_everything() -> None:
    # A capacity shortage is retried every few seconds: AWS's clear "no" changed nothing, so it brings no full listing.
    ec2 = FakeEc2(instances=[steady("i-1")])
    book = Ec2Book(ec2, CLUSTER, INTERVAL_S)
    await read(book, NOW, ready(steady("i-1")))
    no_capacity = ("InsufficientInstanceCapacity: none in this zone", ("t3.medium", "us-east-1a"))

    book.note_outcomes([Outcome(launch(), error=no_capacity[0], unavailable_offering=no_capacity[1])], NOW + 1.0)
    assert book.full_listing_due(NOW + 1.0) is None

    book.note_outcomes([Outcome(launch(), error="InternalError: no answer")], NOW + 2.0)
    assert book.full_listing_due(NOW + 2.0) is not None
