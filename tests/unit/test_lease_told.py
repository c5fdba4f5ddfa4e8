"""What the lease tells operators (its log) and what it does when it steps down: each reason for losing the lead
said once with its level, the lock released only when it may still be ours, an outage of the store told once and
its end told once, and a call that does not answer named with its operation and key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from warmswarm_autoscaling.lease import wait_any, within
from warmswarm_autoscaling.ports import LockError

from .fakes import KEY, RENEW_S, TTL_S, FakeClock, FakeLock, FakeTerm, finish, lease_on

LOGGER = "warmswarm_autoscaling.lease"


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


def stepped_down(records: list[logging.LogRecord]) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in records if "is no longer the leader" in r.getMessage()]


async def test_a_term_that_ends_by_itself_is_an_error_and_the_lock_is_released(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    term = FakeTerm()
    lease = lease_on(lock, clock)
    running = asyncio.create_task(lease.run(asyncio.Event(), term))
    await clock.advance(0)

    term.stops[0].set()
    await clock.advance(RENEW_S)

    assert stepped_down(told.records)[0] == (
        logging.ERROR,
        "replica a is no longer the leader: the reconcile loop ended by itself",
    )
    assert ("release", "a") in lock.calls
    await finish(running)


async def test_a_term_that_fails_is_logged_with_its_error(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    async def failing(stop: asyncio.Event) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("a bug in the loop")

    running = asyncio.create_task(lease_on(lock, clock).run(asyncio.Event(), failing))
    await clock.advance(RENEW_S)

    failed = next(r for r in told.records if r.getMessage() == "the reconcile loop failed")
    assert failed.levelno == logging.ERROR
    assert failed.exc_info is not None
    assert isinstance(failed.exc_info[1], RuntimeError)
    await finish(running)


async def test_a_lease_unconfirmed_at_its_deadline_ends_there_without_another_renewal(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    lease = lease_on(lock, clock)
    running = asyncio.create_task(lease.run(asyncio.Event(), FakeTerm()))
    await clock.advance(0)
    lock.cut_off.add("a")  # every renewal fails from now on
    deadline_in = TTL_S - lease.safety_margin_s

    await clock.advance(deadline_in - 0.001)
    assert lease.is_leader
    renewals = lock.calls.count(("renew", "a"))
    await clock.advance(0.001)

    assert not lease.is_leader
    assert lock.calls.count(("renew", "a")) == renewals, "no renewal is sent once the deadline is reached"
    assert ("release", "a") in lock.calls  # best effort: the lock may still be ours in the store
    assert stepped_down(told.records) == [
        (
            logging.WARNING,
            "replica a is no longer the leader: the lease was not confirmed within its ttl of 3 s (less 0.6 s margin);"
            " reconcile loop cancelled",
        )
    ]
    await finish(running)


async def test_a_renewal_refused_means_another_holds_the_lock_so_it_is_not_released(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    lease = lease_on(lock, clock)
    running = asyncio.create_task(lease.run(asyncio.Event(), FakeTerm()))
    await clock.advance(0)

    lock.entries[KEY] = ("b", clock() + TTL_S)  # another replica holds it now
    await clock.advance(RENEW_S)

    assert not lease.is_leader
    assert ("release", "a") not in lock.calls
    assert lock.entries[KEY][0] == "b"
    assert stepped_down(told.records) == [
        (
            logging.WARNING,
            "replica a is no longer the leader: the lock expired or is held by another replica;"
            " reconcile loop cancelled",
        )
    ]
    await finish(running)


async def test_stopping_is_told_as_information(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    stop = asyncio.Event()
    running = asyncio.create_task(lease_on(lock, clock).run(stop, FakeTerm()))
    await clock.advance(0)

    stop.set()
    await clock.advance(RENEW_S)

    assert running.done()
    assert stepped_down(told.records) == [(logging.INFO, "replica a is no longer the leader: the replica is stopping")]


async def test_an_outage_of_the_store_is_told_once_and_its_end_once(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    lock.down = True
    running = asyncio.create_task(lease_on(lock, clock).run(asyncio.Event(), FakeTerm()))
    await clock.advance(5 * RENEW_S)
    lock.down = False
    await clock.advance(2 * RENEW_S)
    lock.down = True
    await clock.advance(2 * RENEW_S)

    outages = [r for r in told.records if r.getMessage().startswith("the lock store does not answer: ")]
    back = [r for r in told.records if r.getMessage() == "the lock store answers again"]
    assert len(outages) == 2, "once per outage, not at every attempt"
    assert outages[0].getMessage() == "the lock store does not answer: fake lock store unreachable for acquire"
    assert all(r.levelno == logging.WARNING for r in outages)
    assert len(back) == 1
    await finish(running)


async def test_a_store_that_does_not_answer_is_named_with_the_call_and_the_key(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    lock.hang = True
    running = asyncio.create_task(lease_on(lock, clock).run(asyncio.Event(), FakeTerm()))
    await clock.advance(2 * RENEW_S)

    (outage,) = [r for r in told.records if r.getMessage().startswith("the lock store does not answer")]
    assert outage.getMessage() == f"the lock store does not answer: lock acquire for {KEY}: no answer within 0.50 s"
    lock.hang = False  # the release on the way out answers
    await finish(running)


async def test_a_follower_names_the_holder_when_it_changes(
    clock: FakeClock, lock: FakeLock, told: pytest.LogCaptureFixture
) -> None:
    lock.entries[KEY] = ("b", clock() + 100 * TTL_S)
    lease = lease_on(lock, clock)
    running = asyncio.create_task(lease.run(asyncio.Event(), FakeTerm()))
    await clock.advance(3 * RENEW_S)

    follows = [r.getMessage() for r in told.records if "follows" in r.getMessage()]
    assert follows == [f"replica a follows; lock {KEY} is held by b"]
    assert lease.leader_seen == "b"
    await finish(running)


def test_the_margin_given_is_the_margin_kept(clock: FakeClock, lock: FakeLock) -> None:
    lease = lease_on(lock, clock, safety_margin_s=0.3)

    assert lease.safety_margin_s == 0.3
    assert lease.key == KEY
    assert lease.leader_seen is None
    assert not lease.is_leader


async def test_a_timeout_already_past_is_said_as_none_left(clock: FakeClock) -> None:
    never: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

    with pytest.raises(LockError, match=r"^lock renew for k: no answer within 0.00 s$"):
        await within(clock.sleep, never, -1.0, "lock renew for k")


async def test_waiting_for_any_skips_what_is_not_there(clock: FakeClock) -> None:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.create_task(wait_any(clock.sleep, 60.0, None, done))
    await asyncio.sleep(0)

    done.set_result(None)

    async with asyncio.timeout(5):  # real time: the fake clock never moves here, so only `done` can end it
        await waiting
