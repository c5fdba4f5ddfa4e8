"""Which clock each moment is read against (plan/clock.py): AWS's stamps and the deadlines kept in AWS's tags by AWS's
clock, written with the later of the two; the plan's own clocks by this replica's; the loop woken on its own clock.

Each test sets the replica's clock (`now`) and AWS's (`aws_now`) apart, as the fault campaign found them: a clock far
ahead gave up every booting machine at once and launched another in a loop, and one 30 s behind (within
max_clock_skew_s) wrote a release that let the janitor delete a volume 30 s before its TTL by AWS's clock.
"""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import DeleteVolume, ReleaseVolume, Terminate
from warmswarm_autoscaling.plan.clock import DeadlineClock
from warmswarm_autoscaling.snapshot import Snapshot

from .factories import (
    ALICE,
    BACKOFF_S,
    MAX_START_S,
    NOW,
    actions_of,
    instance,
    make_policy,
    node_of,
    only,
    run,
    snapshot,
    volume,
    warm_machine,
)

SKEW_S = 900.0  # beyond max_clock_skew_s (60 s): the skew is told, and still every age is AWS's
WITHIN_S = 30.0  # within max_clock_skew_s: nothing is told, and only the choice of clock keeps the TTL whole


def apart(snap: Snapshot, *, own_s: float, aws_s: float) -> Snapshot:
    """`snap` observed when this replica's clock read `own_s` and AWS's Date `aws_s`."""
    return dataclasses.replace(snap, now=own_s, aws_now=aws_s)


def test_a_booting_machine_is_aged_by_aws_clock_which_stamped_its_launch() -> None:
    booting = instance("i-0boot", ALICE, state="pending", launched_at=NOW - 10)
    ahead = run(apart(snapshot(instances=[booting]), own_s=NOW + SKEW_S, aws_s=NOW))
    assert actions_of(ahead, Terminate) == []
    assert ahead.carried.unavailable_offerings == {}

    late = instance("i-0late", ALICE, state="pending", launched_at=NOW - MAX_START_S - 1)
    behind = run(apart(snapshot(instances=[late]), own_s=NOW - SKEW_S, aws_s=NOW))
    assert only(behind, Terminate).instance_id == "i-0late"


def test_a_back_off_is_carried_on_aws_clock_and_a_clock_that_steps_back_does_not_stretch_it() -> None:
    # Marked while this replica's clock ran 900 s ahead, read once it agrees again: 600 s left, not 1,500.
    late = instance("i-0late", ALICE, instance_type="m5.large", state="pending", launched_at=NOW - MAX_START_S - 1)
    marked = run(apart(snapshot(instances=[late]), own_s=NOW + SKEW_S, aws_s=NOW))
    assert marked.carried.unavailable_offerings == {("m5.large", late.availability_zone): NOW + BACKOFF_S}


def test_a_release_is_stamped_with_the_later_clock_so_neither_shortens_the_ttl() -> None:
    released = volume("vol-a", ttl_s=3600)
    for own_s, aws_s in ((NOW - WITHIN_S, NOW), (NOW, NOW - WITHIN_S)):
        release = only(run(apart(snapshot(volumes=[released]), own_s=own_s, aws_s=aws_s)), ReleaseVolume)
        assert (release.released_at, release.expires_at) == (NOW, NOW + 3600)


def test_an_expiry_is_read_by_aws_clock_whichever_way_this_replica_is_off() -> None:
    expiring = volume("vol-a", released_at=NOW - 3590, expires_at=NOW + 10)
    ahead = run(apart(snapshot(volumes=[expiring]), own_s=NOW + WITHIN_S, aws_s=NOW))
    assert actions_of(ahead, DeleteVolume) == [], "not expired by AWS's clock"
    behind = run(apart(snapshot(volumes=[expiring]), own_s=NOW - WITHIN_S, aws_s=NOW + 11))
    assert only(behind, DeleteVolume).volume_id == "vol-a"


def test_a_warm_until_is_read_by_aws_clock_and_a_clock_behind_keeps_no_machine_past_its_tier() -> None:
    kept = warm_machine(until=NOW + 5)
    stopped = snapshot(instances=[kept], nodes=[node_of(kept, state="down")])
    behind = run(apart(stopped, own_s=NOW - SKEW_S, aws_s=NOW + 6))
    assert only(behind, Terminate).cause == "warm_expired"
    ahead = run(apart(stopped, own_s=NOW + WITHIN_S, aws_s=NOW))
    assert actions_of(ahead, Terminate) == []


def test_the_loop_is_woken_on_its_own_clock_for_a_moment_of_aws() -> None:
    booting = instance("i-0boot", ALICE, state="pending", launched_at=NOW - 10)
    result = run(apart(snapshot(instances=[booting]), own_s=NOW + WITHIN_S, aws_s=NOW))
    assert result.deadline == NOW + WITHIN_S + MAX_START_S - 10


def test_without_an_answer_from_aws_its_clock_is_this_replicas() -> None:
    clock = DeadlineClock.of(NOW, None)
    assert (clock.own, clock.aws, clock.later) == (NOW, NOW, NOW)
    assert DeadlineClock.of(NOW, NOW - 5).later == NOW
    assert DeadlineClock.of(NOW, NOW + 5).own_time_of(NOW + 100) == NOW + 95
    assert make_policy().max_clock_skew_s > WITHIN_S, "the cases said to be within the skew allowed are"
