"""The ReservationStore port on Redis (redis.asyncio): one hash per cluster, reservation id -> its JSON record."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
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
        self._unreadable: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self._key

    @property
    def unreadable(self) -> tuple[str, ...]:
        return self._unreadable

    async def list(self) -> list[Reservation]:
        try:
            stored: Any = await self._redis.hgetall(self._key)
        except RedisError as error:
            raise ReservationStoreError(f"cannot read the reservations ({self._key!r}) in Redis: {error}") from error
        found: list[Reservation] = []
        unreadable: list[str] = []
        for raw_id, raw in sorted(stored.items()):
            reservation_id = _text(raw_id)
            try:
                reservation = Reservation.model_validate_json(raw)
            except ValidationError:
                unreadable.append(reservation_id)
                continue
            if reservation.id != reservation_id:
                unreadable.append(reservation_id)  # a record filed under another id: a hand edit, never trusted
                continue
            found.append(reservation)
        self._unreadable = tuple(unreadable)
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
