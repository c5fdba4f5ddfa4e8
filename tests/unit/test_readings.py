"""Reading recycling's tags and labels (readings.py): what a recycled machine owes, proved and served, and that a
value nobody of ours wrote reads as the safe answer (never offered, never an exception)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_autoscaling.readings import read_instance, read_node
from warmswarm_autoscaling.snapshot import CacheFill, Instance, Node, Scrub
from warmswarm_models import (
    ENGINE_LABEL_CACHE_FILL,
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_LAUNCH_SETTINGS_TAG,
    INSTANCE_RECYCLE_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    LAUNCH_REASON_TAG,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
    Resources,
)
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

from .factories import NOW, ZONE_A

GENERATIONS = st.integers(min_value=1, max_value=10_000)
# Values no autoscaler writes for a count or a generation: signs, spaces, other digits, words, too many digits.
MALFORMED_NUMBERS = ["", " 3", "3 ", "+3", "-3", "3.0", "0x3", "three", "٣", "３", "10001", "9" * 5000]


def machine(written: Mapping[str, str]) -> Instance:
    return read_instance(
        id="i-0aa", instance_type="t3.medium", availability_zone=ZONE_A, state="stopped", launched_at=NOW, tags=written
    )


def node(engine_labels: Mapping[str, str]) -> Node:
    return read_node(
        id="node-1",
        hostname="h",
        state="ready",
        availability="drain",
        role="worker",
        resources=Resources(2.0, 4 * 2**30),
        labels={},
        engine_labels={ENGINE_LABEL_INSTANCE_ID: "i-0aa", **engine_labels},
    )


def test_a_machine_without_recycling_tags_reads_as_never_recycled() -> None:
    read = machine({})

    assert (read.recyclable, read.recycled, read.scrub) == (False, 0, None)
    assert (read.served_owners, read.launch_settings) == ((), "")
    assert not read.scrub_owed


@pytest.mark.parametrize("written", ["true", "TRUE", " True "])
def test_the_recycle_mark_is_true_in_any_case(written: str) -> None:
    assert machine({INSTANCE_RECYCLE_TAG: written}).recyclable is True


@pytest.mark.parametrize("written", ["false", "yes", "1", "", "truthy"])
def test_a_recycle_mark_that_is_not_true_leaves_the_machine_to_be_terminated(written: str) -> None:
    assert machine({INSTANCE_RECYCLE_TAG: written}).recyclable is False


MOMENTS = st.integers(min_value=0, max_value=10**12 - 1)


@given(GENERATIONS, MOMENTS)
def test_a_pending_scrub_is_owed_and_a_done_one_is_proved_for_its_token(generation: int, marked_at: int) -> None:
    token = f"{generation}.{marked_at}"
    pending = machine({INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}{token}"})
    done = machine({INSTANCE_SCRUB_TAG: f"{SCRUB_DONE_PREFIX}{token}"})

    assert (pending.scrub, pending.scrub_owed) == (Scrub(generation, False, token), True)
    assert (done.scrub, done.scrub_owed) == (Scrub(generation, True, token), False)


@given(GENERATIONS)
def test_a_legacy_pending_scrub_without_its_moment_is_owed_and_no_node_can_prove_it(generation: int) -> None:
    """Written before scrub tokens: the node script refuses it, and no proof, whatever it says, matches a token of
    None (recycle._proven then terminates the machine at its start timeout). A legacy done-<n> was proven by us."""
    pending = machine({INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}{generation}"})
    done = machine({INSTANCE_SCRUB_TAG: f"{SCRUB_DONE_PREFIX}{generation}"})

    assert (pending.scrub, pending.scrub_owed) == (Scrub(generation, False, None), True)
    assert (done.scrub, done.scrub_owed) == (Scrub(generation, True, None), False)


@pytest.mark.parametrize(
    "written",
    [
        "",
        "pending",
        "done",
        "pending-",
        "done-",
        "pending-0",  # generations start at 1: 0 is the unreadable's, which nothing proves
        "done-0",
        "done-0.1700000000",
        "done-10001",
        "done-" + "9" * 5000,
        "done-1." + "9" * 5000,
        "pending--1",
        "done-1 ",
        "done-01",
        "done-01.1700000000",
        "done-1.01700000000",
        "done-1.",
        "done-.1700000000",
        "done-1.17.3",
        "done-1.-5",
        "DONE-1",
        "done_1",
        "scrubbed",
        "done-٣",
        "done-1.١٧",
    ],
)
def test_a_scrub_tag_we_did_not_write_is_owed_for_generation_0_which_no_boot_proves(written: str) -> None:
    read = machine({INSTANCE_SCRUB_TAG: written})

    assert read.scrub == Scrub(0, False, None)
    assert read.scrub_owed  # never offered, never labelled for an owner
    assert read.recycled is None  # it served an unknown owner


@given(st.integers(min_value=1, max_value=10_000), MOMENTS)
def test_the_recycle_count_reads_back_beside_the_scrub_of_its_generation(count: int, marked_at: int) -> None:
    assert machine({}).recycled == 0
    for prefix in (SCRUB_PENDING_PREFIX, SCRUB_DONE_PREFIX):
        tags = {INSTANCE_RECYCLED_TAG: str(count), INSTANCE_SCRUB_TAG: f"{prefix}{count}.{marked_at}"}
        assert machine(tags).recycled == count


@pytest.mark.parametrize("written", MALFORMED_NUMBERS)
def test_an_unreadable_recycle_count_reads_as_unknown_not_as_never_recycled(written: str) -> None:
    """Issue 42: an unreadable count read as 0, and a machine that served others looked new to a refusing group."""
    assert machine({INSTANCE_RECYCLED_TAG: written}).recycled is None
    assert machine({INSTANCE_RECYCLED_TAG: written, INSTANCE_SCRUB_TAG: "done-1.1700000000"}).recycled is None


@pytest.mark.parametrize(
    "traces",
    [
        {INSTANCE_SCRUB_TAG: "done-2.1700000000"},
        {INSTANCE_SCRUB_TAG: "pending-1.1700000000"},
        {INSTANCE_SCRUB_TAG: "done-3"},
        {INSTANCE_SCRUB_TAG: "garbled"},
        {INSTANCE_SERVED_OWNERS_TAG: "alice/p1"},
        {LAUNCH_REASON_TAG: LAUNCH_REASON_STRIPPED},
    ],
)
def test_a_missing_count_beside_a_recycle_trace_reads_as_unknown(traces: dict[str, str]) -> None:
    read = machine(traces)

    assert read.recycled is None
    assert read.was_recycled


@pytest.mark.parametrize(
    "tags",
    [
        # Set back: the count says fewer recycles than the scrub's generation, or than the owners it served.
        {INSTANCE_RECYCLED_TAG: "1", INSTANCE_SCRUB_TAG: "done-2.1700000000"},
        {INSTANCE_RECYCLED_TAG: "3", INSTANCE_SCRUB_TAG: "done-2.1700000000"},
        {INSTANCE_RECYCLED_TAG: "1", INSTANCE_SCRUB_TAG: "done-1.1", INSTANCE_SERVED_OWNERS_TAG: "a/p b/p"},
        {INSTANCE_RECYCLED_TAG: "0", INSTANCE_SERVED_OWNERS_TAG: "a/p"},
        # Recycles counted, but the scrub tag every one of them wrote is gone, or unreadable.
        {INSTANCE_RECYCLED_TAG: "2"},
        {INSTANCE_RECYCLED_TAG: "0", INSTANCE_SCRUB_TAG: "garbled"},
    ],
)
def test_a_count_its_other_tags_contradict_reads_as_unknown(tags: dict[str, str]) -> None:
    assert machine(tags).recycled is None


def test_the_served_owners_read_in_order_and_the_launch_settings_as_written() -> None:
    read = machine(
        {INSTANCE_SERVED_OWNERS_TAG: "alice/p1  bob/p2\tcarol/None ", INSTANCE_LAUNCH_SETTINGS_TAG: "sha256:abc"}
    )

    assert read.served_owners == ("alice/p1", "bob/p2", "carol/None")
    assert read.launch_settings == "sha256:abc"
    assert machine({INSTANCE_SERVED_OWNERS_TAG: "   "}).served_owners == ()


@given(GENERATIONS, MOMENTS)
def test_a_nodes_scrub_label_reads_as_the_token_it_proves(generation: int, marked_at: int) -> None:
    token = f"{generation}.{marked_at}"
    assert node({ENGINE_LABEL_SCRUBBED: token}).scrubbed == token


@pytest.mark.parametrize(
    "written",
    [
        *(w for w in MALFORMED_NUMBERS if w != "3.0"),
        *("0", "3", "done-3", "pending-3", "done-3.17", "0.17", "03.17", "3.017", "3.", ".17", "3.1.7"),
    ],
)
def test_a_scrub_label_we_did_not_write_proves_nothing(written: str) -> None:
    """A legacy proof `<n>` included: it proves no token ("3.0" is one: generation 3 marked at epoch 0)."""
    assert node({ENGINE_LABEL_SCRUBBED: written}).scrubbed is None


def test_a_node_without_the_scrub_label_proves_nothing() -> None:
    assert node({}).scrubbed is None


# -- a node's cache fill (warmswarm.cache-fill = <volume id>:<used percent>[:<file system MiB>]) --------------------


@given(st.integers(min_value=0, max_value=100))
def test_a_cache_fill_reads_as_its_volume_and_percent(percent: int) -> None:
    read = node({ENGINE_LABEL_CACHE_FILL: f"vol-0a:{percent}"})

    assert (read.cache_fill, read.cache_fill_problem) == (CacheFill("vol-0a", percent), "")


@given(st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=64 * 1024 * 1024))
def test_a_cache_fill_reads_as_its_volume_percent_and_file_system_size(percent: int, size_mib: int) -> None:
    read = node({ENGINE_LABEL_CACHE_FILL: f"vol-0a:{percent}:{size_mib}"})

    assert (read.cache_fill, read.cache_fill_problem) == (CacheFill("vol-0a", percent, size_mib), "")


def test_a_node_without_the_fill_label_says_nothing_of_it() -> None:
    assert (node({}).cache_fill, node({}).cache_fill_problem) == (None, "")


@pytest.mark.parametrize(
    "written",
    [
        *("", "80", "vol-0a", "vol-0a:", ":80", "vol-0a:101", "vol-0a:-1", "vol-0a:8 0", "vol-0a:٨٠", "vol-0a:80.5"),
        *("vol-0a:80:", "vol-0a:80:-1", "vol-0a:80:big", "vol-0a:80:1:2", "vol-0a:80:" + "9" * 5000, "vol-0a:80:١"),
    ],
)
def test_a_fill_label_we_cannot_read_is_no_figure_and_is_named(written: str) -> None:
    read = node({ENGINE_LABEL_CACHE_FILL: written})

    assert read.cache_fill is None
    assert ENGINE_LABEL_CACHE_FILL in read.cache_fill_problem


def test_a_huge_fill_label_is_unreadable_not_an_exception() -> None:
    read = node({ENGINE_LABEL_CACHE_FILL: "vol-0a:" + "9" * 5000})

    assert read.cache_fill is None
    assert ENGINE_LABEL_CACHE_FILL in read.cache_fill_problem
    assert len(read.cache_fill_problem) < 200  # the value is cut: a problem is read by people


def _fresh(text: str) -> str:
    """An equal string that is not the same object (as each decoded answer makes its own)."""
    return "".join(list(text))


def test_readings_share_their_tag_keys_and_repeated_words_but_keep_the_values_written() -> None:
    tags = {"cluster": "c1", "user_id": "alice"}
    first, second = (
        read_instance(
            id=_fresh("i-0aa"),
            instance_type=_fresh("t3.medium"),
            availability_zone=_fresh(ZONE_A),
            state=_fresh("running"),
            launched_at=NOW,
            tags={_fresh(key): _fresh(value) for key, value in tags.items()},
        )
        for _ in range(2)
    )
    nodes = [
        read_node(
            id="n1",
            hostname="h1",
            state=_fresh("ready"),
            availability=_fresh("active"),
            role=_fresh("worker"),
            resources=Resources(),
            labels={_fresh("user_id"): "alice"},
            engine_labels={},
        )
        for _ in range(2)
    ]

    assert dict(first.tags) == dict(second.tags) == tags
    assert all(a is b for a, b in zip(first.tags, second.tags, strict=True))  # one key object, not one per reading
    for field in ("instance_type", "availability_zone", "state"):
        assert getattr(first, field) is getattr(second, field)
    for field in ("state", "role", "availability"):
        assert getattr(nodes[0], field) is getattr(nodes[1], field)
    assert next(iter(nodes[0].labels)) is next(iter(nodes[1].labels))
