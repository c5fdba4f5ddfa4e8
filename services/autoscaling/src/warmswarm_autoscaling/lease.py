"""Leader election on the Lock port: of several replicas, only the lock's holder runs the reconcile loop.

A replica's time as leader is a *term*: a task running the loop, started when the lock is taken
and cancelled the moment the lease can no longer be trusted. Cancelling (not asking the loop to
stop) is deliberate: it interrupts a cycle in the middle of apply, so a replica that lost the lock
sends nothing more to EC2 or the swarm. Every action is idempotent and the next leader re-reads
the world, so an interrupted cycle costs nothing but a repeat.

The lease is trusted until a local deadline on the monotonic clock: the send time of the last
confirmed acquire/renew + ttl − a safety margin. Measured from the *send* time, because Redis
started the key's ttl no earlier than that; the margin absorbs event-loop stalls and the time a
cancellation takes to land. A renewal that fails or hangs does not end the term by itself, but
once the deadline passes without a confirmation the replica steps down: the lock may have expired
in Redis and another replica may already lead.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from warmswarm_autoscaling.ports import Lock, LockError

log = logging.getLogger(__name__)

T = TypeVar("T")

# What the loop runs while leader: it gets an event asking it to stop after the current cycle
# (a graceful shutdown), and is cancelled outright when leadership is lost.
Term = Callable[[asyncio.Event], Coroutine[Any, Any, None]]

# Of the ttl, the part a leader gives up for safety: with the renew interval below ttl/3 this still
# leaves at least two renewal attempts before the deadline.
SAFETY_MARGIN_FRACTION = 0.2
# How long a shutdown lets the loop finish its current cycle (while still renewing) before cancelling it.
DEFAULT_STOP_GRACE_S = 10.0


def replica_id() -> str:
    """hostname:pid:random — unique even for a restarted process with the same pid in the same container."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def check_timing(ttl_s: float, renew_interval_s: float) -> None:
    """Raises ValueError unless a leader gets at least three renewal attempts per ttl."""
    if ttl_s <= 0 or renew_interval_s <= 0:
        raise ValueError(f"the lock ttl ({ttl_s:g} s) and renew interval ({renew_interval_s:g} s) must be positive")
    if renew_interval_s >= ttl_s / 3:
        raise ValueError(
            f"the renew interval ({renew_interval_s:g} s) must be below a third of the lock ttl ({ttl_s:g} s),"
            " so one failed renewal does not cost the leadership"
        )


def checked_margin(ttl_s: float, renew_interval_s: float, safety_margin_s: float | None) -> float:
    """The safety margin (a fifth of the ttl unless given), after checking that the timing leaves room."""
    check_timing(ttl_s, renew_interval_s)
    margin_s = ttl_s * SAFETY_MARGIN_FRACTION if safety_margin_s is None else safety_margin_s
    if not 0 <= margin_s < ttl_s - renew_interval_s:
        raise ValueError(f"the safety margin ({margin_s:g} s) must leave room for a renewal within the ttl")
    return margin_s


