"""Group properties in Redis, one JSON value under `warmswarm:group:<id>`: the only state the director keeps."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Final

import redis.asyncio as redis
from pydantic import ValidationError
from redis.exceptions import RedisError
from warmswarm_models import GroupProperties

from warmswarm_director.errors import BackendUnavailable, StoredDataUnreadable
from warmswarm_director.ports import ANY_RECORD, StaleEtag, StoredGroup
from warmswarm_director.schemas import check_group_id

KEY_PREFIX: Final = "warmswarm:group:"

# Compare and set in one step (Redis runs a script alone): the write happens only if the stored value's tag is
# still the one the caller read, so two edits of one group can never both read A and both write over it.
# ARGV[1]: the expected tag ('*' any record or none, '' no record); ARGV[2]: the new value. Returns the tag now stored
# and 1 when this call wrote it, 0 when it did not.
_COMPARE_AND_SET: Final = """
local current = redis.call('GET', KEYS[1])
local tag = ''
if current then tag = redis.sha1hex(current) end
if ARGV[1] ~= '*' and ARGV[1] ~= tag then return {0, tag} end
redis.call('SET', KEYS[1], ARGV[2])
return {1, redis.sha1hex(ARGV[2])}
"""


def group_key(group_id: str) -> str:
    return KEY_PREFIX + check_group_id(group_id)


def etag_of(raw: bytes | str) -> str:
    """The tag of a stored value: the SHA-1 of its bytes, as Redis' sha1hex computes it in the script."""
    return hashlib.sha1(raw.encode() if isinstance(raw, str) else raw, usedforsecurity=False).hexdigest()


class GroupStore:
    """Reads and writes GroupProperties; Redis errors come out as BackendUnavailable."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._compare_and_set = client.register_script(_COMPARE_AND_SET)

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

    async def read(self, group_id: str) -> StoredGroup | None:
        """The group's properties with the tag of the value they were read from; None when none are stored."""
        try:
            raw = await self._redis.get(group_key(group_id))
        except RedisError as error:
            raise BackendUnavailable(f"cannot read group properties from Redis: {error}") from error
        properties = _parse(group_id, raw)
        return None if properties is None or raw is None else StoredGroup(properties, etag_of(raw))

    async def write(self, group_id: str, properties: GroupProperties, *, expected_etag: str = ANY_RECORD) -> str:
        """Store them if the stored value's tag is still `expected_etag`; the new tag. Raises StaleEtag if not."""
        try:
            written, etag = await self._compare_and_set(
                keys=[group_key(group_id)], args=[expected_etag, properties.model_dump_json()]
            )
        except RedisError as error:
            raise BackendUnavailable(f"cannot write group properties to Redis: {error}") from error
        etag = etag.decode() if isinstance(etag, bytes) else str(etag)
        if not written:
            raise StaleEtag(group_id, expected_etag, etag or None)
        return etag

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
