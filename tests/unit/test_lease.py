"""The leader election (lease.py) against an in-memory lock on a fake clock: who leads, when, and when not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from pydantic import ValidationError
from warmswarm_autoscaling.lease import Lease, Term, check_timing
from warmswarm_autoscaling.settings import AutoscalingSettings

from .fakes import KEY, RENEW_S, TTL_S, FakeClock, FakeLock, FakeTerm, finish

MARGIN_S = 0.6  # the default: a fifth of the ttl


@dataclass
class Replica:
    lease: Lease
    reconciler: FakeTerm
    stop: asyncio.Event
    task: asyncio.Task[None]
    flags: list[bool]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lock(clock: FakeClock) -> FakeLock:
    return FakeLock(clock)


@pytest.fixture
async def start(clock: FakeClock, lock: FakeLock) -> AsyncIterator[Callable[[str], Replica]]:
    replicas: list[Replica] = []

    def _start(name: str) -> Replica:
        flags: list[bool] = []
        lease = Lease(
            lock,
            key=KEY,
            replica=name,
            ttl_s=TTL_S,
            renew_interval_s=RENEW_S,
            on_change=flags.append,
            clock=clock,
            sleep=clock.sleep,
        )
        reconciler = FakeTerm()
        stop = asyncio.Event()
        term: Term = reconciler
        replica = Replica(lease, reconciler, stop, asyncio.create_task(lease.run(stop, term)), flags)
        replicas.append(replica)
        return replica

    yield _start
    lock.down = lock.hang = False
    lock.cut_off.clear()
    await finish(*(r.task for r in replicas))


async def test_a_lone_replica_takes_the_free_lock_and_starts_its_term(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    assert a.lease.is_leader
    assert a.flags == [True]
    assert a.reconciler.started == 1
    assert a.reconciler.running == 1
    assert lock.entries[KEY] == ("a", clock() + TTL_S)  # SET NX PX with the ttl in ms


async def test_the_leader_renews_every_interval_and_stays_leader(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    await clock.run_for(10 * TTL_S, RENEW_S / 5, lambda: None)
    assert a.lease.is_leader
    assert a.reconciler.started == 1  # one uninterrupted term
    assert a.reconciler.running == 1
    renewals = [op for op, owner in lock.calls if op == "renew" and owner == "a"]
    assert len(renewals) == pytest.approx(10 * TTL_S / RENEW_S, abs=2)
    expiry = lock.expiry_of(KEY)
    assert expiry is not None
    assert expiry - clock() > TTL_S - RENEW_S


async def test_a_follower_waits_while_the_leader_holds_the_lock(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    b = start("b")
    await clock.run_for(5 * TTL_S, RENEW_S / 5, lambda: None)
    assert a.lease.is_leader
    assert not b.lease.is_leader
    assert b.reconciler.started == 0
    assert b.flags == []
    assert b.lease.healthy  # the store answers: it could take over
    assert b.lease.leader_seen == "a"


async def test_failed_renewals_keep_the_lease_until_the_deadline_then_it_is_lost(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    await clock.advance(2 * RENEW_S)  # renewed at +0.5 and +1.0 (sent at those instants)
    last_confirmed_s = clock()
    lock.down = True
    deadline_s = last_confirmed_s + TTL_S - MARGIN_S

    # Every renewal from now on fails; the term runs on while the lease can still be trusted ...
    await clock.advance(deadline_s - clock() - 0.01)
    assert a.lease.is_leader
    assert a.reconciler.running == 1
    # ... and ends exactly at the deadline, before the lock could have expired in the store.
    await clock.advance(0.01)
    assert not a.lease.is_leader
    assert a.reconciler.cancelled == 1
    assert a.reconciler.running == 0
    assert a.flags == [True, False]
    expiry = lock.expiry_of(KEY)
    assert expiry is not None
    assert clock() < expiry


async def test_a_renewal_that_never_answers_cannot_stretch_the_lease(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    confirmed_s = clock()
    lock.hang = True
    await clock.advance(TTL_S - MARGIN_S - 0.01)
    assert a.lease.is_leader
    await clock.advance(0.01)
    assert not a.lease.is_leader
    assert a.reconciler.cancelled == 1
    assert clock() == pytest.approx(confirmed_s + TTL_S - MARGIN_S)


async def test_the_deadline_counts_from_when_a_renewal_was_sent_not_answered(clock: FakeClock) -> None:
    class SlowAnswers(FakeLock):
        """The store applies each renewal at once; its answer takes ANSWER_S to come back."""

        async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
            renewed = await super().renew(key, owner, ttl_ms)
            await clock.sleep(answer_s)
            return renewed

    answer_s = 0.3
    lock = SlowAnswers(clock)
    reconciler = FakeTerm()
    lease = Lease(lock, key=KEY, replica="a", ttl_s=TTL_S, renew_interval_s=RENEW_S, clock=clock, sleep=clock.sleep)
    stop = asyncio.Event()
    task = asyncio.create_task(lease.run(stop, reconciler))
    try:
        await clock.advance(RENEW_S + answer_s)  # renewal sent at +0.5, answered at +0.8
        sent_s = clock() - answer_s
        lock.down = True
        await clock.advance(sent_s + TTL_S - MARGIN_S - clock() - 0.01)
        assert lease.is_leader
        await clock.advance(0.01)
        assert not lease.is_leader  # from the answer's arrival it would still lead for 0.3 s
        assert reconciler.cancelled == 1
    finally:
        await finish(task)


async def test_a_renewal_refused_by_the_store_ends_the_term_at_once(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    lock.entries[KEY] = ("intruder", clock() + TTL_S)  # e.g. ours expired and another replica took it
    await clock.advance(RENEW_S)
    assert not a.lease.is_leader
    assert a.reconciler.cancelled == 1
    assert a.flags == [True, False]
    assert lock.entries[KEY][0] == "intruder"  # not released: it is not ours


async def test_stepping_down_cancels_the_term_in_the_middle_of_a_cycle(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    a.reconciler.busy = True  # the term hangs inside "apply" and would never look at its stop event
    await clock.advance(RENEW_S / 2)
    assert a.reconciler.running == 1
    lock.down = True
    await clock.advance(TTL_S)
    assert a.reconciler.cancelled == 1
    assert a.reconciler.running == 0
    assert a.reconciler.finished == 0
    assert not a.reconciler.stops[0].is_set()  # cancelled, not asked


async def test_never_two_leaders_and_a_follower_takes_over_within_the_ttl(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    replicas = [start(name) for name in ("a", "b", "c")]
    await clock.advance(0)

    def at_most_one_acts() -> None:
        assert sum(r.lease.is_leader for r in replicas) <= 1
        assert sum(r.reconciler.running for r in replicas) <= 1

    await clock.run_for(3 * TTL_S, RENEW_S / 7, at_most_one_acts)
    (leader,) = [r for r in replicas if r.lease.is_leader]

    # The leader is cut off from the store (a partition or a hung process): it must give up by its
    # deadline, and only after that may another replica take the lock, once it has expired.
    lock.cut_off.add(leader.lease.replica)
    cut_s = clock()
    taken_over_at: list[float] = []

    def check() -> None:
        at_most_one_acts()
        if not taken_over_at and any(r.lease.is_leader for r in replicas if r is not leader):
            taken_over_at.append(clock())

    await clock.run_for(3 * TTL_S, RENEW_S / 7, check)
    assert not leader.lease.is_leader
    assert leader.reconciler.cancelled == 1
    assert taken_over_at, "no replica took over"
    assert taken_over_at[0] - cut_s <= TTL_S + RENEW_S + 0.01

    # Back in touch, the old leader follows: one leader still.
    lock.cut_off.clear()
    await clock.run_for(3 * TTL_S, RENEW_S / 7, at_most_one_acts)
    assert sum(r.lease.is_leader for r in replicas) == 1


async def test_an_unreachable_store_leaves_nobody_leading(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    lock.down = True
    a = start("a")
    await clock.run_for(2 * TTL_S, RENEW_S / 5, lambda: None)
    assert not a.lease.is_leader
    assert a.reconciler.started == 0
    assert not a.lease.healthy
    lock.down = False
    await clock.advance(RENEW_S)
    assert a.lease.is_leader
    assert a.lease.healthy


async def test_stop_lets_the_cycle_finish_then_releases_the_lock(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    a.stop.set()
    await clock.advance(RENEW_S)
    assert a.task.done()
    assert a.reconciler.finished == 1  # asked to stop, not cancelled
    assert a.reconciler.cancelled == 0
    assert KEY not in lock.entries  # released: the next leader need not wait for the ttl
    assert a.flags == [True, False]


async def test_a_term_that_ends_by_itself_gives_the_lock_up(
    clock: FakeClock, lock: FakeLock, start: Callable[[str], Replica]
) -> None:
    a = start("a")
    await clock.advance(0)
    a.reconciler.stops[0].set()  # the loop returns although nobody asked the lease to stop
    await clock.advance(RENEW_S / 10)
    assert not a.lease.is_leader
    assert a.flags == [True, False]
    await clock.advance(RENEW_S)
    assert a.lease.is_leader  # free again, so taken again: a fresh term
    assert a.reconciler.started == 2


async def test_an_acquire_answered_after_the_deadline_is_not_acted_on(clock: FakeClock, lock: FakeLock) -> None:
    class SlowLock(FakeLock):
        async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
            got = await super().acquire(key, owner, ttl_ms)
            clock.now_s += TTL_S  # the answer arrives after the whole ttl (a stalled process)
            return got

    slow = SlowLock(clock)
    reconciler = FakeTerm()
    lease = Lease(slow, key=KEY, replica="a", ttl_s=TTL_S, renew_interval_s=RENEW_S, clock=clock, sleep=clock.sleep)
    stop = asyncio.Event()
    task = asyncio.create_task(lease.run(stop, reconciler))
    await clock.advance(0)
    assert reconciler.started == 0
    assert ("release", "a") in slow.calls
    await finish(task)


@pytest.mark.parametrize(("ttl_s", "renew_s"), [(15.0, 5.0), (15.0, 6.0), (3.0, 1.0), (0.0, 1.0), (3.0, 0.0)])
def test_timing_that_allows_fewer_than_three_renewals_per_ttl_is_refused(ttl_s: float, renew_s: float) -> None:
    with pytest.raises(ValueError, match="renew interval"):
        check_timing(ttl_s, renew_s)


def test_settings_default_and_refuse_a_slow_renewal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-1")
    monkeypatch.setenv("WARMSWARM_CLUSTER", "blue")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/2")
    settings = AutoscalingSettings()  # type: ignore[call-arg]
    assert (settings.leader_lock_ttl_s, settings.leader_renew_interval_s) == (15.0, 3.0)
    assert settings.redis_url == "redis://127.0.0.1:6390/2"
    assert settings.lock_key() == "warmswarm:autoscaling:blue:leader"

    monkeypatch.setenv("AUTOSCALING_LEADER_LOCK_TTL_S", "6")
    monkeypatch.setenv("AUTOSCALING_LEADER_RENEW_INTERVAL_S", "2")
    with pytest.raises(ValidationError, match="AUTOSCALING_LEADER_RENEW_INTERVAL_S"):
        AutoscalingSettings()  # type: ignore[call-arg]
