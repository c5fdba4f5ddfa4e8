"""New machines (plan/launch.py): for whom and for which tasks, of which type, in which zone, in batches within
the call budget and the limits, what a launch carries, and why work waits instead of a launch."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import CreateVolume, Launch, LaunchBatch, RenewVolume, SetVolumeTtl, Start, Terminate
from warmswarm_autoscaling.snapshot import Carried, Repeated
from warmswarm_models import (
    INSTANCE_BATCH_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    CachePolicy,
    Owner,
    format_timestamp,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BACKOFF_S,
    BOB,
    BOB_N1,
    CACHE_ON,
    CLASS_POLICY,
    INSTANCE_TYPES,
    MAX_START_S,
    NOBODY,
    NOW,
    VOL,
    WARM_S,
    ZONE_A,
    ZONE_B,
    actions_of,
    batches,
    cached_task,
    instance,
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
    volume_from_create,
    volume_tagging,
    waiting_for,
)

# -- which tasks a launch serves, and for whom -------------------------------------------------------------


@pytest.mark.parametrize(
    "owner",
    [Owner(user_id="42"), Owner(project_id="7"), Owner(node_id="3"), Owner(user_id="42", project_id="7", node_id="3")],
    ids=str,
)
def test_launch_is_for_the_owner_the_placement_constraints_name(owner: Owner) -> None:
    launch = only(run(snapshot(tasks=[pending_task("t1", owner)])), Launch)
    assert launch.owner == owner


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


def test_the_tasks_a_launch_serves_wait_naming_their_service_and_the_machine() -> None:
    result = run(
        snapshot(tasks=[pending_task("t1", ALICE), cached_task("t2", BOB_N1)], volumes=[volume("v-b", BOB_N1)])
    )

    first, second = waiting_for(result, "t1"), waiting_for(result, "t2")
    assert (first.service_name, first.owner, first.starting) == ("service-t1", ALICE, True)
    assert first.reason == f"launching a t3.medium in {ZONE_B}"  # zone A has bob's machine with his volume
    assert (second.service_name, second.owner, second.starting) == ("service-t2", BOB_N1, True)
    assert second.reason == f"launching a t3.medium in {ZONE_A}, with cache volume v-b"


# -- the type: the cheapest that fits ----------------------------------------------------------------------


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


def test_owners_with_different_sizes_each_get_the_cheapest_type_that_fits_their_own_work() -> None:
    """The fitting types are worked out per demand: a large task's choice is not a small one's."""
    large = pending_task("t-large", ALICE, cpus=3.0, memory_gib=8.0)
    small = pending_task("t-small", BOB, cpus=1.0, memory_gib=1.0)
    launches = {
        launch.owner: launch.instance_type for launch in actions_of(run(snapshot(tasks=[large, small])), Launch)
    }
    assert launches == {ALICE: "m5.xlarge", BOB: "t3.medium"}


# -- the zone, and offerings out of capacity ---------------------------------------------------------------


def test_launches_spread_across_availability_zones() -> None:
    tasks = [pending_task("t1", ALICE), pending_task("t2", BOB)]
    zones = sorted(launch.availability_zone for launch in actions_of(run(snapshot(tasks=tasks)), Launch))
    assert zones == [ZONE_A, ZONE_B]


def test_launch_goes_to_the_zone_with_fewer_of_our_machines() -> None:
    result = run(snapshot(instances=[instance("i-01", BOB, zone=ZONE_A)], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).availability_zone == ZONE_B


def test_a_launch_goes_to_the_allowed_zone_with_fewest_of_our_machines() -> None:
    busy_a = instance("i-01", BOB, zone=ZONE_A)
    result = run(snapshot(nodes=[node_of(busy_a)], instances=[busy_a], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).availability_zone == ZONE_B


def test_new_machines_and_volumes_go_to_the_zone_with_the_fewest_of_ours_counting_each_one_decided() -> None:
    """Spreading over zones keeps one zone's outage from taking most of the cluster: the count starts from the
    machines that run and adds each machine (or volume, whose launch follows there) this plan decides."""
    bobs = {
        "A:2 B:1": [instance("i-a1", BOB), instance("i-a2", BOB), instance("i-b1", BOB, zone=ZONE_B)],
        "A:0 B:1": [instance("i-b1", BOB, zone=ZONE_B)],
        "A:2 B:0": [instance("i-a1", BOB), instance("i-a2", BOB)],
    }
    expected = {"A:2 B:1": [ZONE_A, ZONE_B], "A:0 B:1": [ZONE_A, ZONE_A], "A:2 B:0": [ZONE_B, ZONE_B]}
    for counts, live in bobs.items():
        plain = run(snapshot(tasks=[pending_task("t1", student(1)), pending_task("t2", student(2))], instances=live))
        cached = run(snapshot(tasks=[cached_task("t1", student(1)), cached_task("t2", student(2))], instances=live))

        assert sorted(seat.availability_zone for seat in actions_of(plain, Launch)) == expected[counts], counts
        assert sorted(create.availability_zone for create in actions_of(cached, CreateVolume)) == expected[counts]


def test_task_of_an_instance_that_did_not_join_gets_a_launch_elsewhere_in_the_same_cycle() -> None:
    late = instance("i-0late", ALICE, zone=ZONE_A, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(instances=[late], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Terminate).instance_id == "i-0late"
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_B)
    assert "i-0late" not in waiting_for(result, "t1").reason


def test_unavailable_offering_is_skipped_for_the_next_zone() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable={("t3.medium", ZONE_A): NOW + 1}))
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_B)
    assert result.carried.unavailable_offerings == {("t3.medium", ZONE_A): NOW + 1}


def test_type_unavailable_in_every_zone_is_skipped_for_the_next_cheapest_that_fits() -> None:
    unavailable = {("t3.medium", ZONE_A): NOW + 1, ("t3.medium", ZONE_B): NOW + 1}
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable=unavailable)), Launch)
    assert (launch.instance_type, launch.availability_zone) == ("m5.large", ZONE_A)


def test_expired_unavailable_marks_are_dropped_and_the_offering_is_tried_again() -> None:
    unavailable = {("t3.medium", ZONE_A): NOW, ("m5.large", ZONE_B): NOW - 100}
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable=unavailable))
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_A)
    assert result.carried.unavailable_offerings == {}


def test_offering_given_up_on_is_avoided_in_later_cycles_until_the_backoff_ends() -> None:
    task = pending_task("t1", ALICE)
    late = instance("i-0late", ALICE, zone=ZONE_A, launched_at=NOW - MAX_START_S - 1)
    first = run(snapshot(instances=[late], tasks=[task]))
    assert only(first, Launch).availability_zone == ZONE_B
    # Next cycle: the late instance is going, the launch in zone B was not made (say, no capacity there either).
    gone = instance("i-0late", ALICE, zone=ZONE_A, state="shutting-down", launched_at=NOW - MAX_START_S - 1)
    during = run(
        next_snapshot(
            first,
            now=NOW + 30,
            tasks=[task],
            instances=[gone],
        )
    )
    assert only(during, Launch).availability_zone == ZONE_B
    assert during.carried.unavailable_offerings == {("t3.medium", ZONE_A): NOW + BACKOFF_S}
    after = run(next_snapshot(during, now=NOW + BACKOFF_S, tasks=[task], instances=[]))
    assert only(after, Launch).availability_zone == ZONE_A
    assert after.carried.unavailable_offerings == {}


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


# -- the limits --------------------------------------------------------------------------------------------


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


def test_warm_machines_started_this_cycle_count_against_max_instances() -> None:
    """A started warm machine runs again like a launched one: with it, bob's work would pass max_instances."""
    warm = instance(
        "i-warm",
        ALICE_N1,
        state="stopped",
        tags={INSTANCE_WARM_TTL_TAG: "3600", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 1800)},
        volume_id="vol-1",
    )
    busy = instance("i-busy", BOB)
    world = snapshot(
        nodes=[node_of(warm, state="down", availability="drain"), node_of(busy)],
        instances=[warm, busy],
        tasks=[cached_task("t1", ALICE_N1), pending_task("t2", BOB_N1)],
    )

    result = run(world, make_policy(max_instances=2))

    assert [s.instance_id for s in actions_of(result, Start)] == ["i-warm"]
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t2").reason == "max_instances=2 reached (2 running or starting)"


