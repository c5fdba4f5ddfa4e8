"""plan()'s wiring (plan/__init__.py): held volumes, a returning owner's launch, notices, in_flight."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import CreateVolume, DeleteVolume, Launch, TagVolume
from warmswarm_models import VOLUME_EXPIRES_AT_TAG, VOLUME_RELEASED_AT_TAG, VOLUME_TTL_TAG, CachePolicy

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
    running_task,
    snapshot,
    volume,
)

LONGER = CachePolicy(enabled=True, ttl_s=7200, size_gib=20, volume_type="gp3")


# -- volumes the janitor leaves alone this cycle -----------------------------------------------------------


def test_a_volume_a_machine_with_its_disks_names_is_never_released_and_one_gone_for_good_is() -> None:
    """A stopped machine may be started again and mount its volume: releasing it would let it expire under
    the machine. A machine shutting down or terminated will never mount it again."""
    for state, released in [
        ("pending", False),
        ("running", False),
        ("stopping", False),
        ("stopped", False),
        ("shutting-down", True),
        ("terminated", True),
    ]:
        machine = instance("i-1", ALICE_N1, state=state, launched_at=NOW - 60, volume_id="vol-a")
        result = run(snapshot(instances=[machine], volumes=[volume("vol-a")]))
        releases = [t for t in actions_of(result, TagVolume) if VOLUME_RELEASED_AT_TAG in t.set_tags]
        assert bool(releases) is released, state


def test_an_expired_volume_whose_returning_owner_cannot_launch_yet_is_neither_deleted_nor_retagged() -> None:
    """The owner is back: their data must wait for a launch (here for capacity in the volume's zone)."""
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)
    full = {(name, ZONE_A): NOW + 300 for name in ("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge")}

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[expired], unavailable=full))

    assert actions_of(result, DeleteVolume) == []
    assert actions_of(result, Launch) == []
    assert [t.set_tags for t in actions_of(result, TagVolume)] == [{}]  # only its release tags cleared


def test_an_owner_without_cache_work_does_not_hold_their_expired_volume() -> None:
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)

    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1)], volumes=[expired]))

    assert [d.volume_id for d in actions_of(result, DeleteVolume)] == ["vol-a"]
    assert only(result, Launch).volume_id is None


# -- a returning owner's launch ----------------------------------------------------------------------------


def test_a_launch_with_the_volume_retags_its_ttl_from_the_owners_cache_policy_even_beside_cache_off_work() -> None:
    """The owner's current policy decides how long the volume is kept once they leave again; their cache-off
    task on the same machine (sorted first) has no say in it."""
    kept = volume("vol-a", ttl_s=3600)
    plain = pending_task("t-a", ALICE_N1, cpus=1.0)
    cached = cached_task("t-b", cache=LONGER, cpus=0.5)

    result = run(snapshot(tasks=[plain, cached], volumes=[kept]))

    launch = only(result, Launch)
    assert (launch.task_ids, launch.volume_id) == (("t-a", "t-b"), "vol-a")
    assert actions_of(result, TagVolume) == [
        TagVolume("vol-a", {VOLUME_TTL_TAG: "7200"}, (), "the owner's cache policy now keeps it 7200 s after release")
    ]


def test_a_launch_with_the_volume_of_an_unchanged_policy_retags_nothing_but_its_release() -> None:
    released = volume("vol-a", ttl_s=3600, released_at=NOW - 60, expires_at=NOW + 3540)

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[released]))

    assert only(result, Launch).volume_id == "vol-a"
    assert actions_of(result, TagVolume) == [
        TagVolume(
            "vol-a", {}, (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG), "its owner is back: vol-a no longer expires"
        )
    ]


def test_a_new_volume_is_created_for_a_returning_owner_with_its_policys_size_type_and_ttl() -> None:
    policy = CachePolicy(enabled=True, ttl_s=900, size_gib=50, volume_type="io2")

    create = only(run(snapshot(tasks=[cached_task("t1", cache=policy)])), CreateVolume)

    assert (create.owner, create.availability_zone, create.size_gib, create.volume_type, create.ttl_s) == (
        ALICE_N1,
        ZONE_A,
        50,
        "io2",
        900,
    )
    assert create.reason == f"{ALICE_N1} needs a cache and has no volume: 50 GiB io2 in {ZONE_A}"


# -- notices and what is on its way ------------------------------------------------------------------------


def test_the_clock_ahead_notice_comes_after_the_others() -> None:
    mine = instance("i-21", ALICE)
    node = node_of(mine)
    stray = running_task("stray.1", node)  # nobody's task on alice's node: a notice of its own
    snap = dataclasses.replace(snapshot(nodes=[node], instances=[mine], tasks=[stray]), aws_now=NOW - 600)

    notices = run(snap, make_policy(max_clock_skew_s=60.0)).notices

    assert len(notices) == 2
    assert notices[0].startswith("task stray.1 of service service-stray.1 runs on node")
    assert notices[1].startswith("this replica's clock is 600 s ahead of AWS's")


def test_in_flight_lists_the_live_machines_whose_nodes_have_not_joined_in_snapshot_order() -> None:
    joined = instance("i-1", ALICE)
    booting = instance("i-3", BOB, state="pending", launched_at=NOW - 10)
    running_not_joined = instance("i-2", ALICE, launched_at=NOW - 20)
    stopped = instance("i-4", BOB, state="stopped")
    gone = instance("i-5", BOB, state="shutting-down")

    result = run(snapshot(nodes=[node_of(joined)], instances=[joined, booting, running_not_joined, stopped, gone]))

    assert result.in_flight == ("i-3", "i-2")


def test_a_plan_with_work_waiting_tells_the_loop_to_look_again_soon() -> None:
    waiting = run(snapshot(tasks=[pending_task("t1", ALICE)]))
    at_rest = run(snapshot())

    assert (waiting.busy, at_rest.busy) == (True, False)
