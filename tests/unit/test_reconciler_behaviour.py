"""The reconcile loop over time, with its sleeps recorded rather than slept (loop_sleeps.py): a cycle that crashes
is backed off and the loop carries on; the loop sleeps until the plan's next deadline, soon while something it did
is in motion, and until the resync otherwise; an event cuts a sleep short."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from warmswarm_autoscaling.ports import SwarmError
from warmswarm_autoscaling.reconciler import Alarm, LoopTiming
from warmswarm_autoscaling.snapshot import Node

from .factories import ALICE, BOB, NOW, instance, make_policy, node_of, pending_task
from .fakes import Clock, FakeEc2, FakeSwarm, autoscaler
from .loop_sleeps import run_loop
from .metrics_scrape import parse

TIMING = LoopTiming(resync_interval_s=3600.0, busy_resync_interval_s=3.0, debounce_s=0.0, failure_backoff_s=7.0)


class CrashingSwarm(FakeSwarm):
    """Its first `crashes` node listings raise what no adapter should (a bug, not a PortError)."""

    def __init__(self, crashes: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.crashes = crashes
        self.listed = 0

    async def list_nodes(self) -> list[Node]:
        self.listed += 1
        if self.listed <= self.crashes:
            raise RuntimeError("a bug in a cycle")
        return await super().list_nodes()


class UnreachableSwarm(FakeSwarm):
    async def list_nodes(self) -> list[Node]:
        raise SwarmError("the manager does not answer")


def cycles(scaler_metrics: bytes, outcome: str) -> float:
    return parse(scaler_metrics.decode()).value("warmswarm_cycles_total", outcome=outcome)


async def test_a_crashed_cycle_is_backed_off_and_the_loop_carries_on(caplog: pytest.LogCaptureFixture) -> None:
    swarm = CrashingSwarm(crashes=2)
    scaler = autoscaler(swarm, FakeEc2(), timing=TIMING)

    with caplog.at_level(logging.ERROR, logger="warmswarm_autoscaling.reconciler"):
        delays = await run_loop(scaler, sleeps=3)

    # Two crashes, each followed by the backoff; then a good cycle and the sleep until the resync.
    assert delays == [7.0, 7.0, 3600.0]
    assert swarm.listed == 3
    assert scaler.last.report is not None
    assert scaler.last.report.ok
    exposition = scaler.metrics.exposition()
    assert cycles(exposition, "error") == 2
    assert cycles(exposition, "ok") == 1
    crashed = [r for r in caplog.records if "cycle crashed" in r.getMessage()]
    assert len(crashed) == 2
    assert all(r.exc_info is not None for r in crashed)


async def test_a_failed_observation_is_backed_off_too() -> None:
    scaler = autoscaler(UnreachableSwarm(), FakeEc2(), timing=TIMING)

    delays = await run_loop(scaler, sleeps=2)

    assert delays == [7.0, 7.0]
    assert scaler.last.report is not None
    assert not scaler.last.report.ok
    assert scaler.last.report.error is not None
    assert "the manager does not answer" in scaler.last.report.error


async def test_the_loop_sleeps_until_the_plans_deadline() -> None:
    # An idle node: nothing to do for its grace (300 s), then a drain; the loop wakes just after the grace ends.
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    scaler = autoscaler(FakeSwarm(nodes=[node_of(idle)]), FakeEc2(instances=[idle]), timing=TIMING)

    delays = await run_loop(scaler, sleeps=1)

    assert scaler.last.plan is not None
    assert scaler.last.plan.deadline == NOW + 300.0
    assert delays == [pytest.approx(300.05)]


async def test_a_resync_sooner_than_the_deadline_wins() -> None:
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    timing = LoopTiming(resync_interval_s=30.0, busy_resync_interval_s=3.0, debounce_s=0.0)
    scaler = autoscaler(FakeSwarm(nodes=[node_of(idle)]), FakeEc2(instances=[idle]), timing=timing)

    assert await run_loop(scaler, sleeps=1) == [30.0]


async def test_a_deadline_already_due_is_not_a_busy_spin() -> None:
    # The grace is over at once: the drain is applied, and the loop looks again soon, not at a deadline in the past.
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    swarm = FakeSwarm(nodes=[node_of(idle)])
    scaler = autoscaler(swarm, FakeEc2(instances=[idle]), policy=make_policy(idle_grace_s=0.0), timing=TIMING)

    delays = await run_loop(scaler, sleeps=1)

    assert [u[2] for u in swarm.updates] == ["drain"]
    assert delays == [3.0]
    assert all(d >= 0.05 for d in delays)


async def test_while_its_actions_are_in_motion_the_loop_looks_again_soon() -> None:
    ec2 = FakeEc2()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), ec2, timing=TIMING)

    delays = await run_loop(scaler, sleeps=1)

    assert len(ec2.launched) == 1
    assert delays == [3.0]


async def test_with_nothing_to_do_the_loop_sleeps_until_the_resync() -> None:
    swarm = FakeSwarm()
    scaler = autoscaler(swarm, FakeEc2(), timing=TIMING)

    delays = await run_loop(scaler, sleeps=2)

    assert delays == [3600.0, 3600.0]
    assert swarm.node_reads == 2  # one cycle before each sleep


async def test_a_wake_is_debounced_then_cycles() -> None:
    swarm = FakeSwarm()
    timing = LoopTiming(resync_interval_s=3600.0, debounce_s=0.0)
    scaler = autoscaler(swarm, FakeEc2(), timing=timing)

    delays = await run_loop(scaler, sleeps=2, rung=(1,))

    assert delays == [3600.0, 3600.0]
    assert swarm.node_reads == 2


async def test_each_term_forgets_the_last_terms_clocks() -> None:
    # A node seen idle in an earlier term is idle from this term's first look: what happened between the terms
    # (another replica led) is not known.
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    clock = Clock()
    scaler = autoscaler(FakeSwarm(nodes=[node_of(idle)]), FakeEc2(instances=[idle]), clock=clock, timing=TIMING)
    await scaler.cycle()
    assert scaler.last.plan is not None
    assert scaler.last.plan.carried.idle_since == {"node-i-idle": NOW}
    clock.now = NOW + 100.0

    delays = await run_loop(scaler, sleeps=1)

    assert scaler.last.plan.carried.idle_since == {"node-i-idle": NOW + 100.0}
    assert delays == [pytest.approx(300.05)]  # the full grace again, from this term's first look


# -- the alarm itself ---------------------------------------------------------------------------------------


async def test_the_alarm_ends_a_sleep_when_it_rings() -> None:
    alarm, stop = Alarm(), asyncio.Event()
    sleeping = asyncio.create_task(alarm.sleep(3600.0, stop))
    await asyncio.sleep(0)

    alarm.ring()

    async with asyncio.timeout(10):
        assert await sleeping is True


async def test_the_alarm_says_no_when_the_delay_passes_or_the_loop_stops() -> None:
    alarm, stop = Alarm(), asyncio.Event()
    assert await alarm.sleep(0.0, stop) is False

    sleeping = asyncio.create_task(alarm.sleep(3600.0, stop))
    await asyncio.sleep(0)
    stop.set()
    alarm.ring()
    async with asyncio.timeout(10):
        assert await sleeping is False


async def test_a_ring_before_the_sleep_does_not_end_it() -> None:
    alarm, stop = Alarm(), asyncio.Event()
    alarm.ring()

    assert await alarm.sleep(0.0, stop) is False


async def test_the_alarm_rings_at_each_swarm_event_until_stopped() -> None:
    alarm, stop = Alarm(), asyncio.Event()
    seen: list[str] = []

    async def events() -> object:
        for kind in ("node", "service"):
            seen.append(kind)
            yield kind
        stop.set()
        seen.append("after stop")
        yield "node"
        seen.append("never")  # the alarm stops reading once stopped

    sleeping = asyncio.create_task(alarm.sleep(3600.0, stop))
    async with asyncio.timeout(10):
        await alarm.follow(events(), stop)  # type: ignore[arg-type]
        assert await sleeping is False  # stopped: a ring then does not count as a wake

    assert seen == ["node", "service", "after stop"]


async def test_the_status_view_tells_the_last_cycle_and_counts_idle_time_to_the_moment_it_is_asked_at() -> None:
    machine = instance("i-idle", ALICE, launched_at=NOW - 3600)
    scaler = autoscaler(FakeSwarm(nodes=[node_of(machine)]), FakeEc2(instances=[machine]))

    report = await scaler.cycle()
    answer = scaler.status(NOW + 30.0)

    assert answer.last_cycle == report
    assert [(node.node_id, node.idle_s) for node in answer.nodes] == [("node-i-idle", 30.0)]
    assert (answer.cluster, answer.leader, answer.dry_run) == ("test", True, False)


async def test_the_first_cycle_alone_runs_inside_the_first_cycle_scope() -> None:
    """main.py pauses the cycle collector through it while the first cycle reads the whole cluster."""
    events: list[str] = []
    inside = False

    class Listing(FakeSwarm):
        async def list_nodes(self) -> list[Node]:
            events.append("read inside" if inside else "read outside")
            return await super().list_nodes()

    @contextmanager
    def scope() -> Iterator[None]:
        nonlocal inside
        events.append("entered")
        inside = True
        try:
            yield
        finally:
            inside = False
            events.append("left")

    scaler = autoscaler(Listing(), FakeEc2(), first_cycle_scope=scope)
    for _ in range(3):
        assert (await scaler.cycle()).ok

    assert events == ["entered", "read inside", "left", "read outside", "read outside"]


async def test_a_first_cycle_that_fails_still_leaves_its_scope() -> None:
    entered_and_left = []

    @contextmanager
    def scope() -> Iterator[None]:
        entered_and_left.append("entered")
        try:
            yield
        finally:
            entered_and_left.append("left")

    scaler = autoscaler(UnreachableSwarm(), FakeEc2(), first_cycle_scope=scope)
    assert not (await scaler.cycle()).ok
    assert not (await scaler.cycle()).ok
    assert entered_and_left == ["entered", "left"]