# -- batches and the call budget ---------------------------------------------------------------------------


def seat_reason(owner: Owner, zone: str = ZONE_A) -> str:
    return f"1 pending task(s) of {owner} need 1 CPU, 1 GiB: t3.medium in {zone} is the cheapest fit ($0.0416/h)"


def test_a_class_of_500_is_a_few_calls_with_one_machine_per_student() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(500)]

    result = run(snapshot(tasks=tasks), CLASS_POLICY)

    calls = batches(result)
    seats = [launch for batch in calls for launch in batch.launches]
    assert Counter(seat.owner for seat in seats) == Counter(student(n) for n in range(500))
    assert len(calls) == 6  # 250 per zone, at most 100 machines a call: 3 calls in each of 2 zones
    assert max(batch.count for batch in calls) == 100
    assert {batch.availability_zone for batch in calls} == {ZONE_A, ZONE_B}
    assert len({batch.client_token for batch in calls}) == len(calls)


def test_the_call_budget_counts_calls_not_machines() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(300)]
    policy = make_policy(max_instances=1000, max_launches_per_cycle=1000, max_launch_calls_per_cycle=2)

    result = run(snapshot(tasks=tasks), policy)

    assert len(batches(result)) == 2
    assert sum(batch.count for batch in batches(result)) == 200  # 100 a call, one call in each zone
    over = [w for w in result.waiting if "max_launch_calls_per_cycle=2" in w.reason]
    assert len(over) == 100


