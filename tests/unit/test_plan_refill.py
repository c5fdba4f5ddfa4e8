"""plan/refill.py: the buffers' refill, and its back-off when their machines never join (behaviour 8, issue 32)."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import Launch, Terminate
from warmswarm_autoscaling.snapshot import Carried, Repeated
from warmswarm_models import format_timestamp

from .factories import (
    BACKOFF_S,
    BOB,
    BUFFERED,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    buffer_machine,
    make_policy,
    next_snapshot,
    node_of,
    pending_task,
    run,
    snapshot,
)


def test_a_buffer_machine_that_never_joins_backs_off_every_buffer_not_the_owners_offering() -> None:
    """Its images may not pull: relaunched every cycle it would burn money, relaunched on another type or zone it
    would fail the same way, and marked out of capacity it would hold back every owner's launch of that type
    (behaviour 8; issue 32: the back-off holds across every type and zone)."""
    never = buffer_machine("i-b1", state="running")
    late = dataclasses.replace(never, launched_at=NOW - 700.0)

    result = run(snapshot(instances=[late], tasks=[pending_task("t1", BOB)]), BUFFERED)

    assert [(t.instance_id, t.cause, t.reason) for t in actions_of(result, Terminate)] == [
        (
            "i-b1",
            "start_timeout",
            "instance i-b1 (t3.medium in eu-west-1a) did not join the swarm within max_start_s=600; the buffers"
            " launch nothing for a back-off that doubles with each such failure",
        )
    ]
    assert result.carried.unavailable_offerings == {}
    assert result.carried.buffer_backoff == Repeated(
        frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW, NOW + BACKOFF_S
    )
    assert [(launch.instance_type, launch.owner) for launch in actions_of(result, Launch)] == [("t3.medium", BOB)]
    # The next cycles refill no part, of any type in any zone, while it is backed off, and say so.
    after = run(next_snapshot(result, now=NOW + 30), BUFFERED)
    assert [launch for launch in actions_of(after, Launch) if launch.purpose == "buffer"] == []
    assert [n for n in after.notices if "did not join the swarm" in n] == [
        "the last 1 buffer machine(s) launched (t3.medium in eu-west-1a) did not join the swarm within"
        " max_start_s=600 (their images may not pull: check AUTOSCALING_BUFFER_IMAGES): the buffers launch nothing,"
        f" of any type, until {format_timestamp(NOW + BACKOFF_S)} (the back-off doubles with each failure, from"
        " capacity_backoff_s, at most 16x); owners' launches are not held back"
    ]


def test_a_second_buffer_machine_that_never_joins_doubles_the_back_off_and_one_that_joins_ends_it() -> None:
    first = Repeated(frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW - BACKOFF_S, NOW)
    second = dataclasses.replace(buffer_machine("i-b2", state="running", zone=ZONE_B), launched_at=NOW - 700.0)

    result = run(snapshot(instances=[second], carried=Carried(buffer_backoff=first)), BUFFERED)

    assert result.carried.buffer_backoff == Repeated(
        frozenset({"i-b1", "i-b2"}), frozenset({("t3.medium", ZONE_A), ("t3.medium", ZONE_B)}), NOW, NOW + 2 * BACKOFF_S
    )
    assert [a for a in actions_of(result, Launch) if a.purpose == "buffer"] == []
    # A buffer machine launched before the last failure that joins proves nothing; one launched after ends it.
    backed_off = Carried(buffer_backoff=dataclasses.replace(first, since=NOW - 10, until=NOW + BACKOFF_S))
    for launched_at, kept in ((NOW - 20, True), (NOW - 5, False)):
        joined = dataclasses.replace(buffer_machine("i-b3", state="running"), launched_at=launched_at)
        seen = run(snapshot(instances=[joined], nodes=[node_of(joined, labelled=False)], carried=backed_off), BUFFERED)
        assert (seen.carried.buffer_backoff is not None) is kept


def test_after_a_back_off_one_machine_probes_and_the_rest_follow_once_it_joins() -> None:
    """Relaunching every part at each try would cost a machine per part while the boots still fail."""
    over = Repeated(frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW - 100, NOW - 1)
    wide = make_policy(warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A, ZONE_B))

    first = run(snapshot(carried=Carried(buffer_backoff=over)), wide)
    assert [(a.purpose, a.availability_zone) for a in actions_of(first, Launch)] == [("buffer", ZONE_A)]

    probe = dataclasses.replace(buffer_machine("i-b2", state="pending"), launched_at=NOW - 20)
    waiting = run(snapshot(instances=[probe], carried=Carried(buffer_backoff=over)), wide)
    assert actions_of(waiting, Launch) == []  # the probe is on its way: nothing more until it joins

    joined = dataclasses.replace(probe, state="running")
    refilled = run(snapshot(instances=[joined], nodes=[node_of(joined, labelled=False)], carried=first.carried), wide)
    assert refilled.carried.buffer_backoff is None
    assert len([a for a in actions_of(refilled, Launch) if a.purpose == "buffer"]) == 3


def test_a_buffer_back_off_ending_this_moment_is_over_and_the_buffer_refills() -> None:
    ended = Carried(buffer_backoff=Repeated(frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW - 9, NOW))
    result = run(snapshot(carried=ended), BUFFERED)
    assert [(a.instance_type, a.purpose) for a in actions_of(result, Launch)] == [("t3.medium", "buffer")]
    assert [n for n in result.notices if "did not join the swarm" in n] == []
