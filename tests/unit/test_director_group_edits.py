"""Editing group properties on a fake store: a PATCH changes only its fields, If-Match guards a version, and an
edit that lands between another's read and write is merged into, never written over."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from warmswarm_director.director import MAX_MERGE_ATTEMPTS, Director
from warmswarm_director.errors import Conflict, PreconditionFailed
from warmswarm_director.ports import ANY_RECORD, StoredGroup
from warmswarm_director.schemas import GroupPropertiesPatch
from warmswarm_models import GroupProperties

from .director_fakes import PLACEMENT, FakeAutoscaler, FakeGroups, FakeSwarm


class InterleavedGroups(FakeGroups):
    """Runs `between` after a read and before the next write: another operator's edit landing in between."""

    def __init__(self) -> None:
        super().__init__()
        self.between: list[Callable[[], Awaitable[None]]] = []
        self.writes = 0

    async def read(self, group_id: str) -> StoredGroup | None:
        stored = await super().read(group_id)
        if self.between:
            await self.between.pop(0)()
        return stored

    async def write(self, group_id: str, properties: GroupProperties, *, expected_etag: str = ANY_RECORD) -> str:
        self.writes += 1
        return await super().write(group_id, properties, expected_etag=expected_etag)


def patch(**fields: object) -> GroupPropertiesPatch:
    return GroupPropertiesPatch.model_validate(fields)


@pytest.fixture
def groups() -> InterleavedGroups:
    groups = InterleavedGroups()
    groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600, warm_ttl_s=1800)
    return groups


@pytest.fixture
def director(groups: InterleavedGroups) -> Director:
    return Director(FakeSwarm(), groups, FakeAutoscaler(), PLACEMENT)


async def test_a_patch_changes_only_the_fields_it_sends(director: Director, groups: InterleavedGroups) -> None:
    stored = await director.patch_group_properties("lab", patch(cache_size_gib=50))

    assert stored.properties == GroupProperties(
        ebs_cache_enabled=True, cache_ttl_s=600, warm_ttl_s=1800, cache_size_gib=50
    )
    assert groups.stored["lab"] == stored.properties
    assert stored.etag == (await director.group_properties("lab")).etag


async def test_a_groups_largest_volume_size_is_set_and_a_null_turns_growth_off_again(director: Director) -> None:
    grown = await director.patch_group_properties("lab", patch(cache_max_size_gib=200))
    assert (grown.properties.cache_max_size_gib, grown.properties.cache_ttl_s) == (200, 600)

    reset = await director.patch_group_properties("lab", patch(cache_max_size_gib=None))
    assert reset.properties.cache_max_size_gib is None


async def test_a_field_sent_as_null_goes_back_to_its_default(director: Director) -> None:
    stored = await director.patch_group_properties("lab", patch(warm_ttl_s=None))

    assert stored.properties.warm_ttl_s == GroupProperties().warm_ttl_s
    assert stored.properties.cache_ttl_s == 600


async def test_a_refusal_stays_through_other_edits_until_a_null_makes_it_no_opinion(director: Director) -> None:
    refused = await director.patch_group_properties("lab", patch(accept_recycled=False, recycle_machines=True))
    assert (refused.properties.accept_recycled, refused.properties.recycle_machines) == (False, True)

    # A field left out keeps its value: an edit of another field never turns a refusal into "no opinion".
    other = await director.patch_group_properties("lab", patch(cache_ttl_s=60))
    assert (other.properties.accept_recycled, other.properties.recycle_machines) == (False, True)

    # Null is "no opinion", not a refusal: the group no longer decides for its users.
    unset = await director.patch_group_properties("lab", patch(accept_recycled=None))
    assert (unset.properties.accept_recycled, unset.properties.recycle_machines) == (None, True)


async def test_a_patch_of_a_group_without_properties_starts_from_the_defaults(director: Director) -> None:
    stored = await director.patch_group_properties("new", patch(ebs_cache_enabled=True))

    assert stored.properties == GroupProperties(ebs_cache_enabled=True)


async def test_an_edit_landing_between_read_and_write_is_merged_into_not_written_over(
    director: Director, groups: InterleavedGroups
) -> None:
    async def other_operator() -> None:
        # A PATCH of another field, complete before ours writes.
        groups.stored["lab"] = groups.stored["lab"].model_copy(update={"cache_ttl_s": 7200})

    groups.between.append(other_operator)

    stored = await director.patch_group_properties("lab", patch(warm_ttl_s=60))

    assert (stored.properties.cache_ttl_s, stored.properties.warm_ttl_s) == (7200, 60)
    assert groups.stored["lab"] == stored.properties
    assert groups.writes == 2  # the first write was refused: its read was stale


async def test_a_stale_if_match_is_a_412_and_changes_nothing(director: Director, groups: InterleavedGroups) -> None:
    read = await director.group_properties("lab")
    await director.patch_group_properties("lab", patch(cache_ttl_s=60))
    before = groups.stored["lab"]

    for edit in (
        director.patch_group_properties("lab", patch(warm_ttl_s=0), if_match=read.etag),
        director.set_group_properties("lab", GroupProperties(), if_match=read.etag),
    ):
        with pytest.raises(PreconditionFailed) as stale:
            await edit
        assert "GET /v1/groups/lab/properties" in stale.value.message

    assert groups.stored["lab"] == before


async def test_an_if_match_edit_loses_to_an_edit_landing_between_its_read_and_write(
    director: Director, groups: InterleavedGroups
) -> None:
    read = await director.group_properties("lab")

    async def other_operator() -> None:
        groups.stored["lab"] = groups.stored["lab"].model_copy(update={"cache_ttl_s": 7200})

    groups.between.append(other_operator)

    with pytest.raises(PreconditionFailed):
        await director.patch_group_properties("lab", patch(warm_ttl_s=60), if_match=read.etag)
    assert groups.stored["lab"].warm_ttl_s == 1800


async def test_the_current_if_match_applies(director: Director) -> None:
    read = await director.group_properties("lab")

    stored = await director.patch_group_properties("lab", patch(cache_ttl_s=60), if_match=read.etag)

    assert stored.properties.cache_ttl_s == 60
    assert stored.etag != read.etag


async def test_if_match_any_needs_properties_stored(director: Director) -> None:
    with pytest.raises(PreconditionFailed) as none:
        await director.patch_group_properties("new", patch(cache_ttl_s=60), if_match="*")
    assert "no properties stored" in none.value.message
    with pytest.raises(PreconditionFailed):
        await director.set_group_properties("new", GroupProperties(), if_match="*")

    assert (
        await director.patch_group_properties("lab", patch(cache_ttl_s=60), if_match="*")
    ).properties.cache_ttl_s == 60


async def test_a_group_that_never_stops_changing_is_a_409_after_a_bounded_number_of_merges(
    director: Director, groups: InterleavedGroups
) -> None:
    async def other_operator() -> None:
        groups.stored["lab"] = groups.stored["lab"].model_copy(update={"cache_ttl_s": groups.writes + 1})

    groups.between.extend([other_operator] * MAX_MERGE_ATTEMPTS)

    with pytest.raises(Conflict):
        await director.patch_group_properties("lab", patch(warm_ttl_s=60))
    assert groups.writes == MAX_MERGE_ATTEMPTS
    assert groups.stored["lab"].warm_ttl_s == 1800


def test_the_patch_has_every_field_of_the_properties() -> None:
    assert set(GroupPropertiesPatch.model_fields) == set(GroupProperties.model_fields)