def test_when_no_call_is_left_for_a_zone_its_students_take_seats_in_another_zones_batch() -> None:
    # 500 students over 3 zones need 6 calls spread evenly; with 5, the last zone's rest fill the others' batches.
    tasks = [pending_task(f"t{n}", student(n)) for n in range(500)]
    policy = make_policy(
        max_instances=1000,
        max_launches_per_cycle=1000,
        max_launch_calls_per_cycle=5,
        availability_zones=(ZONE_A, ZONE_B, "eu-west-1c"),
    )

    result = run(snapshot(tasks=tasks), policy)

    assert sorted(batch.count for batch in batches(result)) == [100] * 5
    assert not any("max_launch_calls_per_cycle" in w.reason for w in result.waiting)


def test_with_no_call_left_a_machine_takes_a_free_seat_in_another_zones_batch() -> None:
    """Bob's machine makes zone A the busier one, so the first seat opens zone B's batch with the only call; the
    next owner is sent to zone A, where no call is left, and takes a seat in zone B's batch instead."""
    bobs = instance("i-bob", BOB, state="pending", launched_at=NOW - 10)
    policy = make_policy(max_launch_calls_per_cycle=1)

    result = run(snapshot(tasks=[pending_task("t1", student(1)), pending_task("t2", student(2))], instances=[bobs]))
    calls_left_one = run(
        snapshot(tasks=[pending_task("t1", student(1)), pending_task("t2", student(2))], instances=[bobs]), policy
    )

    assert sorted(b.availability_zone for b in batches(result)) == [ZONE_A, ZONE_B]
    [batch] = batches(calls_left_one)
    assert (batch.availability_zone, batch.count) == (ZONE_B, 2)
    assert not any("max_launch_calls_per_cycle" in w.reason for w in calls_left_one.waiting)


def test_each_type_in_each_zone_is_a_call_of_its_own() -> None:
    small = pending_task("t-small", student(1))
    large = pending_task("t-large", student(2), cpus=1.0, memory_gib=6.0)  # an m5.large
    one_zone = make_policy(availability_zones=(ZONE_A,))

    both = run(snapshot(tasks=[small, large]), one_zone)
    one_call = run(
        snapshot(tasks=[small, large]), make_policy(availability_zones=(ZONE_A,), max_launch_calls_per_cycle=1)
    )

    assert sorted(b.instance_type for b in batches(both)) == ["m5.large", "t3.medium"]
    assert [b.instance_type for b in batches(one_call)] == ["m5.large"]
    assert waiting_for(one_call, "t-small").reason == "max_launch_calls_per_cycle=1 reached; launching in a later cycle"


