"""What plan() answers (plan/result.py): two plans that decide the same are equal, whatever they read of the
snapshot; and a real plan's readings say what is in motion and when to look again."""

from __future__ import annotations

from dataclasses import replace

from warmswarm_autoscaling.actions import Launch
from warmswarm_autoscaling.plan import Plan, Waiting
from warmswarm_autoscaling.plan.grow import GROW_COOLDOWN_S
from warmswarm_models import VOLUME_GROWN_AT_TAG, format_timestamp

from .factories import ALICE_N1, GRACE_S, NOW, actions_of, cached_task, instance, node_of, run, snapshot, volume


def test_plans_that_decide_the_same_are_equal_whatever_they_read() -> None:
    decided = run(snapshot(tasks=[cached_task("t1")]))

    read_otherwise = replace(decided, in_flight=("i-somewhere",), busy=not decided.busy, deadline=NOW + 1)

    assert read_otherwise == decided


def test_plans_that_decide_otherwise_differ() -> None:
    decided = run(snapshot(tasks=[cached_task("t1")]))
    told_otherwise = Waiting("t1", "service-t1", ALICE_N1, "another reason")

    assert replace(decided, actions=()) != decided
    assert replace(decided, waiting=(told_otherwise,)) != decided
    assert replace(decided, notices=("something for ops",)) != decided


def test_a_plan_with_work_waiting_is_busy_and_an_idle_node_sets_the_next_deadline() -> None:
    waiting = run(snapshot(tasks=[cached_task("t1")]))
    machine = instance("i-01", ALICE_N1)
    idle = run(snapshot(nodes=[node_of(machine)], instances=[machine], idle_since={"node-i-01": NOW - 10}))

    assert isinstance(waiting, Plan)
    assert actions_of(waiting, Launch)
    assert waiting.busy
    assert [w.task_id for w in waiting.waiting] == ["t1"]
    # Its idle grace ends at a moment no event announces: the plan says when to look again.
    assert idle.deadline == NOW - 10 + GRACE_S


def test_a_volume_grown_within_aws_six_hours_sets_the_deadline_at_their_end() -> None:
    # AWS refuses a second growth within six hours: when they end, the plan may grow it again, a decision by time
    # alone that must be a deadline (a cycle that finds the same world takes the last plan until then).
    grown_at = NOW - 3600.0
    grown = volume("vol-grown", state="in-use", tags={VOLUME_GROWN_AT_TAG: format_timestamp(grown_at)})

    decided = run(snapshot(volumes=[grown]))

    assert decided.deadline == grown_at + GROW_COOLDOWN_S
