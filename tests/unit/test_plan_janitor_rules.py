"""Cache volumes (plan/volumes.py): attach, unstick, the janitor, the clock-ahead refusal, an operator's expiry."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import AttachVolume, DeleteVolume, DetachVolume, TagVolume
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.volumes import Refused, expire_now
from warmswarm_autoscaling.snapshot import Instance, Volume
from warmswarm_models import VOLUME_EXPIRES_AT_TAG, format_timestamp

from .factories import (
    ALICE_N1,
    BOB_N1,
    CLUSTER,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    attachment,
    instance,
    make_policy,
    run,
    snapshot,
    volume,
)


def volumes_plan(instances: list[Instance], volumes: list[Volume], **policy: float) -> Plan:
    return run(snapshot(instances=instances, volumes=volumes), make_policy(**policy))


# -- attaching what a machine waits for --------------------------------------------------------------------


def test_a_running_machine_gets_its_owners_volume_attached_and_the_reason_says_so() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")

    result = volumes_plan([machine], [volume("vol-a")])

    assert actions_of(result, AttachVolume) == [
        AttachVolume("vol-a", "i-1", "/dev/sdf", "i-1 runs and waits for its owner's cache volume vol-a")
    ]


def test_a_volume_is_attached_only_when_everything_about_it_is_right() -> None:
    """Each case breaks one condition of an attach: attaching then would fail in AWS, or give one owner's data
    to another's machine."""
    cases = [
        ("machine pending", instance("i-1", ALICE_N1, state="pending", volume_id="vol-a"), volume("vol-a")),
        ("volume creating", instance("i-1", ALICE_N1, volume_id="vol-a"), volume("vol-a", state="creating")),
        ("other zone", instance("i-1", ALICE_N1, zone=ZONE_B, volume_id="vol-a"), volume("vol-a")),
        ("other owner", instance("i-1", BOB_N1, volume_id="vol-a"), volume("vol-a")),
        (
            "an attachment still listed",
            instance("i-1", ALICE_N1, volume_id="vol-a"),
            volume("vol-a", attached_to=[attachment("i-0", state="detaching")]),
        ),
        ("no such volume", instance("i-1", ALICE_N1, volume_id="vol-x"), volume("vol-a")),
    ]
    for name, machine, vol in cases:
        assert actions_of(volumes_plan([machine], [vol]), AttachVolume) == [], name

    detached = volume("vol-a", attached_to=[attachment("i-0", state="detached")])
    assert len(actions_of(volumes_plan([instance("i-1", ALICE_N1, volume_id="vol-a")], [detached]), AttachVolume)) == 1


def test_of_two_machines_naming_one_volume_the_first_launched_gets_it() -> None:
    older = instance("i-2", ALICE_N1, launched_at=NOW - 300, volume_id="vol-a")
    newer = instance("i-1", ALICE_N1, launched_at=NOW - 60, volume_id="vol-a")
    same_time = instance("i-0", ALICE_N1, launched_at=NOW - 300, volume_id="vol-a")

    assert [a.instance_id for a in actions_of(volumes_plan([newer, older], [volume("vol-a")]), AttachVolume)] == ["i-2"]
    # Launched at the same second: the lower id, so every replica decides alike.
    tied = volumes_plan([older, same_time], [volume("vol-a")])
    assert [a.instance_id for a in actions_of(tied, AttachVolume)] == ["i-0"]


def test_a_machine_naming_a_volume_that_is_gone_does_not_keep_the_others_from_theirs() -> None:
    lost = instance("i-1", ALICE_N1, launched_at=NOW - 300, volume_id="vol-gone")
    waiting = instance("i-2", BOB_N1, launched_at=NOW - 60, volume_id="vol-b")
    taken = instance("i-3", BOB_N1, launched_at=NOW - 30, volume_id="vol-b")  # a duplicate: the first one wins
    later = instance("i-4", ALICE_N1, launched_at=NOW - 10, volume_id="vol-a")

    result = volumes_plan([lost, waiting, taken, later], [volume("vol-b", BOB_N1), volume("vol-a")])

    assert [(a.volume_id, a.instance_id) for a in actions_of(result, AttachVolume)] == [
        ("vol-b", "i-2"),
        ("vol-a", "i-4"),
    ]


