"""The ReservationStore port on Redis (redis.asyncio): one hash per cluster, reservation id -> its JSON record."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import redis.asyncio as redis
from pydantic import ValidationError
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from warmswarm_models.reservation import Reservation

from warmswarm_autoscaling.ports import ReservationStoreError


class RedisReservations:
    """Implements ports.ReservationStore. Each method is one attempt; every Redis failure is a ReservationStoreError."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self._redis = client
        self._key = key
        self._unreadable: dict[str, str] = {}  # id -> why it cannot be read, as the last list found them

    @property
    def key(self) -> str:
        return self._key

    @property
    def unreadable(self) -> tuple[str, ...]:
        return tuple(self._unreadable)

    @property
    def unreadable_reasons(self) -> Mapping[str, str]:
        """Each unreadable record's id and why (the status and the listing name both)."""
        return dict(self._unreadable)

    async def list(self) -> list[Reservation]:
        try:
            stored: Any = await self._redis.hgetall(self._key)
        except RedisError as error:
            raise ReservationStoreError(f"cannot read the reservations ({self._key!r}) in Redis: {error}") from error
        found: list[Reservation] = []
        unreadable: dict[str, str] = {}
        for raw_id, raw in sorted(stored.items()):
            reservation_id = _text(raw_id)
            try:
                reservation = Reservation.model_validate_json(raw)
            except ValidationError as error:
                unreadable[reservation_id] = _why(error)
                continue
            if reservation.id != reservation_id:
                # A record filed under another id: a hand edit, never trusted.
                unreadable[reservation_id] = f"it is stored under {reservation_id!r} but names {reservation.id!r}"
                continue
            found.append(reservation)
        self._unreadable = unreadable
        return sorted(found, key=lambda r: (r.at, r.id))

    async def add(self, reservation: Reservation) -> None:
        try:
            await self._redis.hset(self._key, reservation.id, reservation.model_dump_json())
        except RedisError as error:
            raise ReservationStoreError(f"cannot store reservation {reservation.id} in Redis: {error}") from error

    async def delete(self, reservation_id: str) -> bool:
        try:
            removed: Any = await self._redis.hdel(self._key, reservation_id)
        except RedisError as error:
            raise ReservationStoreError(f"cannot delete reservation {reservation_id} in Redis: {error}") from error
        return int(removed) == 1


def _why(error: ValidationError) -> str:
    """The first problem of a record, as ops can act on it (the value itself is left out: it may be long)."""
    first = error.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "the record"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@contextlib.asynccontextmanager
async def redis_reservations(url: str, key: str, timeout_s: float) -> AsyncIterator[RedisReservations]:
    """A RedisReservations on its own client; timeout_s bounds connecting and each answer (no retries inside: a
    cycle that cannot read them plans without them, and the next one reads again)."""
    client = redis.from_url(
        url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s, retry=Retry(NoBackoff(), 0)
    )
    try:
        yield RedisReservations(client, key)
    finally:
        await client.aclose()
