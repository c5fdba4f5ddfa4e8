"""A class opening sessions at once: machines launched in batches, each bound to one owner when it joins."""

from __future__ import annotations

from collections import Counter

from warmswarm_autoscaling.actions import CreateVolume, LabelNode, Launch, LaunchBatch, TagInstance, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.lifecycle import TAGS_PER_CYCLE
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import INSTANCE_BATCH_TAG, Owner

from .factories import (
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    cached_task,
    instance,
    make_policy,
    next_snapshot,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
    volume,
    waiting_for,
)

CLASS_POLICY = make_policy(max_instances=1000, max_launches_per_cycle=1000, max_launch_calls_per_cycle=10)


def student(n: int) -> Owner:
    return Owner(user_id=f"s{n}", project_id="course", node_id=f"nb{n}")


def batches(result: Plan) -> list[LaunchBatch]:
    return actions_of(result, LaunchBatch)


def batch_machine(instance_id: str, *, state: str = "pending", launched_at: float = NOW, batch: str = "b1") -> Instance:
    return instance(
        instance_id, NOBODY, state=state, launched_at=launched_at, tags={INSTANCE_BATCH_TAG: batch}, zone=ZONE_A
    )


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


def test_a_batch_is_the_same_call_while_its_students_wait() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(20)]
    first = run(snapshot(tasks=tasks), CLASS_POLICY)
    again = run(snapshot(tasks=tasks, now=NOW + 5), CLASS_POLICY)

    assert [b.client_token for b in batches(first)] == [b.client_token for b in batches(again)]


def test_machines_on_their_way_cover_the_class_after_a_restart() -> None:
    """A new leader (nothing carried over) sees the batch's anonymous machines and launches nothing more."""
    tasks = [pending_task(f"t{n}", student(n)) for n in range(10)]
    booting = [batch_machine(f"i-{n:02d}") for n in range(10)]

    result = run(snapshot(tasks=tasks, instances=booting, now=NOW + 20), CLASS_POLICY)

    assert actions_of(result, Launch) == []
    assert all("waiting for instance" in waiting_for(result, f"t{n}").reason for n in range(10))


def test_each_machine_that_joins_is_labelled_for_one_student_and_no_two_share_one() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(4)]
    machines = [batch_machine(f"i-{n:02d}", state="running") for n in range(4)]
    joined = [node_of(m, labelled=False) for m in machines]

    result = run(snapshot(tasks=tasks, instances=machines, nodes=joined, now=NOW + 20), CLASS_POLICY)

    labels = actions_of(result, LabelNode)
    owners = [Owner.from_labels(label.labels) for label in labels]
    assert sorted(str(o) for o in owners) == sorted(str(student(n)) for n in range(4))
    assert all(label.activate for label in labels)
    assert actions_of(result, Launch) == []


def test_a_student_with_two_tasks_takes_one_machine_and_leaves_the_other_free() -> None:
    tasks = [pending_task("t-a", student(1), cpus=0.5), pending_task("t-b", student(1), cpus=0.5)]
    machines = [batch_machine(f"i-{n:02d}", state="running") for n in range(2)]
    joined = [node_of(m, labelled=False) for m in machines]

    result = run(snapshot(tasks=tasks, instances=machines, nodes=joined, now=NOW + 20), CLASS_POLICY)

    [label] = actions_of(result, LabelNode)
    assert Owner.from_labels(label.labels) == student(1)


def test_a_machine_nobody_needs_stays_unlabelled_and_goes_after_the_idle_grace() -> None:
    machine = batch_machine("i-01", state="running", launched_at=NOW - 1000)
    joined = node_of(machine, labelled=False)
    policy = make_policy(idle_grace_s=300.0)

    first = run(snapshot(instances=[machine], nodes=[joined], now=NOW), policy)
    later = run(next_snapshot(first, now=NOW + 301, instances=[machine], nodes=[joined]), policy)

    assert actions_of(first, LabelNode) == []
    assert actions_of(first, Terminate) == []
    [terminate] = actions_of(later, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "idle")


def test_unowned_work_never_takes_a_machine_launched_for_owners() -> None:
    machine = batch_machine("i-01", state="running")
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


def test_a_labelled_machine_of_a_batch_gets_its_owners_tags() -> None:
    machine = batch_machine("i-01", state="running")
    labelled = node_of(machine, labelled=True, owner=student(7))

    result = run(snapshot(instances=[machine], nodes=[labelled]), CLASS_POLICY)

    [tag] = actions_of(result, TagInstance)
    assert (tag.instance_id, Owner.from_labels(tag.tags)) == ("i-01", student(7))


def test_a_machine_carrying_a_volume_is_its_owners_own_launch_never_a_batchs() -> None:
    returning = cached_task("t1", student(1))
    own = volume("vol-1", student(1), zone=ZONE_B)

    result = run(snapshot(tasks=[returning], volumes=[own]), CLASS_POLICY)

    assert batches(result) == []
    [launch] = [a for a in result.actions if isinstance(a, Launch)]
    assert (launch.owner, launch.volume_id, launch.availability_zone) == (student(1), "vol-1", ZONE_B)


def test_new_cache_volumes_spread_over_the_zones_and_count_as_calls() -> None:
    tasks = [cached_task(f"t{n}", student(n)) for n in range(8)]
    policy = make_policy(max_instances=1000, max_launches_per_cycle=1000, max_launch_calls_per_cycle=4)

    result = run(snapshot(tasks=tasks), policy)

    creates = actions_of(result, CreateVolume)
    assert len(creates) == 4
    assert Counter(c.availability_zone for c in creates) == {ZONE_A: 2, ZONE_B: 2}
    assert sum("max_launch_calls_per_cycle=4" in w.reason for w in result.waiting) == 4


def test_owner_tags_go_on_a_few_machines_a_cycle_not_on_the_whole_class_at_once() -> None:
    machines = [batch_machine(f"i-{n:02d}", state="running") for n in range(12)]
    nodes = [node_of(m, labelled=True, owner=student(n)) for n, m in enumerate(machines)]

    result = run(snapshot(instances=machines, nodes=nodes), CLASS_POLICY)

    assert len(actions_of(result, TagInstance)) == TAGS_PER_CYCLE


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
