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
    fill: str | None = "",
    cache: CachePolicy = GROWING,
    owner_of_task: Owner = ALICE_N1,
    task_state: str = "running",
    volume_tags: dict[str, str] | None = None,
    attachment_state: str = "attached",
    mounted: bool = True,
) -> tuple[Instance, Node, Volume, Task]:
    """Alice's running machine with her volume vol-a attached and mounted, its node reporting `fill` ("": 85 % of a file
    system as large as the volume), her task on it."""
    fill = f"vol-a:85:{size_gib * 1024}" if fill == "" else fill
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


def test_without_a_max_size_above_the_start_size_a_smaller_volume_does_not_grow_to_todays_start_size() -> None:
    """Issue 42: a 10 GiB volume, made while its group's cache_size_gib was 10, grew to today's 20 without any
    cache_max_size_gib (the docs: no maximum, no growth); so it did with a maximum at or below the start size."""
    for cache in (
        CACHE_ON,
        dataclasses.replace(CACHE_ON, max_size_gib=20),
        dataclasses.replace(CACHE_ON, max_size_gib=15),
    ):
        assert grown(plan_of(machine(size_gib=10, cache=cache))) == [], cache


def test_a_volume_whose_file_system_did_not_take_up_its_last_growth_is_not_grown_again_and_ops_are_told() -> None:
    """Issue 42: a file system that did not grow kept reporting full, and the volume grew every six hours to its cap.
    The node reports its file system's size: 20 GiB on a 40 GiB volume did not take up the growth."""
    old = {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - GROW_COOLDOWN_S - 1)}
    untaken = plan_of(machine(size_gib=40, fill="vol-a:90:20480", volume_tags=old))
    assert grown(untaken) == []
    assert any("vol-a" in n and "did not take up the last growth" in n for n in untaken.notices), untaken.notices

    assert grown(plan_of(machine(size_gib=40, fill=f"vol-a:90:{39 * 1024}", volume_tags=old))) == []  # a GiB short
    for fs_mib in (40 * 1024, 39 * 1024 + 1):  # taken up (an XFS may leave less than a GiB of the disk unused)
        [grow] = grown(plan_of(machine(size_gib=40, fill=f"vol-a:90:{fs_mib}", volume_tags=old)))
        assert (grow.from_gib, grow.to_gib) == (40, 80)


def test_a_node_that_reports_no_file_system_size_lets_a_volume_grow_once_not_again() -> None:
    """A node script of an earlier release writes `<volume>:<percent>`: whether a growth was taken up cannot be told,
    so a volume grown before is not grown again (and ops are told); a volume never grown may grow once."""
    assert len(grown(plan_of(machine(fill="vol-a:90")))) == 1
    old = {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - GROW_COOLDOWN_S - 1)}
    result = plan_of(machine(size_gib=40, fill="vol-a:90", volume_tags=old))
    assert grown(result) == []
    said = "does not report its file system's size (a node script of an earlier release), so whether the file system"
    assert any("vol-a" in n and said in n and n.endswith("cannot be told") for n in result.notices), result.notices


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
    start_gib=st.integers(1, 16_384),
    max_size_gib=st.none() | st.integers(1, 16_384),
    factor=st.floats(1.0, 16.0, exclude_min=True),
    percent=st.integers(0, 100),
    grown_ago_s=st.none() | st.integers(-86_400, 2 * 86_400),
    filesystem_short_mib=st.none() | st.sampled_from((0, 1, 1023, 1024, 4096)),
)
def test_a_growth_is_larger_within_the_limit_and_only_when_every_condition_holds(
    size_gib: int,
    start_gib: int,
    max_size_gib: int | None,
    factor: float,
    percent: int,
    grown_ago_s: int | None,
    filesystem_short_mib: int | None,
) -> None:
    """The oracle from the documented rules, not from the code's own limit: a group's cache_max_size_gib above its
    cache_size_gib lets a volume grow up to it; without one, or at or below the start size, nothing grows (docs,
    "Cache volumes that grow"). `filesystem_short_mib`: how much smaller than the volume its node says its file
    system is (None: a node that does not say)."""
    grown_at = {} if grown_ago_s is None else {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - grown_ago_s)}
    cache = dataclasses.replace(CACHE_ON, size_gib=start_gib, max_size_gib=max_size_gib)
    fill = f"vol-a:{percent}"
    if filesystem_short_mib is not None:
        fill += f":{max(0, size_gib * 1024 - filesystem_short_mib)}"
    parts = machine(size_gib=size_gib, fill=fill, cache=cache, volume_tags=grown_at)

    grows = grown(plan_of(parts, cache_grow_factor=factor))

    allowed = max_size_gib is not None and max_size_gib > start_gib and max_size_gib > size_gib
    rested = grown_ago_s is None or grown_ago_s >= GROW_COOLDOWN_S
    # Every growth adds a GiB or more: less short is rounding. Without a size: never grown, or it cannot be told.
    taken_up = grown_ago_s is None if filesystem_short_mib is None else filesystem_short_mib < 1024
    expected = percent >= 80 and allowed and rested and taken_up
    assert len(grows) == int(expected)
    for grow in grows:
        assert max_size_gib is not None
        assert grow.from_gib == size_gib < grow.to_gib <= max_size_gib


def test_a_volume_with_nothing_to_grow_for_says_nothing_each_cycle() -> None:
    """Ops read notices: a volume that is simply not full, not mounted, not yet attached, idle, of a group that does not
    grow volumes, or within its six hours is no news (one notice per cycle per volume would drown the rest)."""
    recent = {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - 60)}
    quiet = {
        "not full": machine(fill="vol-a:10:20480"),
        "another volume's figure": machine(fill="vol-old:99:20480"),
        "not mounted": machine(mounted=False),
        "attaching": machine(attachment_state="attaching"),
        "nobody works": machine(task_state="complete"),
        "another owner works": machine(owner_of_task=BOB_N1),
        "no growth for its group": machine(cache=CACHE_ON),
        "within six hours": machine(volume_tags=recent),
    }
    for said, parts in quiet.items():
        result = plan_of(parts)
        # (Bob's task on Alice's node is told as a foreign task: that notice is the planner's, not growth's.)
        notices = [n for n in result.notices if not n.startswith("task t1 ")]
        assert (grown(result), notices) == ([], []), said
