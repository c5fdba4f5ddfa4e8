"""Cache volumes that grow online (plan/grow.py): only a volume its owner's running machine reports full for that very
volume, while the owner works, below the owner's largest size and outside AWS's six hours; the new size; and what
an unreadable label or tag says instead of a growth. Each is checked through plan()."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_autoscaling.actions import GrowVolume
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.grow import GROW_COOLDOWN_S
from warmswarm_autoscaling.snapshot import Instance, Node, Task, Volume
from warmswarm_models import VOLUME_GROWN_AT_TAG, CachePolicy, Owner, format_timestamp

from .factories import (
    ALICE_N1,
    BOB_N1,
    CACHE_ON,
    NOW,
    actions_of,
    attachment,
    instance,
    make_policy,
    node_of,
    run,
    running_task,
    snapshot,
    volume,
)

GROWING = dataclasses.replace(CACHE_ON, max_size_gib=100)  # 20 GiB, may grow to 100


def machine(
    *,
    size_gib: int = 20,
    fill: str | None = "vol-a:85",
    cache: CachePolicy = GROWING,
    owner_of_task: Owner = ALICE_N1,
    task_state: str = "running",
    volume_tags: dict[str, str] | None = None,
    attachment_state: str = "attached",
    mounted: bool = True,
) -> tuple[Instance, Node, Volume, Task]:
    """Alice's running machine with her volume vol-a attached and mounted, its node reporting `fill`, her task on it."""
    alice = instance("i-0aa", ALICE_N1, volume_id="vol-a")
    node = node_of(alice, cache_fill=fill, mounted=mounted)
    vol = volume(
        "vol-a",
        state="in-use",
        size_gib=size_gib,
        attached_to=[attachment("i-0aa", state=attachment_state)],
        tags=volume_tags,
    )
    task = running_task("t1", node, owner_of_task, state=task_state, service_labels=cache.to_labels())
    return alice, node, vol, task


def plan_of(parts: tuple[Instance, Node, Volume, Task], **policy: object) -> Plan:
    alice, node, vol, task = parts
    return run(snapshot(instances=[alice], nodes=[node], volumes=[vol], tasks=[task]), make_policy(**policy))


def grown(result: Plan) -> list[GrowVolume]:
    return actions_of(result, GrowVolume)


def test_a_full_volume_of_a_working_owner_doubles() -> None:
    [grow] = grown(plan_of(machine()))
    assert (grow.volume_id, grow.from_gib, grow.to_gib) == ("vol-a", 20, 40)
    assert "85% full" in grow.reason
    assert "100 GiB" in grow.reason


@pytest.mark.parametrize(
    ("size_gib", "factor", "to_gib"),
    [
        (20, 2.0, 40),
        (60, 2.0, 100),  # capped at the owner's largest size
        (99, 2.0, 100),
        (20, 1.01, 21),  # at least 1 GiB more: ceil(20.2) = 21
        (1, 1.1, 2),  # ceil(1.1) = 2
        (3, 1.5, 5),  # ceil(4.5)
    ],
)
def test_the_new_size_is_the_factor_at_least_one_more_at_most_the_limit(
    size_gib: int, factor: float, to_gib: int
) -> None:
    [grow] = grown(plan_of(machine(size_gib=size_gib), cache_grow_factor=factor))
    assert (grow.from_gib, grow.to_gib) == (size_gib, to_gib)


def test_below_the_threshold_nothing_grows_at_it_it_does() -> None:
    assert grown(plan_of(machine(fill="vol-a:79"), cache_grow_at_percent=80)) == []
    assert len(grown(plan_of(machine(fill="vol-a:80"), cache_grow_at_percent=80))) == 1


def test_a_fill_reported_for_another_volume_is_never_read_for_this_one() -> None:
    assert grown(plan_of(machine(fill="vol-old:99"))) == []


def test_a_volume_not_mounted_in_this_boot_or_not_yet_attached_does_not_grow() -> None:
    assert grown(plan_of(machine(mounted=False))) == []
    assert grown(plan_of(machine(attachment_state="attaching"))) == []