def test_a_machine_carrying_a_volume_is_its_owners_own_launch_never_a_batchs() -> None:
    returning = cached_task("t1", student(1))
    own = volume("vol-1", student(1), zone=ZONE_B)

    result = run(snapshot(tasks=[returning], volumes=[own]), CLASS_POLICY)

    assert batches(result) == []
    [launch] = [a for a in result.actions if isinstance(a, Launch)]
    assert (launch.owner, launch.volume_id, launch.availability_zone) == (student(1), "vol-1", ZONE_B)


def test_a_machine_carrying_a_volume_is_a_call_of_its_own_even_beside_a_batch_of_its_type() -> None:
    """Only a batch's seats share a call: a launch with a volume is its own RunInstances, so with the one call
    taken by the batch it waits for the next cycle."""
    anonymous = pending_task("t-big", student(1), cpus=1.5)
    returning = cached_task("t-cache", student(2), cpus=1.0)
    small = pending_task("t-small", student(3), cpus=0.5)
    policy = make_policy(max_launch_calls_per_cycle=1)

    result = run(snapshot(tasks=[anonymous, returning, small], volumes=[volume("v-2", student(2))]), policy)

    [batch] = batches(result)
    assert [seat.owner for seat in batch.launches] == [student(1), student(3)]  # a seat needs no call
    assert [a for a in result.actions if isinstance(a, Launch)] == []
    assert waiting_for(result, "t-cache").reason == "max_launch_calls_per_cycle=1 reached; launching in a later cycle"


def test_a_batch_names_its_type_zone_and_at_most_three_owners_then_counts_the_rest() -> None:
    """The batch's reason is what ops read for a call of many machines: three seats spelled out, the rest counted."""
    one_zone = make_policy(availability_zones=(ZONE_A,), max_instances=100, max_launches_per_cycle=100)
    for count, rest in [(2, ""), (3, ""), (4, "; and 1 more owner(s)"), (6, "; and 3 more owner(s)")]:
        tasks = [pending_task(f"t{n}", student(n)) for n in range(count)]

        [batch] = batches(run(snapshot(tasks=tasks), one_zone))

        assert (batch.instance_type, batch.availability_zone, batch.count) == ("t3.medium", ZONE_A, count)
        assert all(seat.reason == seat_reason(seat.owner) for seat in batch.launches)
        named = "; ".join(seat_reason(seat.owner) for seat in batch.launches[:3])
        assert batch.reason == (
            f"{count} machine(s) in one call, each for one owner's pending work, bound when it joins: {named}{rest}"
        )


def test_a_batch_whose_machine_went_to_another_owner_is_followed_by_a_new_call_not_its_replay() -> None:
    """Found by the simulator: alice's batch machine was bound to bob (slots are anyone's until bound); replaying
    alice's token returned bob's machine and launched nothing, cycle after cycle, while alice waited."""
    alice, bob = student(1), student(2)
    waiting = pending_task("t-alice", alice)
    [first] = batches(run(snapshot(tasks=[waiting]), CLASS_POLICY))

    machine = instance("i-01", bob, state="running", tags={INSTANCE_BATCH_TAG: first.client_token}, zone=ZONE_A)
    bobs_node = node_of(machine, labelled=True, owner=bob)
    bobs_work = running_task("t-bob", bobs_node, bob)
    # carol's machine in the other zone keeps the zones even, so alice's seat is in the same zone as before.
    carols = instance("i-02", student(3), state="running", zone=ZONE_B)
    carols_node = node_of(carols, labelled=True, owner=student(3))
    carols_work = running_task("t-carol", carols_node, student(3))
    later = run(
        snapshot(
            tasks=[waiting, bobs_work, carols_work],
            instances=[machine, carols],
            nodes=[bobs_node, carols_node],
            now=NOW + 60,
        ),
        CLASS_POLICY,
    )

    [again] = batches(later)
    assert [seat.owner for seat in again.launches] == [alice]
    assert again.availability_zone == first.availability_zone
    assert again.client_token != first.client_token


