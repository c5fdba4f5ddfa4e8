"""The Lock port on Redis (redis.asyncio): one key per lock, holding the owner's id, with a PX expiry."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from warmswarm_autoscaling.ports import LockError

# Compare-and-set and compare-and-delete must be atomic: between a GET and a PEXPIRE/DEL sent as
# two commands the key could expire and be taken by another replica, whose lock we would then
# extend or delete. A Lua script runs without anything in between.
_RENEW_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

_DELETE_IF_OWNER = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class RedisLock:
    """Implements ports.Lock. Each method is one attempt; every Redis failure comes out as LockError."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        # EVALSHA with a fallback to EVAL: the script text travels once per connection, not per call.
        self._renew = client.register_script(_RENEW_IF_OWNER)
        self._delete = client.register_script(_DELETE_IF_OWNER)

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        _check_ttl(ttl_ms)
        try:
            # NX: only when the key does not exist; PX: the expiry is set in the same command, so a
            # replica that dies right after acquiring cannot leave a lock that never expires.
            answer = await self._redis.set(key, owner, nx=True, px=ttl_ms)
        except RedisError as error:
            raise LockError(f"cannot take lock {key!r} in Redis: {error}") from error
        return bool(answer)

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        _check_ttl(ttl_ms)
        try:
            answer: Any = await self._renew(keys=[key], args=[owner, ttl_ms])
        except RedisError as error:
            raise LockError(f"cannot renew lock {key!r} in Redis: {error}") from error
        return int(answer) == 1

    async def release(self, key: str, owner: str) -> bool:
        try:
            answer: Any = await self._delete(keys=[key], args=[owner])
        except RedisError as error:
            raise LockError(f"cannot release lock {key!r} in Redis: {error}") from error
        return int(answer) == 1

    async def holder(self, key: str) -> str | None:
        try:
            value: Any = await self._redis.get(key)
        except RedisError as error:
            raise LockError(f"cannot read lock {key!r} in Redis: {error}") from error
        if value is None:
            return None
        return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _check_ttl(ttl_ms: int) -> None:
    # PX 0 is an error in Redis and a negative one deletes nothing: both are bugs on our side.
    if ttl_ms <= 0:
        raise ValueError(f"a lock's ttl must be positive, got {ttl_ms} ms")


@contextlib.asynccontextmanager
async def redis_lock(url: str, timeout_s: float) -> AsyncIterator[RedisLock]:
    """A RedisLock on its own client; timeout_s bounds connecting and each answer."""
    client = redis.from_url(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        # No retries inside the client: the lease retries on its own clock and must know that an
        # attempt failed, instead of waiting through the client's back-off past its deadline.
        retry=Retry(NoBackoff(), 0),
    )
    try:
        yield RedisLock(client)
    finally:
        await client.aclose()
