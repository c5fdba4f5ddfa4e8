"""plan/surplus.py: buffer machines beyond their target go, and idle hot ones give their place at max_instances."""

from __future__ import annotations

import dataclasses
from typing import Final

from warmswarm_autoscaling.actions import Launch, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.reservations import decide_buffers
from warmswarm_autoscaling.plan.surplus import surplus
from warmswarm_autoscaling.snapshot import Carried, Instance, Repeated
from warmswarm_models import BUFFER_KIND_HOT, INSTANCE_BUFFER_KIND_TAG, INSTANCE_BUFFER_TAG
from warmswarm_models.reservation import Reservation, ReservedSize

from .factories import (
    ALICE_N1,
    BOB,
    BOB_N1,
    NOW,
    ZONE_A,
    actions_of,
    cached_task,
    instance,
    make_policy,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
    volume,
    waiting_for,
)

HOT_TAGS: Final = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}


def at_cap(*, max_instances: int = 2, joined: bool = True, reservations: tuple[Reservation, ...] = ()) -> Plan:
    """A hot t3.medium idle in the buffer, Alice's busy machine, and Bob's task that no t3.medium fits (3 CPUs)."""
    hot = instance("i-h1", tags=HOT_TAGS)
    alices = instance("i-01", ALICE_N1)
    alices_node = node_of(alices)
    nodes = [alices_node, *([node_of(hot, labelled=False)] if joined else [])]
    tasks = [running_task("t-a", alices_node, ALICE_N1), pending_task("t-b", BOB, cpus=3.0)]
    policy = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_instances=max_instances)
    world = snapshot(instances=[hot, alices], nodes=nodes, tasks=tasks)
    return run(dataclasses.replace(world, reservations=reservations), policy)


def terminated(result: Plan) -> list[tuple[str, str]]:
    return [(t.instance_id, t.cause) for t in actions_of(result, Terminate)]


def test_an_idle_hot_machine_gives_its_place_to_an_owner_waiting_at_max_instances() -> None:
    """Found by the fault campaign (issue 32, seed 468): the hot buffer held places at the cap while an owner's
    session that no buffer machine fits waited, and its launch came too late to run within the calm."""
    result = at_cap()

    assert terminated(result) == [("i-h1", "buffer_surplus")]
    (going,) = actions_of(result, Terminate)
    assert going.reason == (
        "hot buffer machine i-h1 (t3.medium in eu-west-1a) gives its place to owners' work: 1 task(s) wait at"
        " max_instances=2 and none fits a buffer machine; it never ran anyone's work"
    )
    assert waiting_for(result, "t-b").reason.startswith("max_instances=2 reached")
    assert actions_of(result, Launch) == []  # the place is free next cycle, and the owner's launch takes it


def test_below_the_cap_the_hot_machine_stays_and_the_owner_gets_a_launch() -> None:
    result = at_cap(max_instances=3)
    assert terminated(result) == []
    assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]


def test_a_booting_hot_machine_keeps_its_place() -> None:
    assert terminated(at_cap(joined=False)) == []


def test_a_hot_machine_an_active_reservation_counts_on_keeps_its_place() -> None:
    """Ops asked for it: the reservation's sessions are due, and the owner waits at the cap as the reason says."""
    small = ReservedSize(cpus=0.5, memory_bytes=2**28)
    due = Reservation(
        id="resv-000000000001", group="class", sessions=1, resources=small, at=NOW + 60, zone=ZONE_A, created_at=NOW
    )
    result = at_cap(reservations=(due,))
    assert terminated(result) == []
    (hold,) = result.holds
    assert hold.held == {ZONE_A: 1}


def test_the_refill_leaves_a_place_for_an_owner_whose_launch_backs_off() -> None:
    """Found by the fault campaign (seed 9938): an owner's volume backed off, the hot buffer took the last place, and
    each time the back-off ended the buffer gave it back (a boot lost), all day."""
    alices = instance("i-01", ALICE_N1)
    alices_node = node_of(alices)
    backing_off = Repeated(frozenset({"i-00"}), frozenset({("t3.medium", ZONE_A)}), NOW - 10, NOW + 50)
    bobs = volume("vol-1", BOB_N1, zone=ZONE_A)
    world = snapshot(
        instances=[alices],
        nodes=[alices_node],
        volumes=[bobs],
        tasks=[running_task("t-a", alices_node, ALICE_N1), cached_task("t-b", BOB_N1)],
        carried=Carried(volume_backoffs={"vol-1": backing_off}),
    )
    policy = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_instances=2)

    assert waiting_for(run(world, policy), "t-b").until == NOW + 50
    assert actions_of(run(world, policy), Launch) == []  # the place is Bob's once his back-off ends
    roomy = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_instances=3)
    assert [a.purpose for a in actions_of(run(world, roomy), Launch)] == ["hot_buffer"]


def idle_hot(instance_id: str, instance_type: str = "t3.medium") -> Instance:
    return instance(instance_id, tags=HOT_TAGS, instance_type=instance_type)


def giving_way(
    machines: tuple[Instance, ...], waiting_at_cap: int, *, reservations: tuple[Reservation, ...] = ()
) -> list[str]:
    """The machines surplus() lets go when `waiting_at_cap` tasks wait, every target keeping what is there."""
    policy = make_policy(hot_buffer={"t3.medium": 5, "m5.large": 5}, availability_zones=(ZONE_A,))
    world = snapshot(instances=machines, nodes=[node_of(m, labelled=False) for m in machines])
    cluster = Cluster.of(dataclasses.replace(world, reservations=reservations), policy)
    buffers = decide_buffers(cluster)
    return [t.instance_id for t in surplus(cluster, buffers, list(machines), waiting_at_cap)]


def due(sessions: int, resv_id: str = "resv-000000000001") -> Reservation:
    small = ReservedSize(cpus=0.5, memory_bytes=2**28)
    return Reservation(
        id=resv_id, group="class", sessions=sessions, resources=small, at=NOW + 60, zone=ZONE_A, created_at=NOW
    )


def test_the_dearest_idle_hot_machine_gives_way_first() -> None:
    # Listed cheap first and the dear one's id last: only the price puts it first.
    assert giving_way((idle_hot("i-a"), idle_hot("i-b", "m5.large")), 1) == ["i-b"]


def test_only_as_many_give_way_as_tasks_wait() -> None:
    assert giving_way((idle_hot("i-h1"), idle_hot("i-h2"), idle_hot("i-h3")), 1) == ["i-h1"]


def test_a_reservation_keeps_exactly_the_machines_it_holds_and_the_rest_give_way() -> None:
    machines = (idle_hot("i-h1"), idle_hot("i-h2"), idle_hot("i-h3"))
    assert giving_way(machines, 3, reservations=(due(2),)) == ["i-h3"]


def test_the_machines_two_reservations_hold_add_up() -> None:
    machines = (idle_hot("i-h1"), idle_hot("i-h2"), idle_hot("i-h3"))
    assert giving_way(machines, 3, reservations=(due(1), due(1, "resv-000000000002"))) == ["i-h3"]


def test_a_hot_machine_beyond_the_fixed_target_says_it_is_the_hot_buffers() -> None:
    machines = (idle_hot("i-h1"), idle_hot("i-h2"))
    policy = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    world = snapshot(instances=machines, nodes=[node_of(m, labelled=False) for m in machines])
    (going,) = actions_of(run(world, policy), Terminate)
    assert going.instance_id == "i-h2"
    assert "is beyond the hot buffer's 1 per zone for its type" in going.reason
