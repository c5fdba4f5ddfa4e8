"""The Redis reservation store against the sandbox's redis-server: one hash per cluster, a round trip, an unreadable
record skipped and named, and an unreachable Redis a ReservationStoreError within the timeout."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as redis
from warmswarm_autoscaling.adapters.reservations_redis import RedisReservations, redis_reservations
from warmswarm_autoscaling.ports import ReservationStoreError
from warmswarm_models.reservation import Reservation, ReservedSize
from warmswarm_sandbox.services import free_port


def reservation(reservation_id: str, at: float) -> Reservation:
    size = ReservedSize(cpus=0.5, memory_bytes=2**28)
    return Reservation(id=reservation_id, group="g", sessions=3, resources=size, at=at, created_at=at - 60)


@pytest.fixture
def key() -> str:
    return f"warmswarm:autoscaling:test-{uuid.uuid4().hex[:8]}:reservations"


@pytest.fixture
async def store(endpoints: Any, key: str) -> AsyncIterator[RedisReservations]:
    async with redis_reservations(endpoints.redis_url, key, timeout_s=2.0) as adapter:
        yield adapter


@pytest.fixture
async def raw(endpoints: Any) -> AsyncIterator[redis.Redis]:
    client = redis.from_url(endpoints.redis_url)
    yield client
    await client.aclose()


async def test_reservations_round_trip_in_one_hash_ordered_by_their_moment(
    store: RedisReservations, raw: redis.Redis, key: str
) -> None:
    late, early = reservation("resv-00000000000b", 2_000), reservation("resv-00000000000a", 1_000)
    await store.add(late)
    await store.add(early)
    assert await store.list() == [early, late]
    assert await raw.type(key) == b"hash"
    assert await raw.hlen(key) == 2
    assert await store.delete(early.id) is True
    assert await store.delete(early.id) is False
    assert await store.list() == [late]


async def test_a_record_that_cannot_be_read_is_skipped_and_named(
    store: RedisReservations, raw: redis.Redis, key: str
) -> None:
    good = reservation("resv-00000000000a", 1_000)
    await store.add(good)
    await raw.hset(key, "resv-00000000000c", "{not json")
    await raw.hset(key, "resv-00000000000d", reservation("resv-00000000000e", 1_000).model_dump_json())
    assert await store.list() == [good]
    assert store.unreadable == ("resv-00000000000c", "resv-00000000000d")
    reasons = store.unreadable_reasons
    assert reasons["resv-00000000000c"].startswith("the record: Invalid JSON"), reasons
    assert reasons["resv-00000000000d"] == "it is stored under 'resv-00000000000d' but names 'resv-00000000000e'"


async def test_a_record_of_main_outside_the_bounds_is_unreadable_not_planned(
    store: RedisReservations, raw: redis.Redis, key: str
) -> None:
    # What main stored for issue 42's probe: a moment in the year 138408331, which no answer could write.
    stored_by_main = reservation("resv-00000000000f", 1_000).model_dump() | {"at": 4367682912357125.0}
    await raw.hset(key, "resv-00000000000f", json.dumps(stored_by_main))
    assert await store.list() == []
    assert store.unreadable_reasons == {"resv-00000000000f": "at: Input should be less than or equal to 32503680000"}


async def test_an_unreachable_redis_is_a_store_error_within_the_timeout() -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    async with redis_reservations(nobody, "k", timeout_s=0.5) as adapter:
        started = time.monotonic()
        with pytest.raises(ReservationStoreError, match="cannot read the reservations"):
            await adapter.list()
        with pytest.raises(ReservationStoreError, match="cannot store reservation"):
            await adapter.add(reservation("resv-00000000000a", 1_000))
    assert time.monotonic() - started < 3
