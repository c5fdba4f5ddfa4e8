"""Group properties in Redis, one JSON value under `warmswarm:group:<id>`: the only state the director keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import redis.asyncio as redis
from pydantic import ValidationError
from redis.exceptions import RedisError
from warmswarm_models import GroupProperties

from warmswarm_director.errors import BackendUnavailable, StoredDataUnreadable
from warmswarm_director.schemas import check_group_id

KEY_PREFIX: Final = "warmswarm:group:"


def group_key(group_id: str) -> str:
    return KEY_PREFIX + check_group_id(group_id)


class GroupStore:
    """Reads and writes GroupProperties; Redis errors come out as BackendUnavailable."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    async def get(self, group_id: str) -> GroupProperties | None:
        return (await self.get_many([group_id]))[group_id]

    async def get_many(self, group_ids: Sequence[str]) -> dict[str, GroupProperties | None]:
        """Each group's properties, None where none are stored; one round trip for all of them."""
        ids = list(dict.fromkeys(group_ids))
        if not ids:
            return {}
        keys = [group_key(group_id) for group_id in ids]
        try:
            raw_values = await self._redis.mget(keys)
        except RedisError as error:
            raise BackendUnavailable(f"cannot read group properties from Redis: {error}") from error
        return {group_id: _parse(group_id, raw) for group_id, raw in zip(ids, raw_values, strict=True)}

    async def put(self, group_id: str, properties: GroupProperties) -> None:
        try:
            await self._redis.set(group_key(group_id), properties.model_dump_json())
        except RedisError as error:
            raise BackendUnavailable(f"cannot write group properties to Redis: {error}") from error

    async def ping(self) -> None:
        try:
            await self._redis.ping()
        except RedisError as error:
            raise BackendUnavailable(f"Redis does not answer: {error}") from error


def _parse(group_id: str, raw: bytes | str | None) -> GroupProperties | None:
    if raw is None:
        return None
    try:
        return GroupProperties.model_validate_json(raw)
    except ValidationError as error:
        raise StoredDataUnreadable(
            f"the properties stored for group {group_id!r} cannot be read ({error.error_count()} problem(s));"
            f" set them again with PUT /v1/groups/{group_id}/properties"
        ) from None
