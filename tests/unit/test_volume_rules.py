"""The cache volumes' rules (plan/volumes.py), called directly: which volume a machine carries or why its owner
waits, what the janitor tags and deletes, and what an operator's early expiry refuses. Every reason is read by
people (in the status, the decisions and the API's refusals), so each is checked for what it says."""

from __future__ import annotations

from warmswarm_autoscaling.actions import Action, DeleteVolume, TagVolume
from warmswarm_autoscaling.plan.volumes import (
    Refused,
    choose_volume,
    deletable,
    expire_now,
    volume_actions,
)
from warmswarm_autoscaling.snapshot import Volume
from warmswarm_models import (
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    format_timestamp,
)
from warmswarm_models.cache import MAX_CACHE_TTL_S

from .factories import ALICE_N1, CLUSTER, NOW, attachment, instance, make_policy, volume

POLICY = make_policy()


def test_a_volume_in_use_by_a_live_machine_makes_its_owner_wait_for_it() -> None:
    held = volume("vol-a", state="in-use", attached_to=[attachment("i-live")])
    live = {"i-live": instance("i-live", ALICE_N1)}

    choice = choose_volume(ALICE_N1, [held], live, set())

    assert choice.volume is None
    assert not choice.create
    assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is still attached to i-live"


def test_a_volume_still_on_a_machine_that_is_gone_is_waited_for_as_detaching() -> None:
    held = volume("vol-a", state="in-use", attached_to=[attachment("i-gone")])

    choice = choose_volume(ALICE_N1, [held], {}, set())

    assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is still detaching from i-gone"


def test_a_volume_in_a_passing_state_is_waited_for_by_name() -> None:
    for state in ("in-use", "modifying"):
        choice = choose_volume(ALICE_N1, [volume("vol-a", state=state)], {}, set())
        assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is {state}"
        assert not choice.create


def test_only_a_volume_that_is_gone_for_good_is_replaced() -> None:
    for state in ("deleting", "deleted", "error"):
        choice = choose_volume(ALICE_N1, [volume("vol-a", state=state)], {}, set())
        assert choice.create, state
        assert choice.wait_reason == ""


def test_a_volume_reserved_by_a_machine_on_its_way_is_waited_for() -> None:
    choice = choose_volume(ALICE_N1, [volume("vol-a")], {}, {"vol-a"})

    assert choice.wait_reason == "cache volume vol-a is reserved for a machine on its way"


# -- the janitor -------------------------------------------------------------------------------------------


def actions_for(v: Volume, *, deletes_refused: bool = False) -> list[Action]:
    return volume_actions([v], {}, set(), {}, POLICY, NOW, deletes_refused=deletes_refused)


def test_a_newly_released_volume_is_tagged_with_its_release_and_expiry() -> None:
    (tag,) = actions_for(volume("vol-a", ttl_s=600))

    assert tag == TagVolume(
        "vol-a",
        {VOLUME_RELEASED_AT_TAG: format_timestamp(NOW), VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 600)},
        (),
        "vol-a was released; kept 600 s for its owner",
    )


def test_an_expiry_beyond_any_ttl_is_written_again_and_one_just_within_is_kept() -> None:
    beyond = volume("vol-a", released_at=NOW, expires_at=NOW + MAX_CACHE_TTL_S + 1)
    within = volume("vol-b", released_at=NOW, expires_at=NOW + MAX_CACHE_TTL_S)

    assert [type(a) for a in actions_for(beyond)] == [TagVolume]
    assert actions_for(within) == []


def test_an_expired_volume_is_deleted_saying_when_it_expired() -> None:
    (delete,) = actions_for(volume("vol-a", released_at=NOW - 700, expires_at=NOW - 100))

    assert delete == DeleteVolume(
        "vol-a", f"vol-a was not claimed by its owner before it expired at {format_timestamp(NOW - 100)}"
    )
    assert actions_for(volume("vol-a", released_at=NOW - 700, expires_at=NOW - 100), deletes_refused=True) == []


def test_an_owner_back_clears_the_release_tags_even_when_only_one_was_readable() -> None:
    for tags in ({VOLUME_RELEASED_AT_TAG: format_timestamp(NOW - 60)}, {VOLUME_EXPIRES_AT_TAG: "not a time"}):
        back = volume("vol-a", state="in-use", attached_to=[attachment("i-1")], tags=tags)
        (clear,) = actions_for(back)
        assert clear == TagVolume(
            "vol-a", {}, (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG), "its owner is back: vol-a no longer expires"
        )


def test_a_volume_in_use_without_release_tags_is_left_alone() -> None:
    assert actions_for(volume("vol-a", state="in-use", attached_to=[attachment("i-1")])) == []


def test_an_available_volume_still_listing_an_attachment_is_not_released() -> None:
    between = volume("vol-a", attached_to=[attachment("i-1", state="detaching")])

    assert actions_for(between) == []


def test_an_owner_whose_policy_changed_gets_the_new_ttl_tagged() -> None:
    kept = volume("vol-a", ttl_s=600, state="in-use", attached_to=[attachment("i-1")])

    actions = list(
        volume_actions(
            [kept], {}, set(), {"vol-a": CachePolicy(enabled=True, ttl_s=7200)}, POLICY, NOW, deletes_refused=False
        )
    )

    assert actions == [
        TagVolume("vol-a", {VOLUME_TTL_TAG: "7200"}, (), "the owner's cache policy now keeps it 7200 s after release")
    ]


def test_what_keeps_a_volume_from_the_janitor_is_said() -> None:
    assert deletable(volume("vol-a", state="in-use", attached_to=[attachment("i-1")]), NOW) == (
        "vol-a is in-use and attached to i-1"
    )
    assert deletable(volume("vol-a", state="creating"), NOW) == "vol-a is creating"
    assert deletable(volume("vol-a", attached_to=[attachment("i-1")], expires_at=NOW - 1), NOW) == (
        "vol-a is available and attached to i-1"
    )
    assert deletable(volume("vol-a", expires_at=NOW - 1), NOW) is None


# -- an operator's early expiry ----------------------------------------------------------------------------


def test_an_operators_expiry_tags_the_volume_to_expire_now() -> None:
    decided = expire_now("vol-a", CLUSTER, [volume("vol-a")], [], NOW)

    assert decided == TagVolume(
        "vol-a", {VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW)}, (), "an operator asked for vol-a to expire now"
    )


def test_an_operators_expiry_of_a_volume_in_use_says_when_it_can() -> None:
    decided = expire_now("vol-a", CLUSTER, [volume("vol-a", attached_to=[attachment("i-1")])], [], NOW)

    assert decided == Refused(
        "volume vol-a is attached to i-1: it is in use by its owner's machine; it can expire once that machine is gone"
        " and the volume is available"
    )


def test_an_operators_expiry_of_a_volume_a_starting_machine_waits_for_is_refused() -> None:
    starting = instance("i-new", ALICE_N1, state="pending", volume_id="vol-a")
    other = instance("i-other", ALICE_N1, state="running", volume_id="vol-b")
    gone = instance("i-gone", ALICE_N1, state="shutting-down", volume_id="vol-a")

    refused = expire_now("vol-a", CLUSTER, [volume("vol-a")], [other, starting], NOW)
    allowed = expire_now("vol-a", CLUSTER, [volume("vol-a")], [other, gone], NOW)

    assert refused == Refused(
        "volume vol-a is reserved for instance i-new, which is starting for its owner and will attach it"
    )
    assert isinstance(allowed, TagVolume)
