"""The lease's guards, on the fake clock of fakes.py: a term that will not end when cancelled keeps a new term
from starting; a graceful stop renews while the loop finishes and cancels it after the grace; the flag is read from
the clock; the timing and the margin are checked; a store call that does not answer is abandoned in time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import pytest
from warmswarm_autoscaling.lease import Lease, checked_margin, replica_id, within
from warmswarm_autoscaling.ports import LockError

from .fakes import KEY, RENEW_S, TTL_S, FakeClock, FakeLock, FakeTerm, finish, lease_on
from .fakes import STOP_GRACE_S as GRACE_S


class Stubborn:
    """A term that swallows its first cancellation and runs on until the test lets it end (a bug in a loop)."""

    def __init__(self) -> None:
        self.started = 0
        self.running = 0
        self.release = asyncio.Event()

    async def __call__(self, stop: asyncio.Event) -> None:
        self.started += 1
        self.running += 1
        try:
            try:
                await stop.wait()
            except asyncio.CancelledError:
                await self.release.wait()  # cancelled, and carries on regardless
        finally:
            self.running -= 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lock(clock: FakeClock) -> FakeLock:
    return FakeLock(clock)


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[None]]]:
    started: list[asyncio.Task[None]] = []
    yield started
    await finish(*started)


async def test_no_new_term_starts_while_the_old_one_still_runs(
    clock: FakeClock, lock: FakeLock, tasks: list[asyncio.Task[None]], caplog: pytest.LogCaptureFixture
) -> None:
    term = Stubborn()
    lease = lease_on(lock, clock)
    tasks.append(asyncio.create_task(lease.run(asyncio.Event(), term)))
    await clock.advance(0)
    assert lease.is_leader

    with caplog.at_level(logging.ERROR, logger="warmswarm_autoscaling.lease"):
        lock.entries.clear()  # the lock is lost: the next renewal is refused and the term is cancelled
        await clock.advance(RENEW_S + GRACE_S + 0.01)

    assert not lease.is_leader
    assert term.running == 1, "the term swallowed its cancellation"
    assert any("did not end within 2 s of its cancellation" in r.getMessage() for r in caplog.records)
    # The lock is free all this while, and this replica does not take it: two of its terms would run at once.
    calls_before = len(lock.calls)
    await clock.advance(5 * RENEW_S)
    assert term.started == 1
    assert not lease.is_leader
    assert lock.calls[calls_before:] == []

    term.release.set()  # the old term ends at last: the replica contends again and starts a new one
    await clock.advance(RENEW_S)
    assert term.started == 2
    assert lease.is_leader


async def test_a_term_that_ends_when_cancelled_does_not_hold_up_the_next(
    clock: FakeClock, lock: FakeLock, tasks: list[asyncio.Task[None]]
) -> None:
    term = FakeTerm()
    lease = lease_on(lock, clock)
    tasks.append(asyncio.create_task(lease.run(asyncio.Event(), term)))
    await clock.advance(0)

    lock.entries.clear()
    await clock.advance(RENEW_S)
    assert term.cancelled == 1
    await clock.advance(RENEW_S)

    assert term.started == 2
    assert lease.is_leader


async def test_a_graceful_stop_renews_while_the_loop_finishes_and_cancels_it_after_the_grace(
    clock: FakeClock, lock: FakeLock
) -> None:
    term = FakeTerm(busy=True)  # its cycle never ends
    flags: list[bool] = []
    lease = lease_on(lock, clock, flags)
    stop = asyncio.Event()
    running = asyncio.create_task(lease.run(stop, term))
    await clock.advance(0)
    renewals_before = lock.calls.count(("renew", "a"))

    stop.set()
    await clock.advance(GRACE_S - 0.1)
    assert not running.done()
    assert lease.is_leader, "renewed meanwhile"
    assert lock.calls.count(("renew", "a")) > renewals_before
    assert term.cancelled == 0

    await clock.advance(0.2)
    async with asyncio.timeout(5):
        await running
    assert term.cancelled == 1
    assert KEY not in lock.entries
    assert flags == [True, False]


async def test_the_leader_flag_is_read_from_the_clock(clock: FakeClock, lock: FakeLock) -> None:
    lease = lease_on(lock, clock)
    term = FakeTerm()
    running = asyncio.create_task(lease.run(asyncio.Event(), term))
    await clock.advance(0)
    assert lease.is_leader
    assert lease.leader_seen == "a"

    # Nothing runs while the event loop is stalled: the flag turns by the clock alone at the deadline.
    clock.now_s += TTL_S - lease.safety_margin_s - 0.001
    assert lease.is_leader
    clock.now_s += 0.001
    assert not lease.is_leader
    await finish(running)


async def test_a_follower_names_the_leader_and_the_store_health(clock: FakeClock, lock: FakeLock) -> None:
    leader, follower = lease_on(lock, clock, name="a"), lease_on(lock, clock, name="b")
    assert not follower.healthy  # never answered yet
    tasks = [asyncio.create_task(leader.run(asyncio.Event(), FakeTerm()))]
    await clock.advance(0)
    tasks.append(asyncio.create_task(follower.run(asyncio.Event(), FakeTerm())))
    await clock.advance(0)

    assert follower.leader_seen == "a"
    assert follower.healthy
    lock.cut_off.add("b")
    await clock.advance(TTL_S + RENEW_S)
    assert not follower.healthy, "no answer for a whole ttl"
    assert follower.leader_seen == "a"  # the last seen, for the logs
    await finish(*tasks)


async def test_a_broken_leadership_callback_does_not_break_the_election(clock: FakeClock, lock: FakeLock) -> None:
    def broken(_leader: bool) -> None:
        raise RuntimeError("a status setter's bug")

    lease = lease_on(lock, clock)
    lease.on_change = broken
    term = FakeTerm()
    running = asyncio.create_task(lease.run(asyncio.Event(), term))
    await clock.advance(0)

    assert lease.is_leader
    assert term.started == 1
    await finish(running)


def test_the_margin_is_a_fifth_of_the_ttl_unless_given_and_must_leave_room_for_a_renewal() -> None:
    assert checked_margin(10.0, 3.0, None) == pytest.approx(2.0)
    assert checked_margin(10.0, 3.0, 0.0) == 0.0
    assert checked_margin(10.0, 3.0, 6.9) == 6.9
    for margin_s in (7.0, -0.1, 10.0):
        with pytest.raises(ValueError, match=r"the safety margin \(.*\) must leave room for a renewal within the ttl"):
            checked_margin(10.0, 3.0, margin_s)


def test_the_timing_is_checked_with_the_figures_named() -> None:
    with pytest.raises(ValueError, match=r"the lock ttl \(0 s\) and renew interval \(1 s\) must be positive"):
        checked_margin(0.0, 1.0, None)
    with pytest.raises(
        ValueError,
        match=r"^the renew interval \(1 s\) must be below a third of the lock ttl \(3 s\),"
        r" so one failed renewal does not cost the leadership$",
    ):
        checked_margin(3.0, 1.0, None)
    assert checked_margin(3.0, 0.99, None) == pytest.approx(0.6)


def test_a_lease_refuses_bad_timing_at_once(clock: FakeClock, lock: FakeLock) -> None:
    with pytest.raises(ValueError, match="renew interval"):
        Lease(lock, key=KEY, replica="a", ttl_s=3.0, renew_interval_s=1.0, clock=clock, sleep=clock.sleep)


def test_replica_ids_are_unique_per_process_start() -> None:
    first, second = replica_id(), replica_id()
    assert first != second
    host, pid, token = first.split(":")
    assert host
    assert pid.isdigit()
    assert len(token) == 8


async def test_a_store_call_that_does_not_answer_is_abandoned_at_its_timeout(clock: FakeClock) -> None:
    never: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    call = asyncio.create_task(within(clock.sleep, never, 1.5, "lock renew for k"))
    await clock.advance(1.49)
    assert not call.done()

    await clock.advance(0.02)

    with pytest.raises(LockError, match=r"^lock renew for k: no answer within 1.50 s$"):
        await call
    assert never.cancelled()


async def test_a_store_call_that_answers_in_time_gives_its_answer(clock: FakeClock) -> None:
    async def answer() -> bool:
        await clock.sleep(0.5)
        return True

    call = asyncio.create_task(within(clock.sleep, answer(), 1.0, "lock acquire for k"))
    await clock.advance(0.5)

    assert await call is True
