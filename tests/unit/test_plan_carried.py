"""plan/carried.py: what a cycle leaves the next, its own part (`planned`) and what applying taught (`after`)."""

from __future__ import annotations

from warmswarm_autoscaling.actions import Launch, Start
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.plan.carried import after, planned
from warmswarm_autoscaling.snapshot import Carried, Repeated
from warmswarm_models import Resources

from .factories import ALICE, NOW, ZONE_A, instance, make_policy, snapshot

BACKOFF_S = 600.0
POLICY = make_policy(capacity_backoff_s=BACKOFF_S)
LAUNCH = Launch("t3.medium", ZONE_A, ALICE, ("t1",), Resources(1.0, 2**30), "token-1", "t1 waits")
START = Start("i-01", "resuming")
CLOCKS = Carried(
    idle_since={"node-1": NOW - 5},
    down_since={"node-2": NOW - 6},
    stopped_since={"i-09": NOW - 7},
    unavailable_offerings={("m5.large", ZONE_A): NOW + 30},
    spent_tokens=frozenset({"spent-before"}),
    failed_starts=frozenset({"i-08"}),
    volume_backoffs={"vol-1": Repeated(frozenset({"i-05"}), frozenset({("t3.medium", ZONE_A)}), NOW - 20, NOW + 40)},
    buffer_backoff=Repeated(frozenset({"i-06"}), frozenset({("m5.large", ZONE_A)}), NOW - 10, NOW + 50),
    arrivals={"i-07": ("t3.medium", ZONE_A, NOW - 60)},
)


def test_what_applying_taught_is_added_to_what_the_plan_carried() -> None:
    outcomes = [
        Outcome(LAUNCH, error="no capacity", unavailable_offering=("t3.medium", ZONE_A)),
        Outcome(LAUNCH, error="token spent", spent_token="token-1"),
        Outcome(START, error="no capacity", failed_start="i-01"),
    ]

    carried = after(CLOCKS, outcomes, POLICY, NOW)

    assert carried.unavailable_offerings == {("m5.large", ZONE_A): NOW + 30, ("t3.medium", ZONE_A): NOW + BACKOFF_S}
    assert carried.spent_tokens == {"spent-before", "token-1"}
    assert carried.failed_starts == {"i-08", "i-01"}
    # The clocks are the plan's: applying changes none of them.
    assert (carried.idle_since, carried.down_since, carried.stopped_since) == (
        CLOCKS.idle_since,
        CLOCKS.down_since,
        CLOCKS.stopped_since,
    )


def test_outcomes_that_taught_nothing_leave_the_carried_value_as_it_was() -> None:
    assert after(CLOCKS, [Outcome(LAUNCH, instance_id="i-0aa"), Outcome(START, error="throttled")], POLICY, NOW) == (
        CLOCKS
    )


def test_a_capacity_mark_is_counted_from_the_cycle_and_a_later_mark_replaces_an_earlier_one() -> None:
    earlier = Carried(unavailable_offerings={("t3.medium", ZONE_A): NOW + 1})

    carried = after(earlier, [Outcome(LAUNCH, error="x", unavailable_offering=("t3.medium", ZONE_A))], POLICY, NOW + 9)

    assert carried.unavailable_offerings == {("t3.medium", ZONE_A): NOW + 9 + BACKOFF_S}


def test_a_failed_start_is_kept_only_while_its_machine_stays_stopped() -> None:
    machines = [instance("i-01", ALICE, state="stopped"), instance("i-02", ALICE, state="pending")]
    before = Carried(failed_starts=frozenset({"i-01", "i-02", "i-gone"}), spent_tokens=frozenset({"t"}))
    seen = snapshot(instances=machines, carried=before)

    carried = planned(
        seen,
        idle_since={},
        down_since={},
        stopped_since={},
        unavailable_offerings={},
        volume_backoffs={},
        buffer_backoff=None,
        arrivals={},
    )

    assert carried.failed_starts == {"i-01"}  # i-02 was started by someone, i-gone was terminated
    assert carried.spent_tokens == {"t"}  # AWS's facts, carried as they are


def test_the_plan_leaves_the_clocks_and_marks_it_was_given() -> None:
    carried = planned(
        snapshot(),
        idle_since=CLOCKS.idle_since,
        down_since=CLOCKS.down_since,
        stopped_since=CLOCKS.stopped_since,
        unavailable_offerings=CLOCKS.unavailable_offerings,
        volume_backoffs=CLOCKS.volume_backoffs,
        buffer_backoff=CLOCKS.buffer_backoff,
        arrivals=CLOCKS.arrivals,
    )

    assert carried == Carried(
        idle_since=CLOCKS.idle_since,
        down_since=CLOCKS.down_since,
        stopped_since=CLOCKS.stopped_since,
        unavailable_offerings=CLOCKS.unavailable_offerings,
        volume_backoffs=CLOCKS.volume_backoffs,
        buffer_backoff=CLOCKS.buffer_backoff,
        arrivals=CLOCKS.arrivals,
    )


def test_a_new_term_keeps_only_the_spent_tokens_and_the_arrivals_seen() -> None:
    # Both are AWS's facts (tokens used, machines that came up); the clocks were this replica's own observations.
    assert CLOCKS.next_term() == Carried(spent_tokens=frozenset({"spent-before"}), arrivals=CLOCKS.arrivals)