# -- the warm tier a launch carries ------------------------------------------------------------------------


def test_launch_for_an_owner_with_a_warm_tier_carries_it_and_is_not_batched() -> None:
    warm = CachePolicy(warm_ttl_s=WARM_S)
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=warm.to_labels())]))
    assert only(result, Launch).warm_ttl_s == WARM_S
    assert actions_of(result, LaunchBatch) == []


def test_launch_with_the_cache_carries_the_warm_tier_of_the_same_policy() -> None:
    policy = replace(CACHE_ON, warm_ttl_s=WARM_S)
    owned = volume("vol-1", ALICE_N1, state="available")
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=policy)], volumes=[owned]))
    launch = only(result, Launch)
    assert (launch.volume_id, launch.warm_ttl_s) == ("vol-1", WARM_S)


# -- a cache owner without a volume: one is created, and the machine for it launched in the same plan -------


def test_cached_task_of_an_owner_without_a_volume_creates_one_and_launches_for_it_in_the_same_plan() -> None:
    cache = CachePolicy(enabled=True, ttl_s=7200, size_gib=50, volume_type="io1")
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=cache)]))
    create = only(result, CreateVolume)
    assert create.owner == ALICE_N1
    assert (create.size_gib, create.volume_type, create.ttl_s) == (50, "io1", 7200)
    assert create.availability_zone == ZONE_A
    assert create.client_token
    launch = only(result, Launch)
    assert (launch.owner, launch.availability_zone, launch.task_ids) == (ALICE_N1, ZONE_A, ("t1",))
    # No id yet: apply creates the volume first and launches with its id (that CreateVolume's token names it).
    assert (launch.volume_id, launch.volume_token) == (None, create.client_token)
    assert result.actions.index(create) < result.actions.index(launch)
    waiting = waiting_for(result, "t1")
    assert waiting.starting
    assert not waiting.unschedulable
    assert ZONE_A in waiting.reason


def test_a_new_volume_is_created_for_a_returning_owner_with_its_policys_size_type_and_ttl() -> None:
    policy = CachePolicy(enabled=True, ttl_s=900, size_gib=50, volume_type="io2")

    create = only(run(snapshot(tasks=[cached_task("t1", cache=policy)])), CreateVolume)

    assert (create.owner, create.availability_zone, create.size_gib, create.volume_type, create.ttl_s) == (
        ALICE_N1,
        ZONE_A,
        50,
        "io2",
        900,
    )
    assert create.reason == f"{ALICE_N1} needs a cache and has no volume: 50 GiB io2 in {ZONE_A}"


def test_volume_is_created_in_the_zone_of_the_cheapest_fitting_offering() -> None:
    snap = snapshot(tasks=[cached_task("t1", ALICE_N1)], unavailable={("t3.medium", ZONE_A): NOW + 300})
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_volume_is_created_in_the_zone_with_fewer_of_our_machines() -> None:
    others = [instance("i-01", BOB_N1, zone=ZONE_A)]
    snap = snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=others)
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_volume_is_created_where_the_task_fits_a_type() -> None:
    # Only the GPU type fits; it has no capacity in zone A.
    snap = snapshot(
        tasks=[cached_task("t1", ALICE_N1, cpus=2.0, gpus=1)], unavailable={("g4dn.xlarge", ZONE_A): NOW + 300}
    )
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_no_volume_is_created_when_no_offering_has_capacity() -> None:
    unavailable = {(t, z): NOW + 300 for t in INSTANCE_TYPES for z in (ZONE_A, ZONE_B)}
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], unavailable=unavailable))
    assert result.actions == ()
    assert "capacity" in waiting_for(result, "t1").reason


def test_no_volume_is_created_when_no_machine_may_be_launched() -> None:
    full = [instance(f"i-0{n}", BOB_N1) for n in range(2)]
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=full), make_policy(max_instances=2))
    assert actions_of(result, CreateVolume) == []
    assert "max_instances" in waiting_for(result, "t1").reason