class Lease:
    """Contends for one lock and runs a Term while holding it; one `run` per instance."""

    def __init__(
        self,
        lock: Lock,
        *,
        key: str,
        replica: str,
        ttl_s: float,
        renew_interval_s: float,
        safety_margin_s: float | None = None,
        stop_grace_s: float = DEFAULT_STOP_GRACE_S,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        margin_s = checked_margin(ttl_s, renew_interval_s, safety_margin_s)
        self.key = key
        self.replica = replica
        self._ttl_s = ttl_s
        self._renew_interval_s = renew_interval_s
        self._margin_s = margin_s
        self._stop_grace_s = stop_grace_s
        self.on_change = on_change
        self._clock = clock
        self._sleep = sleep
        self._term: asyncio.Task[None] | None = None
        self._term_stop = asyncio.Event()
        # A term that did not end when cancelled (a bug in it): no new term starts until it has.
        self._stale_term: asyncio.Task[None] | None = None
        self._deadline_at: float | None = None  # monotonic s; set only while a term runs
        self._next_attempt_at = 0.0  # monotonic s
        self._store = _Store(lock, key, replica, ttl_s, renew_interval_s, clock, sleep)

    @property
    def is_leader(self) -> bool:
        """True only while the lease is confirmed: computed from the clock, so never stale."""
        return self._deadline_at is not None and self._clock() < self._deadline_at

    @property
    def safety_margin_s(self) -> float:
        """What the lease gives up of its ttl: how old a world the leader may still act on."""
        return self._margin_s

    @property
    def healthy(self) -> bool:
        """The lock store answered within one ttl: as a follower, this replica could take over."""
        return self._store.healthy

    @property
    def leader_seen(self) -> str | None:
        """The replica id last seen holding the lock (ourselves while leading); informational only."""
        return self.replica if self.is_leader else self._store.leader_seen

    async def run(self, stop: asyncio.Event, term: Term) -> None:
        """Contend for the lock until `stop` is set, running `term` while leader; releases the lock on the way out."""
        try:
            while not stop.is_set():
                if self._term is None:
                    await self._try_acquire(term)
                else:
                    await self._confirm()
                await self._pause(stop)
            if self._term is not None:
                await self._finish_term()
        finally:
            # Also on cancellation of run() itself: no term may outlive the lease loop that guards it.
            await self._step_down("the replica is stopping", release=True, level=logging.INFO)

    async def _try_acquire(self, term: Term) -> None:
        if self._stale_term is not None and not self._stale_term.done():
            return
        sent_at = self._clock()
        self._next_attempt_at = sent_at + self._renew_interval_s
        try:
            acquired = await self._store.acquire()
        except Exception as error:
            self._store.failed(error)
            return
        self._store.answered()
        if not acquired:
            await self._store.note_holder()
            return
        deadline = sent_at + self._ttl_s - self._margin_s
        if self._clock() >= deadline:
            # Ours, but the answer came so late that the lease is already past its deadline.
            log.warning("took lock %s but the answer came too late to act on it; letting it go", self.key)
            await self._store.release()
            return
        self._deadline_at = deadline
        self._term_stop = asyncio.Event()
        self._term = asyncio.create_task(term(self._term_stop), name=f"leader-term:{self.replica}")
        self._store.leader_seen = self.replica
        log.info(
            "replica %s is the leader now (lock %s, ttl %g s): starting the reconcile loop",
            self.replica,
            self.key,
            self._ttl_s,
        )
        self._notify(True)

    async def _confirm(self) -> None:
        """One renewal while leading; steps down when the lock is gone or the deadline passed unconfirmed."""
        term, deadline = self._term, self._deadline_at
        assert term is not None
        assert deadline is not None
        if term.done():
            # The loop never returns while its stop event is unset: this is a crash. Hold no lock
            # that nothing acts on; another replica (or this one, next round) takes over.
            await self._step_down("the reconcile loop ended by itself", release=True, level=logging.ERROR)
            return
        sent_at = self._clock()
        if sent_at >= deadline:
            await self._step_down(self._unconfirmed_reason(), release=True)
            return
        self._next_attempt_at = sent_at + self._renew_interval_s
        try:
            # Never wait past the deadline: at the deadline the answer no longer matters.
            still_ours = await self._store.renew(min(self._renew_interval_s, deadline - sent_at))
        except Exception as error:
            self._store.failed(error)
            if self._clock() >= deadline:
                await self._step_down(self._unconfirmed_reason(), release=True)
            return
        self._store.answered()
        if not still_ours:
            # It expired in Redis (we were too slow) or another replica holds it: stop at once.
            await self._step_down("the lock expired or is held by another replica", release=False)
            return
        self._deadline_at = max(deadline, sent_at + self._ttl_s - self._margin_s)

    def _unconfirmed_reason(self) -> str:
        return f"the lease was not confirmed within its ttl of {self._ttl_s:g} s (less {self._margin_s:g} s margin)"

    async def _pause(self, stop: asyncio.Event) -> None:
        """Until the next attempt; a leader also wakes at its deadline and when its term ends."""
        wake_at = self._next_attempt_at
        if self._deadline_at is not None:
            wake_at = min(wake_at, self._deadline_at)
        await self._wait_any(wake_at - self._clock(), stop.wait(), self._term)

    async def _finish_term(self) -> None:
        """Graceful stop while leading: the loop finishes its cycle, the lease is renewed meanwhile."""
        term = self._term
        assert term is not None
        self._term_stop.set()
        give_up_at = self._clock() + self._stop_grace_s
        log.info("stopping: letting the reconcile loop finish its cycle (at most %g s)", self._stop_grace_s)
        while not term.done() and self._clock() < give_up_at:
            assert self._deadline_at is not None  # a term runs, so the lease has a deadline
            if self._clock() >= min(self._next_attempt_at, self._deadline_at):
                await self._confirm()
                if self._term is None:
                    return  # lost the lease meanwhile: _confirm cancelled the term
            wake_at = min(self._next_attempt_at, self._deadline_at, give_up_at)
            await self._wait_any(wake_at - self._clock(), term)
        # run()'s finally cancels a term still running after the grace and releases the lock.

    async def _step_down(self, reason: str, *, release: bool, level: int = logging.WARNING) -> None:
        term, self._term = self._term, None
        self._deadline_at = None
        self._store.leader_seen = None  # unknown until the next failed acquire names the holder
        if term is not None:
            # Cancel first: every moment spent before this is a moment of acting without a lease.
            cancelled_running = term.cancel()
            self._notify(False)
            log.log(
                level,
                "replica %s is no longer the leader: %s%s",
                self.replica,
                reason,
                "; reconcile loop cancelled" if cancelled_running else "",
            )
            await self._wait_any(self._stop_grace_s, term)
            if not term.done():
                log.error(
                    "the reconcile loop did not end within %g s of its cancellation; not contending until it does",
                    self._stop_grace_s,
                )
                self._stale_term = term
            elif not term.cancelled() and term.exception() is not None:
                log.error("the reconcile loop failed", exc_info=term.exception())
        if release:
            await self._store.release()

    # -- helpers --------------------------------------------------------------------------------

    def _notify(self, leader: bool) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(leader)
        except Exception:  # a status setter's bug must not break the election
            log.exception("publishing the leadership flag failed")

    async def _wait_any(self, timeout_s: float, *awaitables: Awaitable[object] | None) -> None:
        await wait_any(self._sleep, timeout_s, *awaitables)


class _Store:
    """The lock, for one key and replica: each call bounded in time; whether the store answers (told once per
    outage); who was last seen holding the lock."""

    def __init__(
        self,
        lock: Lock,
        key: str,
        replica: str,
        ttl_s: float,
        timeout_s: float,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self._lock, self._key, self._replica = lock, key, replica
        self._ttl_s = ttl_s
        self._ttl_ms = max(1, round(ttl_s * 1000))
        self._timeout_s = timeout_s
        self._clock = clock
        self._sleep = sleep
        self._answered_at: float | None = None  # monotonic s of the store's last answer
        self._down = False
        self.leader_seen: str | None = None  # who held the lock at our last failed acquire, for logs

    async def acquire(self) -> bool:
        return await self._within(
            self._lock.acquire(self._key, self._replica, self._ttl_ms), self._timeout_s, "acquire"
        )

    async def renew(self, timeout_s: float) -> bool:
        return await self._within(self._lock.renew(self._key, self._replica, self._ttl_ms), timeout_s, "renew")

    async def release(self) -> None:
        """Best effort: the lock also expires by itself; deleting it lets the next leader start sooner."""
        try:
            await self._within(self._lock.release(self._key, self._replica), self._timeout_s, "release")
        except Exception as error:
            log.warning("could not release lock %s (it expires within %g s anyway): %s", self._key, self._ttl_s, error)

    async def note_holder(self) -> None:
        """Logs who leads when that changes; purely informational, so failures are ignored."""
        try:
            holder = await self._within(self._lock.holder(self._key), self._timeout_s, "holder")
        except Exception:
            return
        if holder != self.leader_seen:
            self.leader_seen = holder
            log.info("replica %s follows; lock %s is held by %s", self._replica, self._key, holder or "nobody")

    async def _within(self, call: Awaitable[T], timeout_s: float, what: str) -> T:
        return await within(self._sleep, call, timeout_s, f"lock {what} for {self._key}")

    @property
    def healthy(self) -> bool:
        """The lock store answered within one ttl: as a follower, this replica could take over."""
        return self._answered_at is not None and self._clock() - self._answered_at <= self._ttl_s

    def answered(self) -> None:
        self._answered_at = self._clock()
        if self._down:
            self._down = False
            log.info("the lock store answers again")

    def failed(self, error: Exception) -> None:
        # Once per outage, not at every attempt.
        if not self._down:
            self._down = True
            if isinstance(error, LockError):
                log.warning("the lock store does not answer: %s", error)
            else:
                log.error("the lock store call failed unexpectedly", exc_info=error)


async def within(sleep: Callable[[float], Awaitable[None]], call: Awaitable[T], timeout_s: float, what: str) -> T:
    """`call`, abandoned after timeout_s on `sleep`'s clock (so a fake clock in tests governs it too)."""
    task = asyncio.ensure_future(call)
    try:
        await wait_any(sleep, timeout_s, task)
    except BaseException:
        task.cancel()  # our caller was cancelled: the call has no one left to answer to
        raise
    if not task.done():
        task.cancel()
        raise LockError(f"{what}: no answer within {max(timeout_s, 0):.2f} s")
    return task.result()


async def wait_any(
    sleep: Callable[[float], Awaitable[None]], timeout_s: float, *awaitables: Awaitable[object] | None
) -> None:
    """Until the first of `awaitables` completes or timeout_s passes; the others are left running."""
    timer: asyncio.Future[Any] = asyncio.ensure_future(sleep(max(0.0, timeout_s)))
    waited: set[asyncio.Future[Any]] = {timer}
    created: list[asyncio.Future[Any]] = [timer]
    for awaitable in awaitables:
        if awaitable is None:
            continue
        future = asyncio.ensure_future(awaitable)
        waited.add(future)
        if future is not awaitable:
            created.append(future)  # a coroutine we wrapped here: ours to cancel
    try:
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for ours in created:
            ours.cancel()
