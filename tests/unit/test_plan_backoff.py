"""plan/backoff.py: failures that repeat the same way back off, doubling, capped, over every type and zone."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.plan.backoff import MAX_BACKOFF_FACTOR, backoff_s, buffer_backoff, grown, volume_backoffs
from warmswarm_autoscaling.snapshot import Repeated

from .factories import ALICE_N1, NOW, ZONE_A, ZONE_B, buffer_machine, instance, make_policy, node_of

POLICY = make_policy(capacity_backoff_s=60.0)


def test_the_back_off_doubles_with_each_failure_and_stops_growing_at_its_cap() -> None:
    assert [backoff_s(POLICY, n) for n in range(1, 8)] == [60.0, 120.0, 240.0, 480.0, 960.0, 960.0, 960.0]
    assert backoff_s(POLICY, 99) == 60.0 * MAX_BACKOFF_FACTOR


def test_a_failure_is_counted_once_however_many_cycles_see_it() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    first = grown(None, machine, NOW, POLICY)

    assert first == Repeated(frozenset({"i-01"}), frozenset({("t3.medium", ZONE_A)}), NOW, NOW + 60.0)
    assert grown(first, machine, NOW + 30, POLICY) is first
    other = instance("i-02", ALICE_N1, volume_id="vol-1", zone=ZONE_B)
    assert grown(first, other, NOW + 30, POLICY) == Repeated(
        frozenset({"i-01", "i-02"}),
        frozenset({("t3.medium", ZONE_A), ("t3.medium", ZONE_B)}),
        NOW + 30,
        NOW + 30 + 120.0,
    )


def test_a_volume_is_forgotten_once_mounted_or_gone_and_kept_otherwise_past_its_end() -> None:
    """Past its end the count stays: the next failure grows from it. Only a success (or no volume) forgets it."""
    over = Repeated(frozenset({"i-01"}), frozenset({("t3.medium", ZONE_A)}), NOW - 100, NOW - 40)
    carried = {"vol-1": over, "vol-2": over, "vol-gone": over}
    mounted_vol_2 = node_of(instance("i-05", ALICE_N1, volume_id="vol-2"))

    kept = volume_backoffs(carried, [], [mounted_vol_2], frozenset({"vol-1", "vol-2"}), NOW, POLICY)

    assert kept == {"vol-1": over}


def test_a_buffer_back_off_ends_only_when_a_machine_launched_after_its_last_failure_joins() -> None:
    backoff = Repeated(frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW - 100, NOW + 500)
    older = dataclasses.replace(buffer_machine("i-b2", state="running"), launched_at=NOW - 200)
    newer = dataclasses.replace(buffer_machine("i-b3", state="running"), launched_at=NOW - 50)

    assert buffer_backoff(backoff, [], [older], NOW, POLICY) is backoff
    assert buffer_backoff(backoff, [], [newer], NOW, POLICY) is None
    late = dataclasses.replace(buffer_machine("i-b4", state="running", zone=ZONE_B), launched_at=NOW - 700)
    assert buffer_backoff(backoff, [late], [], NOW, POLICY) == Repeated(
        frozenset({"i-b1", "i-b4"}), frozenset({("t3.medium", ZONE_A), ("t3.medium", ZONE_B)}), NOW, NOW + 120.0
    )


def test_a_buffer_machine_launched_the_moment_of_the_last_failure_ends_the_back_off() -> None:
    """`since` is the failure's cycle: a machine launched then (AWS's second) already came after it."""
    backoff = Repeated(frozenset({"i-b1"}), frozenset({("t3.medium", ZONE_A)}), NOW - 100, NOW + 500)
    same_moment = dataclasses.replace(buffer_machine("i-b2", state="running"), launched_at=NOW - 100)
    assert buffer_backoff(backoff, [], [same_moment], NOW, POLICY) is None