def test_two_cached_tasks_of_one_owner_create_one_volume() -> None:
    tasks = [cached_task("t1", ALICE_N1), cached_task("t2", ALICE_N1)]
    result = run(snapshot(tasks=tasks))
    assert only(result, CreateVolume).owner == ALICE_N1
    # One machine carries the volume; the task it has no room for waits for room on it, not for a second volume.
    launched = only(result, Launch).task_ids
    (other,) = {"t1", "t2"} - set(launched)
    assert waiting_for(result, launched[0]).starting
    assert waiting_for(result, other).reason == (
        "its owner's cache volume goes with one machine, which is full; waiting for room on it"
    )


def test_cached_tasks_of_two_owners_create_one_volume_each() -> None:
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1), cached_task("t2", BOB_N1)]))
    assert sorted(str(c.owner) for c in actions_of(result, CreateVolume)) == [str(ALICE_N1), str(BOB_N1)]


def test_new_cache_volumes_spread_over_the_zones_and_count_as_calls() -> None:
    tasks = [cached_task(f"t{n}", student(n)) for n in range(8)]
    policy = make_policy(max_instances=1000, max_launches_per_cycle=1000, max_launch_calls_per_cycle=4)

    result = run(snapshot(tasks=tasks), policy)

    creates = actions_of(result, CreateVolume)
    assert len(creates) == 4
    assert Counter(c.availability_zone for c in creates) == {ZONE_A: 2, ZONE_B: 2}
    assert sum("max_launch_calls_per_cycle=4" in w.reason for w in result.waiting) == 4


def test_next_cycle_launches_in_the_zone_of_the_volume_being_created() -> None:
    task = cached_task("t1", ALICE_N1)
    first = run(snapshot(tasks=[task], unavailable={("t3.medium", ZONE_A): NOW + 300}))
    create = only(first, CreateVolume)
    creating = volume_from_create(create, VOL, state="creating", created_at=NOW + 1)
    second = run(next_snapshot(first, now=NOW + 30, tasks=[task], volumes=[creating]))
    launch = only(second, Launch)
    assert (launch.availability_zone, launch.volume_id) == (create.availability_zone, VOL)
    assert launch.availability_zone == ZONE_B
    assert actions_of(second, CreateVolume) == []


def test_larger_cache_off_task_of_a_cache_owner_does_not_take_their_work_to_a_machine_without_the_volume() -> None:
    # Largest first: the cache-off task opens the owner's machine, and the cached one joins it.
    tasks = [pending_task("t1", ALICE_N1, cpus=1.5), cached_task("t2", ALICE_N1, cpus=0.2)]
    result = run(snapshot(tasks=tasks, volumes=[volume(VOL, ALICE_N1, zone=ZONE_B)]))
    launch = only(result, Launch)
    assert launch.task_ids == ("t1", "t2")
    assert (launch.volume_id, launch.availability_zone) == (VOL, ZONE_B)


def test_larger_cache_off_task_of_a_cache_owner_without_a_volume_goes_with_the_new_volume() -> None:
    tasks = [pending_task("t1", ALICE_N1, cpus=1.5), cached_task("t2", ALICE_N1, cpus=0.2)]
    result = run(snapshot(tasks=tasks))
    create = only(result, CreateVolume)
    assert create.owner == ALICE_N1
    launch = only(result, Launch)
    assert (launch.task_ids, launch.volume_token) == (("t1", "t2"), create.client_token)
    assert waiting_for(result, "t2").starting


# -- why work waits instead of a launch --------------------------------------------------------------------


