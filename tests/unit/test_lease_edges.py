"""The lease at its exact edges, on the fake clock of fakes.py: deadlines, the graceful stop, what it logs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator

import pytest
from warmswarm_autoscaling.lease import Lease
from warmswarm_autoscaling.ports import LockError

from .fakes import KEY, RENEW_S, TTL_S, FakeClock, FakeLock, FakeTerm, finish, lease_on
from .fakes import STOP_GRACE_S as GRACE_S

LOGGER = "warmswarm_autoscaling.lease"
# Instants chosen to be exact in binary floating point, so "exactly at" means exactly.
STOP_AFTER_S = 0.125


class StallingLock(FakeLock):
    """A FakeLock whose next renewal stalls the process until `stall_to` and then fails (a paused VM, a GC pause)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.fake_clock = clock
        self.stall_to: float | None = None

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        if self.stall_to is None:
            return await super().renew(key, owner, ttl_ms)
        self.calls.append(("renew", owner))
        self.fake_clock.now_s, self.stall_to = self.stall_to, None
        raise LockError("fake lock store: the answer came after a stall")


class LateAcquireLock(FakeLock):
    """A FakeLock whose first acquire is answered only at `answer_at` (a stalled process), yet taken."""

    def __init__(self, clock: FakeClock, answer_at: float) -> None:
        super().__init__(clock)
        self.fake_clock = clock
        self.answer_at: float | None = answer_at

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        got = await super().acquire(key, owner, ttl_ms)
        if self.answer_at is not None:  # late once, then prompt
            self.fake_clock.now_s, self.answer_at = self.answer_at, None
        return got


class HangingRelease(FakeLock):
    """A FakeLock that answers everything but a release."""

    async def release(self, key: str, owner: str) -> bool:
        self.calls.append(("release", owner))
        await asyncio.get_running_loop().create_future()
        return False


class RecordingTtl(FakeLock):
    """A FakeLock that keeps the ttl (ms) of every acquire."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.ttls_ms: list[int] = []

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        self.ttls_ms.append(ttl_ms)
        return await super().acquire(key, owner, ttl_ms)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lock(clock: FakeClock) -> FakeLock:
    return FakeLock(clock)


@pytest.fixture
def told(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        yield caplog


@pytest.fixture
async def tasks() -> AsyncIterator[list[asyncio.Task[None]]]:
    started: list[asyncio.Task[None]] = []
    yield started
    await finish(*started)


def stepped_down(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if "is no longer the leader" in r.getMessage()]


async def test_an_acquire_answered_exactly_at_its_deadline_is_not_acted_on(clock: FakeClock) -> None:
    """At the deadline the lock may already be someone else's: no term may start on an answer that late."""
    sent_s = clock()
    probe = lease_on(FakeLock(clock), clock)
    late = LateAcquireLock(clock, answer_at=sent_s + TTL_S - probe.safety_margin_s)
    lease = lease_on(late, clock)
    term = FakeTerm()
    running = asyncio.create_task(lease.run(asyncio.Event(), term))
    await clock.advance(0)

    # The late answer is let go; the next attempt, already due after the stall, is answered at once and acted on.
    assert ("release", "a") in late.calls
    assert term.started == 1
    assert term.cancelled == 0  # no term ever ran on the late answer
    assert lease.is_leader
    await finish(running)


async def test_a_renewal_failing_after_a_stall_past_the_deadline_steps_down_and_frees_the_lock(
    clock: FakeClock, told: pytest.LogCaptureFixture, tasks: list[asyncio.Task[None]]
) -> None:
    """The lock may still be ours in the store: releasing it lets another replica lead at once, not after the ttl."""
    lock = StallingLock(clock)
    lease = lease_on(lock, clock)
    term = FakeTerm()
    running = asyncio.create_task(lease.run(asyncio.Event(), term))
    tasks.append(running)
    await clock.advance(0)
    acquired_s = clock()
    lock.stall_to = acquired_s + TTL_S - lease.safety_margin_s + 0.25  # past the deadline, before the store's expiry

    await clock.advance(RENEW_S)

    assert term.cancelled == 1
    assert not running.done()
    assert stepped_down(told.records) == [
        "replica a is no longer the leader: the lease was not confirmed within its ttl of 3 s (less 0.6 s margin);"
        " reconcile loop cancelled"
    ]
    # Its next attempt is already due after the stall, and finds the lock free: a fresh term, no waiting for expiry.
    assert term.started == 2
    assert lease.is_leader


