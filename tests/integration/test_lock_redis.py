"""The Redis lock adapter against the sandbox's redis-server: NX, CAS renew, expiry, compare-and-delete."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis
from warmswarm_autoscaling.adapters.lock_redis import RedisLock, redis_lock
from warmswarm_autoscaling.lease import Lease
from warmswarm_autoscaling.ports import LockError
from warmswarm_sandbox.services import free_port

TTL_MS = 5_000


class Counted:
    """A lock whose calls are counted by operation: evidence that a lease looked, instead of a guess at how long
    that takes."""

    def __init__(self, inner: RedisLock) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        self.calls["acquire"] += 1
        return await self.inner.acquire(key, owner, ttl_ms)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        self.calls["renew"] += 1
        return await self.inner.renew(key, owner, ttl_ms)

    async def release(self, key: str, owner: str) -> bool:
        self.calls["release"] += 1
        return await self.inner.release(key, owner)

    async def holder(self, key: str) -> str | None:
        return await self.inner.holder(key)


@pytest.fixture
async def lock(endpoints: Any) -> AsyncIterator[RedisLock]:
    async with redis_lock(endpoints.redis_url, timeout_s=2.0) as adapter:
        yield adapter


@pytest.fixture
async def raw(endpoints: Any) -> AsyncIterator[redis.Redis]:
    client = redis.from_url(endpoints.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def key(raw: redis.Redis) -> AsyncIterator[str]:
    name = f"warmswarm:test:{uuid.uuid4().hex}:leader"
    yield name
    await raw.delete(name)


async def test_acquire_is_set_if_absent_with_the_ttl(lock: RedisLock, raw: redis.Redis, key: str) -> None:
    assert await lock.acquire(key, "a", TTL_MS)
    assert not await lock.acquire(key, "b", TTL_MS)
    assert not await lock.acquire(key, "a", TTL_MS)  # not re-entrant: holding it is renewing it
    assert await lock.holder(key) == "a"
    assert await raw.get(key) == b"a"
    assert 0 < await raw.pttl(key) <= TTL_MS


async def test_renew_extends_only_the_owners_lock(lock: RedisLock, raw: redis.Redis, key: str) -> None:
    assert await lock.acquire(key, "a", 1_000)
    assert not await lock.renew(key, "b", 60_000)
    assert await raw.pttl(key) <= 1_000  # the non-owner's renew changed nothing
    assert await lock.holder(key) == "a"
    assert await lock.renew(key, "a", 60_000)
    assert 1_000 < await raw.pttl(key) <= 60_000


async def test_the_lock_expires_after_its_ttl_and_is_free_for_another(
    lock: RedisLock, raw: redis.Redis, key: str
) -> None:
    assert await lock.acquire(key, "a", 200)
    assert await lock.holder(key) == "a"
    # Redis expires the key on its own clock: wait for that (generously), not for a guess at how long it takes.
    async with asyncio.timeout(10):
        while await raw.exists(key):  # noqa: ASYNC110 -- Redis has no event for an expiry to wait on here
            await asyncio.sleep(0.05)
    assert await lock.holder(key) is None
    assert not await lock.renew(key, "a", TTL_MS)  # too late: renewing does not resurrect an expired lock
    assert await raw.exists(key) == 0
    assert await lock.acquire(key, "b", TTL_MS)
    assert not await lock.renew(key, "a", TTL_MS)
    assert await lock.holder(key) == "b"


async def test_release_deletes_only_the_owners_lock(lock: RedisLock, raw: redis.Redis, key: str) -> None:
    assert await lock.acquire(key, "a", TTL_MS)
    assert not await lock.release(key, "b")
    assert await lock.holder(key) == "a"
    assert await lock.release(key, "a")
    assert await raw.exists(key) == 0
    assert not await lock.release(key, "a")  # already gone: nothing to delete, no error


async def test_the_scripts_work_after_redis_forgets_them(lock: RedisLock, raw: redis.Redis, key: str) -> None:
    # After a Redis restart the EVALSHA cache is empty: the adapter must fall back to EVAL.
    assert await lock.acquire(key, "a", TTL_MS)
    await raw.script_flush()
    assert await lock.renew(key, "a", TTL_MS)
    await raw.script_flush()
    assert await lock.release(key, "a")


async def test_an_unreachable_redis_is_a_lock_error_within_the_timeout() -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    async with redis_lock(nobody, timeout_s=1.0) as lock:
        for call in (
            lock.acquire("k", "a", TTL_MS),
            lock.renew("k", "a", TTL_MS),
            lock.release("k", "a"),
            lock.holder("k"),
        ):
            # Bounded generously: this catches a call that hangs, not one that is slow on a busy machine.
            async with asyncio.timeout(30):
                with pytest.raises(LockError, match="Redis"):
                    await call


async def test_two_leases_on_redis_take_turns(endpoints: Any, key: str) -> None:
    # The election on the real store: one leads; when it stops (releasing), the other leads.
    running: dict[str, int] = {"a": 0, "b": 0}
    overlaps: list[float] = []

    def term_of(name: str) -> Any:
        async def term(stop: asyncio.Event) -> None:
            running[name] += 1
            try:
                await stop.wait()
            finally:
                running[name] -= 1

        return term

    async with (
        redis_lock(endpoints.redis_url, timeout_s=0.5) as lock_a,
        redis_lock(endpoints.redis_url, timeout_s=0.5) as lock_b,
    ):
        counted = {"a": Counted(lock_a), "b": Counted(lock_b)}
        leases = {
            "a": Lease(counted["a"], key=key, replica="a", ttl_s=1.5, renew_interval_s=0.2),
            "b": Lease(counted["b"], key=key, replica="b", ttl_s=1.5, renew_interval_s=0.2),
        }
        stops = {name: asyncio.Event() for name in leases}
        tasks = {name: asyncio.create_task(leases[name].run(stops[name], term_of(name))) for name in leases}
        try:
            # Each wait is for a condition, bounded generously: a slow machine takes longer, it does not fail.
            async with asyncio.timeout(30):
                while not any(lease.is_leader for lease in leases.values()):  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            first = next(name for name, lease in leases.items() if lease.is_leader)
            other = "b" if first == "a" else "a"
            # Evidence that both looked, several times over: the leader renewed and the follower tried to take it.
            renewed, tried = counted[first].calls["renew"] + 3, counted[other].calls["acquire"] + 3
            async with asyncio.timeout(30):
                while counted[first].calls["renew"] < renewed or counted[other].calls["acquire"] < tried:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            assert leases[first].is_leader
            assert not leases[other].is_leader
            assert running[other] == 0
            stops[first].set()
            await tasks[first]
            async with asyncio.timeout(30):
                while not leases[other].is_leader:
                    if running["a"] and running["b"]:
                        overlaps.append(time.monotonic())
                    await asyncio.sleep(0.02)
                # The lease says "leader" as it starts the term; the term's task runs a moment later.
                while running[other] != 1:  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            assert running[first] == 0
            assert not overlaps
        finally:
            for stop in stops.values():
                stop.set()
            await asyncio.gather(*tasks.values(), return_exceptions=True)
