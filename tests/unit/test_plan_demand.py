"""Buffers sized by demand (plan/demand.py): Little's law over the arrivals the snapshot shows, within ops' bounds."""

from __future__ import annotations

from fractions import Fraction
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_autoscaling.actions import ClaimBufferMachine, Launch, Terminate
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.demand import arrivals, buffer_targets, demand_targets, seen_arrivals
from warmswarm_autoscaling.plan.result import Part, Target
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.snapshot import Carried, Instance
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    format_timestamp,
)

from .factories import (
    ALICE_N1,
    BOB,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    buffer_machine,
    instance,
    make_policy,
    next_snapshot,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    student,
)

HOT_TAGS: Final = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}
# Window 1800 s, refill 240 s, headroom 1.5: each arrival in the window adds 0.2 to the total (ceil).
DEMAND: Final = make_policy(
    buffer_sizing="demand",
    hot_buffer={"t3.medium": 3},
    availability_zones=(ZONE_A,),
    max_instances=60,
    buffer_window_s=1800.0,
    buffer_refill_s=240.0,
    buffer_headroom=1.5,
)


def came(n: int, *, ago_s: float = 600.0, zone: str = ZONE_A, instance_type: str = "t3.medium") -> list[Instance]:
    """`n` machines launched for owners' sessions `ago_s` before now, running."""
    return [
        instance(f"i-s{zone[-1]}{k:02d}", student(k), zone=zone, instance_type=instance_type, launched_at=NOW - ago_s)
        for k in range(n)
    ]


def hot_machine(instance_id: str) -> Instance:
    return instance(instance_id, tags=HOT_TAGS, launched_at=NOW - 3600)


def test_ten_arrivals_in_half_an_hour_launch_two_hot_machines_and_the_reason_shows_the_rule() -> None:
    launches = actions_of(run(snapshot(instances=came(10)), DEMAND), Launch)
    assert [launch.purpose for launch in launches] == ["hot_buffer", "hot_buffer"]  # 20/h × 4 min × 1.5 = 2.0
    assert launches[0].reason.startswith(
        "the hot buffer's target for t3.medium in eu-west-1a is 2 = ceil(20.0 arrivals/h × 0.067 h refill × 1.5"
        " headroom) (10 machine(s) came up for owners' sessions there in the last 30 min); the hot buffer takes 2"
        " of them (at most 3 per zone) and has 0:"
    )


def test_one_arrival_keeps_one_machine_and_arrivals_older_than_the_window_count_for_nothing() -> None:
    assert [a.purpose for a in actions_of(run(snapshot(instances=came(1)), DEMAND), Launch)] == ["hot_buffer"]
    assert actions_of(run(snapshot(instances=came(9, ago_s=1801.0)), DEMAND), Launch) == []


def test_nobody_in_the_window_shrinks_both_buffers_to_zero_and_terminates_their_idle_machines() -> None:
    policy = make_policy(
        buffer_sizing="demand", hot_buffer={"t3.medium": 2}, warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,)
    )
    hot = [hot_machine("i-h1"), hot_machine("i-h2")]
    warm = [buffer_machine("i-b1"), buffer_machine("i-b2")]
    sessions = came(3, ago_s=3600.0)  # an hour ago: out of the window
    nodes = [*(node_of(m, labelled=False) for m in [*hot, *warm]), *(node_of(m) for m in sessions)]
    result = run(snapshot(nodes=nodes, instances=[*hot, *warm, *sessions]), policy)
    terminated = {t.instance_id: t for t in actions_of(result, Terminate)}
    assert sorted(terminated) == ["i-b1", "i-b2", "i-h1", "i-h2"]
    assert actions_of(result, Launch) == []
    assert terminated["i-h1"].reason.startswith(
        "buffer machine i-h1 (t3.medium in eu-west-1a) is beyond its target: the hot buffer's target for t3.medium"
        " in eu-west-1a is 0: no machine came up for an owner's session there in the last 30 min"
    )
    assert terminated["i-h1"].cause == "buffer_surplus"