def test_each_reason_a_task_waits_instead_of_a_launch_is_said() -> None:
    """Each reason is shown to the user in the status and the CLI: it must say what holds the task back."""
    zone_c = "eu-west-1c"
    cases = [
        (
            "max_instances",
            snapshot(tasks=[pending_task("t", ALICE_N1)], instances=[instance("i-1", BOB), instance("i-2", BOB)]),
            make_policy(max_instances=2),
            "max_instances=2 reached (2 running or starting)",
            False,
        ),
        (
            "max_launches_per_cycle",
            snapshot(tasks=[pending_task("t0", BOB, cpus=1.5), pending_task("t", ALICE_N1)]),
            make_policy(max_launches_per_cycle=1),
            "max_launches_per_cycle=1 reached; launching in a later cycle",
            False,
        ),
        (
            "volume outside the allowed zones",
            snapshot(tasks=[cached_task("t")], volumes=[volume("v-c", zone=zone_c)]),
            make_policy(),
            f"its cache volume v-c is in {zone_c}, which is not in AUTOSCALING_AVAILABILITY_ZONES"
            f" ['{ZONE_A}', '{ZONE_B}']: add that zone (and its subnet) to launch there",
            False,
        ),
        (
            "no capacity in the volume's zone",
            snapshot(
                tasks=[cached_task("t", cpus=3.0)],
                volumes=[volume("v-a")],
                unavailable={("m5.xlarge", ZONE_A): NOW + 60, ("g4dn.xlarge", ZONE_A): NOW + 60},
            ),
            make_policy(capacity_backoff_s=90.5),
            f"no fitting instance type has capacity in {ZONE_A}, where the cache volume v-a of {ALICE_N1} is;"
            " waiting, and retrying each type after capacity_backoff_s=90.5",
            False,
        ),
        (
            "no capacity anywhere",
            snapshot(
                tasks=[pending_task("t", ALICE_N1, gpus=1)],
                unavailable={("g4dn.xlarge", ZONE_A): NOW + 60, ("g4dn.xlarge", ZONE_B): NOW + 60},
            ),
            make_policy(),
            "every instance type that fits is out of capacity in every allowed availability zone;"
            " retrying each after capacity_backoff_s=600",
            False,
        ),
        (
            "creating the owner's volume, and the machine for it in the same plan",
            snapshot(tasks=[cached_task("t")]),
            make_policy(),
            f"launching a t3.medium in {ZONE_A}, with a new 20 GiB cache volume created first in this cycle",
            True,
        ),
        (
            "a second task that does not fit the new volume's one machine",
            snapshot(tasks=[cached_task("t0", cpus=1.5), cached_task("t")]),
            make_policy(),
            "its owner's cache volume goes with one machine, which is full; waiting for room on it",
            False,
        ),
        (
            "the volume's one machine is full",
            snapshot(tasks=[cached_task("t0", cpus=1.5), cached_task("t", cpus=1.0)], volumes=[volume("v-a")]),
            make_policy(),
            "its owner's cache volume goes with one machine, which is full; waiting for room on it",
            False,
        ),
        (
            "the volume is busy elsewhere",
            snapshot(tasks=[cached_task("t")], volumes=[volume("v-a", state="modifying")]),
            make_policy(),
            f"cache volume v-a of {ALICE_N1} is modifying",
            False,
        ),
    ]
    later = pending_task("z", Owner(user_id="zed"), cpus=0.1, memory_gib=0.1)  # the smallest: planned last
    for name, snap, policy, reason, starting in cases:
        result = run(dataclasses.replace(snap, tasks=(*snap.tasks, later)), policy)
        waiting = waiting_for(result, "t")
        assert (waiting.reason, waiting.starting) == (reason, starting), name
        assert (waiting.task_id, waiting.service_name, waiting.owner) == ("t", "service-t", ALICE_N1), name
        # One task waiting is no reason to stop planning the others.
        assert waiting_for(result, "z").owner == Owner(user_id="zed"), name


# -- a returning owner's launch ----------------------------------------------------------------------------


LONGER = CachePolicy(enabled=True, ttl_s=7200, size_gib=20, volume_type="gp3")


def test_a_launch_with_the_volume_retags_its_ttl_from_the_owners_cache_policy_even_beside_cache_off_work() -> None:
    """The owner's current policy decides how long the volume is kept once they leave again; their cache-off
    task on the same machine (sorted first) has no say in it."""
    kept = volume("vol-a", ttl_s=3600)
    plain = pending_task("t-a", ALICE_N1, cpus=1.0)
    cached = cached_task("t-b", cache=LONGER, cpus=0.5)

    result = run(snapshot(tasks=[plain, cached], volumes=[kept]))

    launch = only(result, Launch)
    assert (launch.task_ids, launch.volume_id) == (("t-a", "t-b"), "vol-a")
    assert volume_tagging(result) == [
        SetVolumeTtl("vol-a", 7200, "the owner's cache policy now keeps it 7200 s after release")
    ]