def test_an_attach_stuck_past_the_timeout_is_forced_off_and_the_reason_says_how_long() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")
    stuck = volume("vol-a", state="in-use", attached_to=[attachment("i-1", state="attaching", attached_at=NOW - 125)])

    result = volumes_plan([machine], [stuck], attach_timeout_s=120.5)
    in_time = volumes_plan([machine], [stuck], attach_timeout_s=125.0)

    assert actions_of(result, DetachVolume) == [
        DetachVolume(
            "vol-a",
            "i-1",
            True,
            "attach of vol-a to i-1 stuck in attaching for 125 s (attach_timeout_s=120.5); detaching to attach again",
        )
    ]
    assert actions_of(in_time, DetachVolume) == []


def test_an_attach_to_another_machine_is_not_this_machines_to_unstick() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")
    elsewhere = volume(
        "vol-a", state="in-use", attached_to=[attachment("i-9", state="attaching", attached_at=NOW - 999)]
    )

    assert actions_of(volumes_plan([machine], [elsewhere]), DetachVolume) == []


# -- the janitor and the clock -----------------------------------------------------------------------------


def expired(volume_id: str = "vol-a") -> Volume:
    return volume(volume_id, released_at=NOW - 7200, expires_at=NOW - 3600)


def test_a_clock_ahead_of_aws_deletes_nothing_and_the_notice_says_by_how_much_and_what_to_check() -> None:
    ahead = dataclasses.replace(snapshot(volumes=[expired()]), aws_now=NOW - 90.4)

    result = run(ahead, make_policy(max_clock_skew_s=30.5))

    assert actions_of(result, DeleteVolume) == []
    assert list(result.notices) == [
        "this replica's clock is 90 s ahead of AWS's (the Date of its last answer), more than max_clock_skew_s=30.5:"
        " the janitor deletes no cache volume until the clocks agree (check NTP on this machine)"
    ]


def test_a_clock_exactly_at_the_skew_bound_or_unknown_still_deletes() -> None:
    for aws_now in (NOW - 30.0, None, NOW + 100.0):
        snap = dataclasses.replace(snapshot(volumes=[expired()]), aws_now=aws_now)
        result = run(snap, make_policy(max_clock_skew_s=30.0))
        assert [d.volume_id for d in actions_of(result, DeleteVolume)] == ["vol-a"], aws_now
        assert result.notices == (), aws_now


def test_a_clock_ahead_still_lets_the_janitor_tag_releases() -> None:
    """Only deletes are refused: a release tagged by a clock ahead dates the expiry later, which keeps the data
    longer, never shorter."""
    fresh = volume("vol-b")
    snap = dataclasses.replace(snapshot(volumes=[expired(), fresh]), aws_now=NOW - 600)

    result = run(snap, make_policy(max_clock_skew_s=60.0))

    assert [t.volume_id for t in actions_of(result, TagVolume)] == ["vol-b"]


# -- an operator's early expiry ----------------------------------------------------------------------------


def test_an_operators_expiry_is_refused_with_the_reason_and_missing_only_when_there_is_no_such_volume() -> None:
    """The API answers 404 for `missing` and 409 for the rest: the flag and each reason are what the operator gets."""
    available = volume("vol-a")
    cases = [
        ("vol-x", [available], Refused(f"no cache volume vol-x in cluster {CLUSTER!r}", missing=True)),
        ("vol-x", [], Refused(f"no cache volume vol-x in cluster {CLUSTER!r}", missing=True)),
        (
            "vol-c",
            [available, volume("vol-c", state="creating")],
            Refused("volume vol-c is creating; only an available volume can expire"),
        ),
        (
            "vol-e",
            [volume("vol-e", state="error")],
            Refused("volume vol-e is error; only an available volume can expire"),
        ),
    ]
    for volume_id, volumes, refused in cases:
        decided = expire_now(volume_id, CLUSTER, volumes, [], NOW)
        assert decided == refused, volume_id
        assert isinstance(decided, Refused)
        assert decided.missing is refused.missing


def test_an_operators_expiry_tags_only_the_volume_asked_for() -> None:
    decided = expire_now("vol-b", CLUSTER, [volume("vol-a"), volume("vol-b", zone=ZONE_A)], [], NOW)

    assert decided == TagVolume(
        "vol-b", {VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW)}, (), "an operator asked for vol-b to expire now"
    )