async def test_a_graceful_stop_renews_on_the_interval_not_at_once(clock: FakeClock, lock: FakeLock) -> None:
    """Stopping keeps the renewal rhythm: one renewal exactly when it falls due, none before."""
    lease = lease_on(lock, clock)
    stop = asyncio.Event()
    running = asyncio.create_task(lease.run(stop, FakeTerm(busy=True)))
    await clock.advance(STOP_AFTER_S)
    renewals = lock.calls.count(("renew", "a"))

    stop.set()
    await clock.advance(RENEW_S - STOP_AFTER_S - 0.125)
    assert lock.calls.count(("renew", "a")) == renewals
    await clock.advance(0.125)  # exactly the interval after the acquire

    assert lock.calls.count(("renew", "a")) == renewals + 1
    assert lock.expiry_of(KEY) == clock() + TTL_S
    await finish(running)


async def test_a_graceful_stop_still_ends_the_term_at_the_deadline_when_renewals_fail(
    clock: FakeClock, lock: FakeLock
) -> None:
    """Finishing a cycle is no reason to act past the lease: the loop is cancelled at the deadline, not later."""
    lease = Lease(
        lock, key=KEY, replica="a", ttl_s=TTL_S, renew_interval_s=RENEW_S, clock=clock, sleep=clock.sleep
    )  # the default grace, longer than the lease has left
    term = FakeTerm(busy=True)
    stop = asyncio.Event()
    running = asyncio.create_task(lease.run(stop, term))
    await clock.advance(0)
    deadline_s = clock() + TTL_S - lease.safety_margin_s
    await clock.advance(STOP_AFTER_S)
    lock.down = True
    stop.set()

    await clock.advance(deadline_s - clock() - 0.01)
    assert term.running == 1
    await clock.advance(0.02)

    assert term.cancelled == 1
    assert term.running == 0
    assert not lease.is_leader
    lock.down = False
    await finish(running)


async def test_a_graceful_stop_cancels_the_loop_exactly_at_the_end_of_the_grace(
    clock: FakeClock, lock: FakeLock
) -> None:
    lease = lease_on(lock, clock)
    term = FakeTerm(busy=True)
    stop = asyncio.Event()
    running = asyncio.create_task(lease.run(stop, term))
    await clock.advance(STOP_AFTER_S)  # off the renewal beat: the grace ends between two renewals
    stop.set()

    await clock.advance(GRACE_S - 0.125)
    assert term.running == 1
    await clock.advance(0.125)

    assert running.done()
    assert term.cancelled == 1
    assert KEY not in lock.entries


async def test_a_loop_that_finishes_its_cycle_while_stopping_frees_the_lock_at_once(
    clock: FakeClock, lock: FakeLock
) -> None:
    """The next leader should not wait for our next renewal once our loop is done."""
    cycle_s = 0.125

    async def one_more_cycle(stop: asyncio.Event) -> None:
        await stop.wait()
        await clock.sleep(cycle_s)

    lease = lease_on(lock, clock)
    stop = asyncio.Event()
    running = asyncio.create_task(lease.run(stop, one_more_cycle))
    await clock.advance(STOP_AFTER_S)
    stop.set()

    await clock.advance(cycle_s)

    assert running.done()
    assert KEY not in lock.entries


