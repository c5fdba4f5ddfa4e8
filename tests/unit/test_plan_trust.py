"""The planner's trust rules: odd tags keep nothing forever and crash nothing, a wrong clock deletes nothing,
tokens come from the decision, one attach per volume, and a node is an instance's only at its address."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import (
    Activate,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    Drain,
    LabelNode,
    Launch,
    TagVolume,
)
from warmswarm_autoscaling.snapshot import Snapshot
from warmswarm_models import (
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_PINNED_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    format_timestamp,
)
from warmswarm_models.cache import DEFAULT_CACHE_TTL_S

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    NOW,
    ZONE_A,
    actions_of,
    cached_task,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    volume,
    waiting_for,
)

YEAR_S = 365 * 86_400


def _release_tags(result_actions: list[TagVolume]) -> dict[str, str]:
    (tag,) = [t for t in result_actions if VOLUME_EXPIRES_AT_TAG in t.set_tags]
    return dict(tag.set_tags)


# -- odd tags keep nothing forever -------------------------------------------------------------------


def test_an_unreadable_expiry_is_treated_as_absent_and_rewritten() -> None:
    odd = volume("vol-1", released_at=NOW - 60, expires_at="next tuesday", ttl_s=3600)

    result = run(snapshot(volumes=[odd]))

    assert _release_tags(actions_of(result, TagVolume)) == {
        VOLUME_RELEASED_AT_TAG: format_timestamp(NOW),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 3600),
    }
    assert actions_of(result, DeleteVolume) == []


def test_an_absurdly_far_expiry_is_treated_as_absent_and_rewritten() -> None:
    far = volume("vol-1", released_at=NOW - 60, expires_at=NOW + 50 * YEAR_S, ttl_s=3600)

    result = run(snapshot(volumes=[far]))

    assert _release_tags(actions_of(result, TagVolume))[VOLUME_EXPIRES_AT_TAG] == format_timestamp(NOW + 3600)


def test_an_unreadable_ttl_is_treated_as_absent_and_rewritten_with_the_release() -> None:
    odd_ttl = volume("vol-1", ttl_s=None, tags={VOLUME_TTL_TAG: "forever"})

    result = run(snapshot(volumes=[odd_ttl]))

    assert _release_tags(actions_of(result, TagVolume)) == {
        VOLUME_RELEASED_AT_TAG: format_timestamp(NOW),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + DEFAULT_CACHE_TTL_S),
        VOLUME_TTL_TAG: str(DEFAULT_CACHE_TTL_S),
    }


def test_a_pinned_volume_is_never_deleted_however_expired() -> None:
    pinned = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600, tags={VOLUME_PINNED_TAG: "true"})

    result = run(snapshot(volumes=[pinned]))

    assert actions_of(result, DeleteVolume) == []


def test_an_unpinned_expired_volume_is_still_deleted() -> None:
    unpinned = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600, tags={VOLUME_PINNED_TAG: "false"})

    assert only(run(snapshot(volumes=[unpinned])), DeleteVolume).volume_id == "vol-1"


def test_a_volume_in_a_zone_that_is_not_configured_makes_only_its_owner_wait() -> None:
    elsewhere = volume("vol-1", ALICE_N1, zone="eu-west-1c")
    alice = cached_task("t-alice", ALICE_N1)
    bob = pending_task("t-bob", BOB)

    result = run(snapshot(tasks=[alice, bob], volumes=[elsewhere]))

    reason = waiting_for(result, "t-alice").reason
    assert "eu-west-1c" in reason
    assert "AUTOSCALING_AVAILABILITY_ZONES" in reason
    assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]


# -- a wrong clock deletes nothing ----------------------------------------------------------------------


def test_the_janitor_refuses_to_delete_while_this_clock_is_ahead_of_aws_and_says_so() -> None:
    expired = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600)
    ahead = dataclasses.replace(snapshot(volumes=[expired]), aws_now=NOW - 600)

    result = run(ahead, make_policy(max_clock_skew_s=60.0))

    assert actions_of(result, DeleteVolume) == []
    assert any("600 s ahead of AWS" in notice for notice in result.notices), result.notices


def test_the_janitor_deletes_when_the_clocks_agree_within_the_bound() -> None:
    expired = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600)
    close: Snapshot = dataclasses.replace(snapshot(volumes=[expired]), aws_now=NOW - 5)

    assert only(run(close, make_policy(max_clock_skew_s=60.0)), DeleteVolume).volume_id == "vol-1"


# -- nothing twice ----------------------------------------------------------------------------------------


def test_a_launchs_token_is_the_same_at_any_later_moment() -> None:
    task = pending_task("t1", ALICE)
    policy = make_policy(max_start_s=60.0)

    tokens = {only(run(snapshot(tasks=[task], now=NOW + delay_s), policy), Launch).client_token for delay_s in (0, 61)}

    assert len(tokens) == 1


def test_a_volumes_token_is_the_same_at_any_later_moment() -> None:
    task = cached_task("t1", ALICE_N1)
    policy = make_policy(max_start_s=60.0)

    tokens = {
        only(run(snapshot(tasks=[task], now=NOW + delay_s), policy), CreateVolume).client_token
        for delay_s in (0, 61, 3 * 86_400)
    }

    assert len(tokens) == 1


def test_a_spent_token_makes_the_next_launch_of_that_decision_a_new_one() -> None:
    task = pending_task("t1", ALICE)
    first = only(run(snapshot(tasks=[task])), Launch).client_token

    spent = dataclasses.replace(snapshot(tasks=[task]), spent_tokens=frozenset({first}))
    second = only(run(spent), Launch).client_token

    assert second != first
    again = dataclasses.replace(snapshot(tasks=[task]), spent_tokens=frozenset({first}))
    assert only(run(again), Launch).client_token == second, "the next generation is itself stable"


def test_one_cycle_never_attaches_one_volume_twice() -> None:
    # Two machines that both name the volume (a duplicate, or an edited tag): one attach, to the first.
    shared = volume("vol-1", ALICE_N1)
    first = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 60)
    second = instance("i-02", ALICE_N1, volume_id="vol-1", launched_at=NOW - 30)

    result = run(snapshot(instances=[second, first], volumes=[shared]))

    attach = only(result, AttachVolume)
    assert (attach.volume_id, attach.instance_id) == ("vol-1", "i-01")


# -- one node per instance --------------------------------------------------------------------------------


def test_a_node_is_labelled_only_when_it_is_seen_at_its_instances_address() -> None:
    machine = instance("i-01", ALICE, zone=ZONE_A)
    impostor = node_of(machine, node_id="impostor", labelled=False, addr="10.9.9.9")

    result = run(snapshot(nodes=[impostor], instances=[machine]))

    assert actions_of(result, LabelNode) == []
    assert any("impostor" in notice and "10.9.9.9" in notice for notice in result.notices), result.notices


def test_a_second_node_claiming_an_instance_is_never_labelled_and_is_reported() -> None:
    machine = instance("i-01", ALICE, zone=ZONE_A)
    real = node_of(machine, node_id="real", labelled=False)
    second = node_of(machine, node_id="second", labelled=False, addr="10.9.9.9")

    result = run(snapshot(nodes=[second, real], instances=[machine]))

    assert [label.node_id for label in actions_of(result, LabelNode)] == ["real"]
    assert any("second" in notice for notice in result.notices), result.notices


# -- mounted on every boot, or no cache work ----------------------------------------------------------------


def test_a_node_up_without_its_cache_mounted_is_drained_with_the_reason() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    rebooted = node_of(machine, mounted=False)  # labelled and active from before; this boot had no mount

    result = run(snapshot(nodes=[rebooted], instances=[machine], volumes=[volume("vol-1", attached_to=[])]))

    drain = only(result, Drain)
    assert drain.node_id == rebooted.id
    assert "did not mount volume vol-1" in drain.reason


def test_cache_work_is_never_matched_to_a_node_without_its_mount() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    drained = node_of(machine, mounted=False, availability="drain")
    task = cached_task("t1", ALICE_N1)

    result = run(snapshot(nodes=[drained], instances=[machine], tasks=[task], volumes=[volume("vol-1")]))

    assert actions_of(result, Activate) == []
    assert not waiting_for(result, "t1").reason.startswith("node")


def test_a_joined_node_without_its_mount_is_labelled_but_left_drained() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    joined = node_of(machine, labelled=False, mounted=False)

    label = only(run(snapshot(nodes=[joined], instances=[machine])), LabelNode)

    assert label.activate is False
    assert "did not mount cache volume vol-1" in label.reason


def test_a_joined_node_with_its_mount_is_labelled_and_activated() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")

    label = only(run(snapshot(nodes=[node_of(machine, labelled=False)], instances=[machine])), LabelNode)

    assert label.activate is True