def test_a_launch_with_the_volume_of_an_unchanged_policy_retags_nothing_but_its_release() -> None:
    released = volume("vol-a", ttl_s=3600, released_at=NOW - 60, expires_at=NOW + 3540)

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[released]))

    assert only(result, Launch).volume_id == "vol-a"
    assert volume_tagging(result) == [RenewVolume("vol-a", "its owner is back: vol-a no longer expires")]


def test_a_launch_whose_volume_goes_with_cache_off_work_alone_leaves_the_volumes_ttl_as_it_is() -> None:
    """The owner's cache-on task does not fit beside their larger cache-off one, so it waits for room on the one
    machine that carries their volume: that launch has no cache-on task, so no policy of theirs to write."""
    kept = volume("vol-a", ttl_s=3600)
    big = pending_task("t-a", ALICE_N1, cpus=3.5)
    cached = cached_task("t-b", cache=LONGER, cpus=1.0)

    result = run(snapshot(tasks=[big, cached], volumes=[kept]))

    launch = only(result, Launch)
    assert (launch.task_ids, launch.volume_id) == (("t-a",), "vol-a")
    assert waiting_for(result, "t-b").reason == (
        "its owner's cache volume goes with one machine, which is full; waiting for room on it"
    )
    assert actions_of(result, SetVolumeTtl) == []


# -- a volume that never appears (issue 19, behaviour 7) ---------------------------------------------------


def missing(*types: str, failed: int = 1, until: float) -> Repeated:
    """vol-1's device did not appear on `failed` machines in a row, of these types in zone A."""
    return Repeated(
        frozenset(f"i-0{n}" for n in range(failed)), frozenset((t, ZONE_A) for t in types), until - BACKOFF_S, until
    )


def test_no_machine_is_launched_with_a_volume_that_did_not_appear_until_its_back_off_ends_on_any_type() -> None:
    """The same volume would fail the same way on the next type too (issue 32): the wait names what happened and
    when it ends, and says so to the liveness check as a moment."""
    kept = volume("vol-1", ALICE_N1)
    task = cached_task("t1", ALICE_N1)
    backing_off = Carried(volume_backoffs={"vol-1": missing("t3.medium", failed=3, until=NOW + 300)})

    waited = run(snapshot(tasks=[task], volumes=[kept], carried=backing_off))

    assert actions_of(waited, Launch) == []
    assert waiting_for(waited, "t1").until == NOW + 300
    assert waiting_for(waited, "t1").reason == (
        "its cache volume vol-1 did not appear on the last 3 machine(s) launched with it (t3.medium in eu-west-1a;"
        " each boot waited for the device in vain): no machine is launched with it until"
        f" {format_timestamp(NOW + 300)}, on any type (the back-off doubles with each failure, from"
        " capacity_backoff_s, at most 16x)"
    )
    # Another owner's launch of the same offering is not held back.
    bobs = only(run(snapshot(tasks=[pending_task("t2", BOB)], carried=backing_off)), Launch)
    assert bobs.instance_type == "t3.medium"


def test_after_the_back_off_a_volume_that_did_not_appear_tries_another_type_then_the_cheapest_again() -> None:
    """A type whose devices the boot does not find fails every time: another fitting type first. Once every fitting
    type failed, the back-off is all that holds it: the cheapest is tried again."""
    kept = volume("vol-1", ALICE_N1)
    task = cached_task("t1", ALICE_N1)
    on_t3 = Carried(volume_backoffs={"vol-1": missing("t3.medium", until=NOW)})

    other = only(run(snapshot(tasks=[task], volumes=[kept], carried=on_t3)), Launch)
    assert (other.instance_type, other.volume_id) == ("m5.large", "vol-1")

    every = missing("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge", failed=4, until=NOW - 1)
    again = only(run(snapshot(tasks=[task], volumes=[kept], carried=Carried(volume_backoffs={"vol-1": every}))), Launch)
    assert (again.instance_type, again.volume_id) == ("t3.medium", "vol-1")
