"""The tag and label codec: what tags.py writes for each action, readings.py reads back as the same typed facts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_autoscaling import tags
from warmswarm_autoscaling.actions import (
    ClaimBufferMachine,
    CreateVolume,
    ExpireVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    MarkScrubbed,
    RecycleMachine,
    ReleaseVolume,
    SetVolumeTtl,
    Start,
    StripOwner,
)
from warmswarm_autoscaling.readings import read_instance, read_node, read_volume
from warmswarm_autoscaling.snapshot import NOBODY, Instance, Scrub, Volume
from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_GROWN_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    Owner,
    Resources,
)

from .factories import ALICE_N1, BOB, CLUSTER, NOW, ZONE_A

# Epoch seconds a tag may hold: 2001 to 2286, the range ISO 8601's four-digit years and EC2's lifetime cover.
MOMENTS = st.integers(min_value=1_000_000_000, max_value=9_999_999_999).map(float)
OWNERS = st.builds(
    Owner,
    user_id=st.from_regex(r"[a-z0-9][a-z0-9._-]{0,20}", fullmatch=True),
    project_id=st.none() | st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
    node_id=st.none() | st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True),
)


def machine(written: Mapping[str, str]) -> Instance:
    return read_instance(
        id="i-0aa", instance_type="t3.medium", availability_zone=ZONE_A, state="running", launched_at=NOW, tags=written
    )


def cache_volume(written: Mapping[str, str]) -> Volume:
    return read_volume(
        id="vol-0a",
        availability_zone=ZONE_A,
        state="available",
        size_gib=20,
        volume_type="gp3",
        created_at=NOW,
        tags=written,
    )


LAUNCH = Launch("t3.medium", ZONE_A, ALICE_N1, ("t1",), Resources(1.0, 2**30), "token-1", "t1 waits")


def launch(owner: Owner = ALICE_N1, **changes: Any) -> Launch:
    return dataclasses.replace(LAUNCH, owner=owner, **changes)


@given(OWNERS, st.integers(min_value=0, max_value=604_800))
def test_a_launch_reads_back_as_its_owner_volume_and_warm_tier(owner: Owner, warm_ttl_s: int) -> None:
    written = tags.launch_tags(CLUSTER, launch(owner, volume_id="vol-0a", warm_ttl_s=warm_ttl_s))

    read = machine(written)

    assert (read.owner, read.volume_id, read.warm_ttl_s) == (owner, "vol-0a", warm_ttl_s)
    assert written[CLUSTER_TAG] == CLUSTER
    assert not read.buffer
    assert read.batch is None
    assert (INSTANCE_WARM_TTL_TAG in written) == (warm_ttl_s > 0)


def test_a_buffer_launch_reads_back_as_nobodys_buffer_machine() -> None:
    read = machine(tags.launch_tags(CLUSTER, launch(NOBODY, task_ids=(), purpose="buffer")))

    assert read.in_buffer
    assert (read.owner, read.volume_id, read.warm_ttl_s) == (NOBODY, None, 0)


def test_a_batch_machine_reads_back_unbound_then_bound_to_its_owner() -> None:
    batch = LaunchBatch("t3.medium", ZONE_A, (launch(BOB),), "batch-token", "one call")
    written = tags.batch_tags(CLUSTER, batch)

    assert machine(written).unbound
    assert machine(written).batch == "batch-token"
    bound = machine({**written, **tags.bound_tags(BOB)})
    assert (bound.owner, bound.unbound) == (BOB, False)


@given(OWNERS, MOMENTS, st.integers(min_value=0, max_value=604_800), st.booleans())
def test_a_claimed_buffer_machine_reads_back_as_its_owners_warm_machine(
    owner: Owner, warm_until: float, warm_ttl_s: int, with_volume: bool
) -> None:
    volume_id = "vol-0a" if with_volume else None
    claim = ClaimBufferMachine("i-0aa", owner, volume_id, warm_ttl_s, warm_until, "claimed")
    buffer_machine = tags.launch_tags(CLUSTER, launch(NOBODY, task_ids=(), purpose="buffer"))

    read = machine({**buffer_machine, **tags.claim_tags(claim)})

    assert (read.owner, read.volume_id, read.warm_ttl_s, read.warm_until) == (owner, volume_id, warm_ttl_s, warm_until)
    assert read.claimed_from_buffer
    assert not read.in_buffer


@given(MOMENTS)
def test_a_warm_until_reads_back_to_the_second(warm_until: float) -> None:
    assert machine(tags.warm_until_tags(warm_until + 0.75)).warm_until == warm_until
    assert set(tags.warm_until_tags(warm_until)) == {INSTANCE_WARM_UNTIL_TAG}


def test_a_new_volume_reads_back_as_its_owners_with_its_ttl() -> None:
    create = CreateVolume(ALICE_N1, ZONE_A, 20, "gp3", 3600, "token-v", "needs a cache")

    read = cache_volume(tags.volume_tags(CLUSTER, create))

    assert (read.owner, read.ttl_s, read.released_at, read.expires_at) == (ALICE_N1, 3600, None, None)


@given(MOMENTS, st.integers(min_value=0, max_value=30 * 86_400), st.none() | st.integers(0, 30 * 86_400))
def test_a_release_reads_back_as_its_clock(released_at: float, ttl_s: int, write_ttl_s: int | None) -> None:
    release = ReleaseVolume("vol-0a", released_at, released_at + ttl_s, write_ttl_s, "released")

    written = tags.release_tags(release)
    read = cache_volume(written)

    assert (read.released_at, read.expires_at) == (released_at, released_at + ttl_s)
    assert read.ttl_s == write_ttl_s
    assert (VOLUME_TTL_TAG in written) == (write_ttl_s is not None)


def test_a_renewal_removes_what_a_release_wrote() -> None:
    released = tags.release_tags(ReleaseVolume("vol-0a", NOW, NOW + 60, None, "released"))

    renewed = cache_volume({k: v for k, v in released.items() if k not in tags.RELEASE_TAG_KEYS})

    assert set(tags.RELEASE_TAG_KEYS) == {VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG}
    assert (renewed.released_at, renewed.expires_at, renewed.unreadable_tags) == (None, None, frozenset())


@given(MOMENTS)
def test_a_growths_moment_reads_back_to_the_second(grown_at: float) -> None:
    read = cache_volume(tags.grown_tags(grown_at + 0.75))

    assert (read.grown_at, read.unreadable_tags) == (grown_at, frozenset())


def test_an_unreadable_grown_at_is_none_and_listed_as_unreadable() -> None:
    read = cache_volume({VOLUME_GROWN_AT_TAG: "1700000000"})

    assert (read.grown_at, read.unreadable_tags) == (None, frozenset({VOLUME_GROWN_AT_TAG}))


def test_a_new_ttl_and_an_operators_expiry_read_back() -> None:
    assert cache_volume(tags.ttl_tags(SetVolumeTtl("vol-0a", 7200, "policy"))).ttl_s == 7200
    assert cache_volume(tags.expiry_tags(ExpireVolume("vol-0a", NOW, "operator"))).expires_at == NOW


@given(OWNERS, st.booleans())
def test_a_labelled_node_reads_back_as_its_owners_and_its_machines(owner: Owner, with_volume: bool) -> None:
    volume_id = "vol-0a" if with_volume else None
    label = LabelNode("node-1", owner, "i-0aa", "t3.medium", ZONE_A, volume_id, "joined")

    read = read_node(
        id="node-1",
        hostname="h",
        state="ready",
        availability="active",
        role="worker",
        resources=Resources(2.0, 4 * 2**30),
        labels=tags.node_labels(label),
        engine_labels={},
    )

    assert (read.owner, read.labelled_instance_id) == (owner, "i-0aa")
    assert (read.labels.get("warmswarm.volume-id"), read.labels["warmswarm.availability-zone"]) == (volume_id, ZONE_A)


# Recycling: each stage's tags read back as the stage


@given(OWNERS, st.integers(min_value=0, max_value=50), st.booleans(), st.integers(min_value=0, max_value=10**10))
def test_a_recycle_then_its_strip_then_its_proof_read_back_stage_by_stage(
    owner: Owner, recycled_before: int, hot: bool, marked_at: int
) -> None:
    launched = tags.launch_tags(CLUSTER, launch(owner, volume_id="vol-0a", warm_ttl_s=600, recyclable=True))
    assert machine(launched).recyclable
    earlier = tuple(f"u{n}/p{n}" for n in range(recycled_before))
    generation = recycled_before + 1
    token = f"{generation}.{marked_at}"
    recycle = RecycleMachine("i-0aa", owner, generation, marked_at, earlier, True, "idle")
    assert recycle.token == token

    marked = machine({**launched, **tags.recycle_tags(recycle)})
    assert marked.scrub == Scrub(generation, False, token)
    assert (marked.scrub_owed, marked.recycled, marked.owner) == (True, generation, owner)
    assert marked.served_owners[-1] == tags.served_owner(owner)
    assert len(" ".join(marked.served_owners)) <= tags.TAG_VALUE_MAX_CHARS

    set_tags, removed = tags.strip_tags(CLUSTER, StripOwner("i-0aa", ("n1",), hot, "stripped"))
    stripped_tags = {
        k: v for k, v in {**launched, **tags.recycle_tags(recycle), **set_tags}.items() if k not in removed
    }
    stripped = machine(stripped_tags)
    assert (stripped.in_buffer, stripped.hot, stripped.scrub_owed) == (True, hot, True)
    assert (stripped.volume_id, stripped.warm_ttl_s, stripped.recyclable) == (None, 0, False)
    assert not any(key in stripped_tags for key in owner.labels())
    assert str(owner) not in stripped_tags["Name"]

    proven = machine({**stripped_tags, **tags.scrubbed_tags(MarkScrubbed("i-0aa", token, "proven"))})
    assert (proven.scrub, proven.scrub_owed, proven.recycled) == (Scrub(generation, True, token), False, generation)


def test_two_marks_of_one_generation_ask_for_different_tokens() -> None:
    """A count lost or set back asks again for generation 1: the mark's moment makes its token new, so that the proof
    of the earlier mark, left on the disk, never matches it."""
    first = tags.recycle_tags(RecycleMachine("i-0aa", ALICE_N1, 1, 1_700_000_000, (), True, "idle"))
    again = tags.recycle_tags(RecycleMachine("i-0aa", ALICE_N1, 1, 1_700_003_600, (), True, "idle"))

    assert first[INSTANCE_SCRUB_TAG] == "pending-1.1700000000"
    assert again[INSTANCE_SCRUB_TAG] == "pending-1.1700003600"


# Ids no other tag value could hold by chance.
TRACED = Owner(user_id="usr7e3f9a", project_id="prj4c1d2b", node_id="nod9b8a7c")


@pytest.mark.parametrize("hot", [False, True])
def test_after_the_strip_no_tag_but_the_audit_names_the_last_owner(hot: bool) -> None:
    """Issue 42: the launch reason named the last owner in full after the strip. Every tag any stage writes on a
    machine (launch, batch, bind, claim, start, stop, mark), with reasons that name the owner as the plan's do: after
    the strip, only the audit tag holds the owner's user, project or node id."""
    said = f"{TRACED}'s task t1 waits for a machine"
    written = {
        **tags.batch_tags(CLUSTER, LaunchBatch("t3.medium", ZONE_A, (launch(TRACED),), "batch-1", said)),
        **tags.launch_tags(CLUSTER, launch(TRACED, volume_id="vol-0a", warm_ttl_s=600, recyclable=True, reason=said)),
        **tags.bound_tags(TRACED),
        **tags.claim_tags(
            ClaimBufferMachine("i-0aa", TRACED, "vol-0a", 600, NOW, said, claimed_at=NOW, recyclable=True)
        ),
        **tags.launch_settings_tags("0123456789abcdef"),
        **tags.started_tags(Start("i-0aa", said, started_at=NOW)),
        **tags.warm_until_tags(NOW + 600),
        **tags.recycle_tags(RecycleMachine("i-0aa", TRACED, 1, int(NOW), (), True, said)),
    }
    assert any("usr7e3f9a" in value for key, value in written.items() if key != INSTANCE_SERVED_OWNERS_TAG)
    set_tags, removed = tags.strip_tags(CLUSTER, StripOwner("i-0aa", ("n1",), hot, said))
    stripped = {k: v for k, v in {**written, **set_tags}.items() if k not in removed}

    ids = [i for i in (TRACED.user_id, TRACED.project_id, TRACED.node_id) if i]
    naming = {k: v for k, v in stripped.items() if k != INSTANCE_SERVED_OWNERS_TAG and any(i in v for i in ids)}
    assert naming == {}
    assert not any(i in key for key in stripped for i in ids)
    assert stripped[INSTANCE_SERVED_OWNERS_TAG] == tags.served_owner(TRACED)  # the audit stays
    # And the stripped machine still reads as recycled if its count is ever lost (its launch reason says so).
    assert machine({k: v for k, v in stripped.items() if k != INSTANCE_RECYCLED_TAG}).recycled is None