def test_nothing_grows_while_nobody_works_or_for_another_owners_task() -> None:
    assert grown(plan_of(machine(task_state="complete"))) == []
    assert grown(plan_of(machine(owner_of_task=BOB_N1))) == []


def test_a_group_without_a_larger_size_never_grows_and_says_nothing() -> None:
    result = plan_of(machine(cache=CACHE_ON))
    assert grown(result) == []
    assert not [n for n in result.notices if "vol-a" in n]


def test_a_volume_at_its_largest_size_is_not_grown_and_ops_are_told() -> None:
    result = plan_of(machine(size_gib=100))
    assert grown(result) == []
    assert any("vol-a" in n and "the largest" in n for n in result.notices), result.notices


def test_a_volume_grown_within_six_hours_is_not_asked_again_after_them_it_is() -> None:
    recent = {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - GROW_COOLDOWN_S + 60)}
    assert grown(plan_of(machine(volume_tags=recent))) == []
    old = {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - GROW_COOLDOWN_S - 1)}
    assert len(grown(plan_of(machine(volume_tags=old)))) == 1


def test_an_unreadable_grown_at_tag_grows_nothing_and_says_why() -> None:
    result = plan_of(machine(volume_tags={VOLUME_GROWN_AT_TAG: "yesterday"}))
    assert grown(result) == []
    assert any(VOLUME_GROWN_AT_TAG in n and "cannot be read" in n for n in result.notices), result.notices


def test_a_grown_at_tag_far_ahead_of_awss_clock_grows_nothing_and_says_so() -> None:
    result = plan_of(machine(volume_tags={VOLUME_GROWN_AT_TAG: format_timestamp(NOW + 86_400)}))
    assert grown(result) == []
    assert any("ahead of AWS's clock" in n for n in result.notices), result.notices


@pytest.mark.parametrize(
    "label", ["85", "vol-a:", "vol-a:eighty", "vol-a:101", "vol-a:-5", ":85", "vol-a:" + "9" * 5000]
)
def test_an_unreadable_fill_label_grows_nothing_and_names_the_node(label: str) -> None:
    result = plan_of(machine(fill=label))
    assert grown(result) == []
    assert any("node-i-0aa" in n and "warmswarm.cache-fill" in n for n in result.notices), result.notices


def test_the_largest_limit_among_the_owners_running_tasks_applies() -> None:
    alice, node, vol, task = machine()
    larger = running_task(
        "t2", node, ALICE_N1, service_labels=dataclasses.replace(CACHE_ON, max_size_gib=400).to_labels()
    )
    result = run(snapshot(instances=[alice], nodes=[node], volumes=[vol], tasks=[task, larger]))
    assert [(g.from_gib, g.to_gib) for g in grown(result)] == [(20, 40)]
    assert "400 GiB" in grown(result)[0].reason


@given(
    size_gib=st.integers(1, 16_384),
    max_size_gib=st.integers(1, 16_384),
    factor=st.floats(1.0, 16.0, exclude_min=True),
    percent=st.integers(0, 100),
    grown_ago_s=st.none() | st.integers(-86_400, 2 * 86_400),
)
def test_a_growth_is_larger_within_the_limit_and_only_when_every_condition_holds(
    size_gib: int, max_size_gib: int, factor: float, percent: int, grown_ago_s: int | None
) -> None:
    grown_at = {} if grown_ago_s is None else {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - grown_ago_s)}
    cache = dataclasses.replace(CACHE_ON, max_size_gib=max_size_gib)
    parts = machine(size_gib=size_gib, fill=f"vol-a:{percent}", cache=cache, volume_tags=grown_at)

    grows = grown(plan_of(parts, cache_grow_factor=factor))

    # The limit is the group's max, never below its start size: a volume made smaller (under an earlier size_gib) may
    # grow to today's start size (CachePolicy.grow_limit_gib).
    limit_gib = max(cache.size_gib, max_size_gib)
    expected = percent >= 80 and limit_gib > size_gib and (grown_ago_s is None or grown_ago_s >= GROW_COOLDOWN_S)
    assert len(grows) == int(expected)
    for grow in grows:
        assert grow.from_gib == size_gib < grow.to_gib <= limit_gib