def test_a_shrinking_target_never_terminates_an_owned_machine_nor_one_this_plan_claims() -> None:
    owned = instance(
        "i-h0",
        ALICE_N1,
        tags={**HOT_TAGS, INSTANCE_CLAIMED_AT_TAG: format_timestamp(NOW - 7200)},
        launched_at=NOW - 9000,
    )
    free = hot_machine("i-h1")
    policy = make_policy(buffer_sizing="demand", hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    nodes = [node_of(owned), node_of(free, labelled=False)]
    result = run(snapshot(nodes=nodes, instances=[owned, free], tasks=[pending_task("t1", BOB)]), policy)
    assert only(result, ClaimBufferMachine).instance_id == "i-h1"  # Bob's session takes it; the target was 0
    assert [t.instance_id for t in actions_of(result, Terminate)] == []


def test_the_target_is_clamped_to_the_maximum_and_the_warm_buffer_takes_what_the_hot_one_does_not() -> None:
    policy = make_policy(
        buffer_sizing="demand", hot_buffer={"t3.medium": 2}, warm_buffer={"t3.medium": 3}, availability_zones=(ZONE_A,)
    )
    targets = demand_targets(policy, {("t3.medium", ZONE_A): 100})  # a class: total 20
    assert targets[Part("t3.medium", ZONE_A, True)].machines == 2
    assert targets[Part("t3.medium", ZONE_A, False)].machines == 3
    modest = demand_targets(policy, {("t3.medium", ZONE_A): 15})  # total 3: two hot, one warm
    assert [modest[Part("t3.medium", ZONE_A, hot)].machines for hot in (True, False)] == [2, 1]


def test_the_daily_budget_caps_the_hot_buffer_in_turn_across_zones_and_sends_the_rest_to_the_warm_one() -> None:
    # A t3.medium for a day: 0.0416 × 24 = $0.9984; $2.50 pays for two of the four wanted.
    policy = make_policy(
        buffer_sizing="demand",
        hot_buffer={"t3.medium": 2},
        warm_buffer={"t3.medium": 2},
        availability_zones=(ZONE_A, ZONE_B),
        buffer_daily_budget_usd=2.5,
    )
    targets = demand_targets(policy, {("t3.medium", ZONE_A): 10, ("t3.medium", ZONE_B): 10})
    assert [targets[Part("t3.medium", zone, True)].machines for zone in (ZONE_A, ZONE_B)] == [1, 1]
    assert [targets[Part("t3.medium", zone, False)].machines for zone in (ZONE_A, ZONE_B)] == [1, 1]
    assert "the daily budget $2.50 pays for $2.00 of running buffer machines a day" in (
        targets[Part("t3.medium", ZONE_A, True)].said
    )


def test_arrivals_are_launches_and_claims_of_owners_machines_never_the_buffers_own() -> None:
    claimed_warm = buffer_machine("i-b9", owner=ALICE_N1)  # launched an hour ago, claimed just now
    claimed_warm = instance(
        "i-b9",
        tags={**claimed_warm.tags, INSTANCE_CLAIMED_AT_TAG: format_timestamp(NOW - 30)},
        launched_at=NOW - 3600,
    )
    unclaimed = [hot_machine("i-h1"), buffer_machine("i-b1")]
    cold = came(2, zone=ZONE_B)
    snap = snapshot(instances=[claimed_warm, *unclaimed, *cold])
    assert arrivals(seen_arrivals(Cluster.of(snap, DEMAND))) == {("t3.medium", ZONE_A): 1, ("t3.medium", ZONE_B): 2}


def test_fixed_sizing_keeps_the_settings_counts_whatever_the_arrivals() -> None:
    fixed = make_policy(hot_buffer={"t3.medium": 2}, availability_zones=(ZONE_A, ZONE_B))
    targets, seen = buffer_targets(Cluster.of(snapshot(), fixed))
    assert seen == {}  # fixed sizing counts no arrivals (none are carried)
    assert {part: t.machines for part, t in targets.items()} == {
        ("t3.medium", ZONE_A, True): 2,
        ("t3.medium", ZONE_B, True): 2,
    }


def test_a_warm_claim_is_stamped_with_its_moment() -> None:
    warm = buffer_machine("i-b1")
    policy = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    result = run(
        snapshot(nodes=[node_of(warm, labelled=False)], instances=[warm], tasks=[pending_task("t1", BOB)]), policy
    )
    claim = only(result, ClaimBufferMachine)
    assert (claim.hot, claim.claimed_at) == (False, NOW)


@given(
    low=st.integers(min_value=0, max_value=400),
    more=st.integers(min_value=0, max_value=400),
    hot_max=st.integers(min_value=0, max_value=10),
    warm_max=st.integers(min_value=0, max_value=10),
    budget_usd=st.one_of(st.none(), st.floats(min_value=0.0, max_value=20.0)),
    window_s=st.floats(min_value=60.0, max_value=7200.0),
)
def test_targets_grow_with_arrivals_and_stay_within_the_maxima_and_the_budget(
    low: int, more: int, hot_max: int, warm_max: int, budget_usd: float | None, window_s: float
) -> None:
    policy = make_policy(
        buffer_sizing="demand",
        hot_buffer={"t3.medium": hot_max, "m5.large": hot_max},
        warm_buffer={"t3.medium": warm_max},
        availability_zones=(ZONE_A, ZONE_B),
        buffer_daily_budget_usd=budget_usd,
        buffer_window_s=window_s,
    )
    fewer = demand_targets(policy, {("t3.medium", ZONE_A): low, ("m5.large", ZONE_B): low})
    most = demand_targets(policy, {("t3.medium", ZONE_A): low + more, ("m5.large", ZONE_B): low + more})
    for part, target in most.items():
        assert 0 <= target.machines <= (hot_max if part[2] else warm_max)
        if budget_usd is None:
            assert target.machines >= fewer[part].machines  # monotone in arrivals (a budget may reshuffle hot)
    # Hot and warm together never exceed Little's total, which the most arrivals raise.
    for t, z in {(t, z) for t, z, _ in most}:
        held = sum(most[Part(t, z, hot)].machines for hot in (True, False) if Part(t, z, hot) in most)
        assert held <= max(0, -(-(low + more) * 240 * 1.5 // window_s)) + 1
    spent = sum(target.machines * policy.price_per_hour[p[0]] * 24 for p, target in most.items() if p[2])
    assert budget_usd is None or spent <= budget_usd + 1e-6
    if low == 0:
        assert all(target.machines == 0 for target in fewer.values())


@given(
    count=st.integers(min_value=1, max_value=500),
    window_s=st.integers(min_value=60, max_value=7200),
    refill_s=st.integers(min_value=30, max_value=900),
    headroom=st.sampled_from((1.0, 1.25, 1.5, 2.0)),
)
def test_the_total_is_littles_law_in_exact_arithmetic(
    count: int, window_s: int, refill_s: int, headroom: float
) -> None:
    policy = make_policy(
        buffer_sizing="demand",
        warm_buffer={"t3.medium": 10_000},
        availability_zones=(ZONE_A,),
        buffer_window_s=float(window_s),
        buffer_refill_s=float(refill_s),
        buffer_headroom=headroom,
    )
    exact = Fraction(count) / window_s * refill_s * Fraction(headroom)
    expected = -(-exact.numerator // exact.denominator)  # ceil
    assert demand_targets(policy, {("t3.medium", ZONE_A): count})[Part("t3.medium", ZONE_A, False)].machines == expected


def test_the_settings_carry_demand_sizing_and_an_empty_budget_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-1")
    monkeypatch.setenv("AUTOSCALING_BUFFER_SIZING", "demand")
    monkeypatch.setenv("AUTOSCALING_BUFFER_WINDOW_S", "900")
    monkeypatch.setenv("AUTOSCALING_BUFFER_REFILL_S", "180")
    monkeypatch.setenv("AUTOSCALING_BUFFER_HEADROOM", "2")
    monkeypatch.setenv("AUTOSCALING_BUFFER_DAILY_BUDGET_USD", "")
    policy = AutoscalingSettings().policy()  # type: ignore[call-arg]
    assert (policy.buffer_sizing, policy.buffer_window_s, policy.buffer_refill_s, policy.buffer_headroom) == (
        "demand",
        900.0,
        180.0,
        2.0,
    )
    assert policy.buffer_daily_budget_usd is None
    monkeypatch.setenv("AUTOSCALING_BUFFER_DAILY_BUDGET_USD", "12.5")
    assert AutoscalingSettings().policy().buffer_daily_budget_usd == 12.5  # type: ignore[call-arg]
    monkeypatch.setenv("AUTOSCALING_BUFFER_SIZING", "guess")
    with pytest.raises(ValueError, match="buffer_sizing"):
        AutoscalingSettings()  # type: ignore[call-arg]


def test_an_arrival_whose_machine_is_gone_still_counts_until_it_leaves_the_window() -> None:
    # Ten sessions came and their machines were terminated since (no longer listed): the plan remembers them.
    first = run(snapshot(instances=came(10)), DEMAND)
    assert len(first.carried.arrivals) == 10
    later = next_snapshot(first, now=NOW + 600, instances=[])
    launches = actions_of(run(later, DEMAND), Launch)
    assert [launch.purpose for launch in launches] == ["hot_buffer", "hot_buffer"]
    # Past the window (launched 600 s before NOW, so 1,800 s later they are out), nothing is remembered.
    gone = run(next_snapshot(first, now=NOW + 1201, instances=[]), DEMAND)
    assert gone.carried.arrivals == {}
    assert actions_of(gone, Launch) == []


def test_fixed_sizing_remembers_no_arrivals() -> None:
    assert run(snapshot(instances=came(10)), make_policy(hot_buffer={"t3.medium": 1})).carried.arrivals == {}


def test_the_plan_reads_each_buffer_part_with_its_target_and_the_unclaimed_machines_it_holds() -> None:
    held = hot_machine("i-h1")
    claimed = instance("i-h2", ALICE_N1, tags=HOT_TAGS, launched_at=NOW - 3600)  # an owner's now: not held
    result = run(snapshot(instances=[held, claimed]), make_policy(hot_buffer={"t3.medium": 2}))
    parts = {(p.instance_type, p.availability_zone, p.hot): (p.target, p.held) for p in result.buffers}
    assert parts[Part("t3.medium", ZONE_A, True)] == (2, 1)
    assert parts[("t3.medium", ZONE_B, True)] == (2, 0)
    assert all("keeps 2 running t3.medium" in p.said for p in result.buffers)


def test_a_rate_that_rounds_to_nothing_keeps_no_machine() -> None:
    # One arrival × 4 min refill × a headroom of 1e-9: λ·W·headroom is within the float tolerance of 0.
    faint = make_policy(
        buffer_sizing="demand", hot_buffer={"t3.medium": 3}, availability_zones=(ZONE_A,), buffer_headroom=1e-9
    )
    assert demand_targets(faint, {("t3.medium", ZONE_A): 1})[Part("t3.medium", ZONE_A, True)].machines == 0


def budgeted(budget_usd: float, *, hot_max: int = 3) -> dict[Part, Target]:
    """The targets when ten arrivals in half an hour want three machines: 20/h × 4 min × 2.25 = 3."""
    policy = make_policy(
        buffer_sizing="demand",
        hot_buffer={"t3.medium": hot_max},
        warm_buffer={"t3.medium": 3},
        availability_zones=(ZONE_A,),
        buffer_headroom=2.25,
        buffer_daily_budget_usd=budget_usd,
    )
    return demand_targets(policy, {("t3.medium", ZONE_A): 10})


def test_a_budget_of_exactly_two_machines_a_day_pays_for_two() -> None:
    day_usd = 0.0416 * 24  # a t3.medium's day
    assert budgeted(2 * day_usd)[Part("t3.medium", ZONE_A, True)].machines == 2


def test_a_budget_for_every_wanted_machine_gives_one_part_all_of_them() -> None:
    assert budgeted(100.0)[Part("t3.medium", ZONE_A, True)].machines == 3


def test_the_budget_is_said_only_where_it_cut_the_hot_buffer() -> None:
    ample = budgeted(100.0)[Part("t3.medium", ZONE_A, True)].said
    assert "daily budget" not in ample, ample
    cut = budgeted(1.0)[Part("t3.medium", ZONE_A, True)].said
    assert "the daily budget $1.00 pays for $1.00 of running buffer machines a day" in cut, cut


def test_the_warm_target_says_what_the_hot_buffer_holds_and_what_it_takes() -> None:
    warm = budgeted(1.0)[Part("t3.medium", ZONE_A, False)]
    assert warm.machines == 2
    assert warm.said.startswith("the warm buffer's target for t3.medium in eu-west-1a is 3 = ")
    assert warm.said.endswith("; the hot buffer holds 1, the warm buffer takes 2 (at most 3 per zone)")


def test_an_unpriced_type_is_never_paid_for_by_the_budget() -> None:
    unpriced = make_policy(
        buffer_sizing="demand",
        hot_buffer={"t3.medium": 3},
        availability_zones=(ZONE_A,),
        price_per_hour={},
        buffer_daily_budget_usd=100.0,
    )
    assert demand_targets(unpriced, {("t3.medium", ZONE_A): 100})[Part("t3.medium", ZONE_A, True)].machines == 0


def test_an_arrival_exactly_a_window_ago_is_out_of_it() -> None:
    on_the_edge = came(1, ago_s=DEMAND.buffer_window_s)
    assert seen_arrivals(Cluster.of(snapshot(instances=on_the_edge), DEMAND)) == {}
    remembered = {"i-gone": ("t3.medium", ZONE_A, NOW - DEMAND.buffer_window_s)}
    carried = Carried(arrivals=remembered)
    assert seen_arrivals(Cluster.of(snapshot(carried=carried), DEMAND)) == {}