@pytest.mark.parametrize("written", ["pending-", "done-0", "done-x", "pending-99999999", "scrubbed", ""])
def test_an_unreadable_scrub_tag_reads_as_owed_and_unprovable(written: str) -> None:
    assert machine({INSTANCE_SCRUB_TAG: written}).scrub == Scrub(0, False, None)


def test_a_scrub_proof_reads_back_from_the_daemons_label_and_nothing_else_does() -> None:
    def proof(label: str | None) -> str | None:
        engine = {ENGINE_LABEL_INSTANCE_ID: "i-0aa", **({ENGINE_LABEL_SCRUBBED: label} if label is not None else {})}
        return read_node(
            id="n1",
            hostname="h",
            state="ready",
            availability="drain",
            role="worker",
            resources=Resources(),
            labels={ENGINE_LABEL_SCRUBBED: "7.1700000000"},  # a node label someone wrote is no proof
            engine_labels=engine,
        ).scrubbed

    labels = ("3.1700000000", "3", None, "x", "-1", "")
    assert [proof(label) for label in labels] == ["3.1700000000", None, None, None, None, None]


def test_every_launch_carries_the_launch_settings_it_was_made_with() -> None:
    assert machine(tags.launch_settings_tags("0123456789abcdef")).launch_settings == "0123456789abcdef"
    assert tags.launch_settings_tags("") == {}
    assert machine({}).launch_settings == ""
