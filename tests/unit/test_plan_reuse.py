"""A cycle that finds the same world takes the last plan again, until the plan's deadline, a change, or its age says
plan afresh (plan_reuse.py); a reused plan decides what planning would have decided."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.plan_reuse import MAX_REUSE_S, Planned, reusable
from warmswarm_autoscaling.reconciler import Reconciler

from .factories import ALICE, BOB, NOW, instance, make_policy, node_of, pending_task, snapshot
from .fakes import Clock, FakeEc2, FakeSwarm, autoscaler


def idle_fleet(clock: Clock) -> tuple[Reconciler, FakeSwarm]:
    """One idle machine of Alice's: nothing to do until its idle grace (300 s) ends, then a drain."""
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    swarm = FakeSwarm(nodes=[node_of(idle)])
    return autoscaler(swarm, FakeEc2(instances=[idle]), clock=clock), swarm


async def test_the_same_world_again_reuses_the_plan_once_the_carried_clocks_settle() -> None:
    clock = Clock()
    scaler, _swarm = idle_fleet(clock)

    await scaler.cycle()  # plans, and starts the node's idle clock (carried)
    clock.now += 10
    await scaler.cycle()  # the carried clock is new input: planned again
    assert scaler.plans_reused == 0
    clock.now += 10
    await scaler.cycle()
    clock.now += 10
    await scaler.cycle()

    assert scaler.plans_reused == 2
    assert scaler.last.plan is not None
    assert scaler.last.plan.actions == ()
    assert scaler.last.plan.deadline == NOW + 300.0


async def test_a_changed_world_is_planned_afresh() -> None:
    clock = Clock()
    scaler, swarm = idle_fleet(clock)
    for _ in range(3):
        await scaler.cycle()
    reused = scaler.plans_reused
    assert reused == 1

    swarm.tasks.append(pending_task("t1", BOB))
    await scaler.cycle()

    assert scaler.plans_reused == reused
    assert scaler.last.plan is not None
    assert scaler.last.plan.actions  # Bob's task gets a machine


async def test_the_plans_deadline_ends_the_reuse_and_its_decision_is_taken() -> None:
    clock = Clock()
    scaler, swarm = idle_fleet(clock)
    for _ in range(3):
        await scaler.cycle()
    assert scaler.plans_reused == 1

    clock.now = NOW + 300.0  # the idle grace ends: a decision by time alone
    await scaler.cycle()

    assert scaler.plans_reused == 1
    assert [update[2] for update in swarm.updates] == ["drain"]


async def test_a_plan_is_never_reused_longer_than_the_backstop() -> None:
    clock = Clock()
    scaler = autoscaler(FakeSwarm(), FakeEc2(), clock=clock)
    await scaler.cycle()
    clock.now += 1
    await scaler.cycle()
    assert scaler.plans_reused == 1

    clock.now = NOW + MAX_REUSE_S
    await scaler.cycle()

    assert scaler.plans_reused == 1  # planned afresh: the last plan was made MAX_REUSE_S ago


async def test_a_new_term_plans_afresh() -> None:
    clock = Clock()
    scaler = autoscaler(FakeSwarm(), FakeEc2(), clock=clock)
    await scaler.cycle()
    scaler.begin_term()
    clock.now += 1
    await scaler.cycle()

    assert scaler.plans_reused == 0


def test_a_plan_with_actions_or_in_motion_is_never_reused() -> None:
    policy = make_policy()
    waiting = snapshot(tasks=[pending_task("t1", BOB)])
    decided = plan(waiting, policy)
    assert decided.actions

    assert reusable(Planned(waiting, decided, NOW), dataclasses.replace(waiting, now=NOW + 1)) is None
    quiet = dataclasses.replace(decided, actions=(), busy=True)
    assert reusable(Planned(waiting, quiet, NOW), dataclasses.replace(waiting, now=NOW + 1)) is None
    settled = dataclasses.replace(decided, actions=(), busy=False, deadline=None)
    assert reusable(Planned(waiting, settled, NOW), dataclasses.replace(waiting, now=NOW + 1)) is settled


def test_a_clock_that_moved_against_aws_is_planned_afresh() -> None:
    policy = make_policy()
    world = dataclasses.replace(snapshot(), aws_now=NOW)
    decided = plan(world, policy)
    last = Planned(world, decided, NOW)

    assert reusable(last, dataclasses.replace(world, now=NOW + 5, aws_now=NOW + 5.5)) is decided
    assert reusable(last, dataclasses.replace(world, now=NOW + 5, aws_now=NOW + 30)) is None