async def test_after_losing_the_lead_the_holder_is_unknown_until_asked(
    clock: FakeClock, lock: FakeLock, tasks: list[asyncio.Task[None]]
) -> None:
    """/v1/ready shows leader_seen: none (not an empty name) until the next attempt learns who holds the lock."""
    lease = lease_on(lock, clock)
    tasks.append(asyncio.create_task(lease.run(asyncio.Event(), FakeTerm())))
    await clock.advance(0)
    lock.entries[KEY] = ("b", clock() + 100 * TTL_S)

    await clock.advance(RENEW_S)
    assert not lease.is_leader
    assert lease.leader_seen is None

    await clock.advance(RENEW_S)
    assert lease.leader_seen == "b"


async def test_a_leader_stalled_past_its_deadline_still_names_itself_as_last_seen(
    clock: FakeClock, lock: FakeLock, tasks: list[asyncio.Task[None]]
) -> None:
    """It no longer claims to lead, but it was the last holder it saw; nothing else has been learnt yet."""
    lease = lease_on(lock, clock)
    tasks.append(asyncio.create_task(lease.run(asyncio.Event(), FakeTerm())))
    await clock.advance(0)

    clock.now_s += TTL_S  # the event loop is stalled: nothing of the lease runs meanwhile

    assert not lease.is_leader
    assert lease.leader_seen == "a"


async def test_the_term_runs_in_a_task_named_after_the_replica(
    clock: FakeClock, lock: FakeLock, tasks: list[asyncio.Task[None]]
) -> None:
    """A dump of the event loop's tasks (asyncio debug, py-spy) then says whose term a task is."""
    names: list[str] = []

    async def term(stop: asyncio.Event) -> None:
        task = asyncio.current_task()
        assert task is not None
        names.append(task.get_name())
        await stop.wait()

    tasks.append(asyncio.create_task(lease_on(lock, clock).run(asyncio.Event(), term)))
    await clock.advance(0)

    assert names == ["leader-term:a"]


@pytest.mark.parametrize(("ttl_s", "ttl_ms"), [(0.0004, 1), (0.001, 1), (3.0, 3000)])
async def test_the_ttl_is_sent_in_whole_milliseconds_never_zero(
    clock: FakeClock, tasks: list[asyncio.Task[None]], ttl_s: float, ttl_ms: int
) -> None:
    """Redis refuses PX 0: a ttl below half a millisecond is sent as one."""
    lock = RecordingTtl(clock)
    tasks.append(
        asyncio.create_task(lease_on(lock, clock, ttl_s=ttl_s, renew_s=ttl_s / 4).run(asyncio.Event(), FakeTerm()))
    )
    await clock.advance(0)

    assert lock.ttls_ms[0] == ttl_ms


async def test_a_renewal_that_does_not_answer_is_named_with_the_call_and_the_key(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    running = asyncio.create_task(lease_on(lock, clock).run(asyncio.Event(), FakeTerm()))
    await clock.advance(0)
    lock.hang = True

    await clock.advance(2 * RENEW_S)

    (outage,) = [r for r in told.records if r.getMessage().startswith("the lock store does not answer")]
    assert outage.getMessage() == f"the lock store does not answer: lock renew for {KEY}: no answer within 0.50 s"
    lock.hang = False
    await finish(running)


async def test_a_release_that_does_not_answer_is_told_and_the_replica_stops_anyway(
    clock: FakeClock, told: pytest.LogCaptureFixture
) -> None:
    """The lock expires by itself; the warning says which call hung, so the delay before a new leader is explained."""
    lock = HangingRelease(clock)
    stop = asyncio.Event()
    running = asyncio.create_task(lease_on(lock, clock).run(stop, FakeTerm()))
    await clock.advance(0)

    stop.set()
    await clock.advance(RENEW_S)

    assert running.done()
    warnings = [r.getMessage() for r in told.records if r.getMessage().startswith("could not release")]
    assert warnings == [
        f"could not release lock {KEY} (it expires within 3 s anyway): lock release for {KEY}: no answer within 0.50 s"
    ]
