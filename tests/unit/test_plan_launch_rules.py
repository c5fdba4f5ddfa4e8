"""New machines (plan/launch.py) through plan(): batch calls and their reasons, the call budget, and why work waits."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import CreateVolume, Launch, LaunchBatch, Start
from warmswarm_autoscaling.plan import Plan
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, Owner, format_timestamp

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    BOB_N1,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    cached_task,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    volume,
    waiting_for,
)


def student(n: int) -> Owner:
    return Owner(user_id=f"s{n}", project_id="course", node_id=f"nb{n}")


def batches(result: Plan) -> list[LaunchBatch]:
    return [a for a in result.actions if isinstance(a, LaunchBatch)]


def seat_reason(owner: Owner, zone: str = ZONE_A) -> str:
    return f"1 pending task(s) of {owner} need 1 CPU, 1 GiB: t3.medium in {zone} is the cheapest fit ($0.0416/h)"


# -- a batch and what it says ------------------------------------------------------------------------------


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


def test_the_tasks_a_launch_serves_wait_naming_their_service_and_the_machine() -> None:
    result = run(
        snapshot(tasks=[pending_task("t1", ALICE), cached_task("t2", BOB_N1)], volumes=[volume("v-b", BOB_N1)])
    )

    first, second = waiting_for(result, "t1"), waiting_for(result, "t2")
    assert (first.service_name, first.owner, first.starting) == ("service-t1", ALICE, True)
    assert first.reason == f"launching a t3.medium in {ZONE_B}"  # zone A has bob's machine with his volume
    assert (second.service_name, second.owner, second.starting) == ("service-t2", BOB_N1, True)
    assert second.reason == f"launching a t3.medium in {ZONE_A}, with cache volume v-b"


def test_a_launch_token_is_the_decision_of_one_owner_for_one_task() -> None:
    """The token names the owner as well as the task: the same task id pending for another owner is another
    decision, and a retry must never hand one owner's machine to another."""
    for_alice = only(run(snapshot(tasks=[pending_task("t1", ALICE)])), Launch)
    for_bob = only(run(snapshot(tasks=[pending_task("t1", BOB)])), Launch)

    assert for_alice.client_token != for_bob.client_token


# -- the call budget (max_launch_calls_per_cycle) ----------------------------------------------------------


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


# -- why work waits instead of launching -------------------------------------------------------------------


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
            "creating the owner's volume",
            snapshot(tasks=[cached_task("t")]),
            make_policy(),
            f"creating its cache volume in {ZONE_A}",
            True,
        ),
        (
            "a second task while the volume is created",
            snapshot(tasks=[cached_task("t0", cpus=1.5), cached_task("t")]),
            make_policy(),
            f"creating its cache volume in {ZONE_A}",
            True,
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


# -- where machines go, and how many ----------------------------------------------------------------------


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
