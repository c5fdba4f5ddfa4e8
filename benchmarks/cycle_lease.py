"""Whether the leader's lease holds through a first cycle: the real Lease over a lock store that answers at once.

The store keeps one holder with a real expiry (monotonic s), as Redis's SET NX PX does, and answers without any
I/O, so the only thing that can make a renewal late is the autoscaler's own event loop: a parse or a plan that
holds it. The lease is lost when a renewal comes after its expiry, or when the lease's own deadline passes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from warmswarm_autoscaling.lease import Lease

TTL_S = 2.0
RENEW_INTERVAL_S = 0.5  # below a third of the TTL, as the lease requires


@dataclass
class InstantLock:
    """ports.Lock in this process, with a real expiry; `renewed_at` are the monotonic moments of each renewal."""

    holder_and_expiry: tuple[str, float] | None = None
    renewed_at: list[float] = field(default_factory=list)

    def _holder(self) -> str | None:
        entry = self.holder_and_expiry
        return entry[0] if entry is not None and entry[1] > time.monotonic() else None

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        if self._holder() is not None:
            return False
        self.holder_and_expiry = (owner, time.monotonic() + ttl_ms / 1000)
        self.renewed_at.append(time.monotonic())
        return True

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        if self._holder() != owner:
            return False
        self.holder_and_expiry = (owner, time.monotonic() + ttl_ms / 1000)
        self.renewed_at.append(time.monotonic())
        return True

    async def release(self, key: str, owner: str) -> bool:
        held = self._holder() == owner
        self.holder_and_expiry = None
        return held

    async def holder(self, key: str) -> str | None:
        return self._holder()


async def lease_through(cycle: Callable[[], Awaitable[Any]]) -> dict[str, float | bool]:
    """Runs `cycle` as the term of a lease with a TTL_S ttl; whether the lease held until the cycle ended, and the
    longest gap between two renewals (ms, wall)."""
    lock = InstantLock()
    lost_lease = asyncio.Event()

    def on_change(is_leader: bool) -> None:
        if not is_leader:
            lost_lease.set()

    lease = Lease(
        lock, key="bench", replica="bench", ttl_s=TTL_S, renew_interval_s=RENEW_INTERVAL_S, on_change=on_change
    )
    cycle_done = asyncio.Event()
    stop = asyncio.Event()

    async def term(term_stop: asyncio.Event) -> None:
        await cycle()
        cycle_done.set()
        await term_stop.wait()  # a term never ends by itself: the lease stops it

    running = asyncio.create_task(lease.run(stop, term))
    waiters = [asyncio.create_task(cycle_done.wait()), asyncio.create_task(lost_lease.wait())]
    _done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    held = cycle_done.is_set() and not lost_lease.is_set()
    for waiter in pending:
        waiter.cancel()
    stop.set()
    await running
    gaps_s = [later - earlier for earlier, later in zip(lock.renewed_at, lock.renewed_at[1:], strict=False)]
    return {"held": held, "longest renewal gap ms": max(gaps_s, default=0.0) * 1000}
