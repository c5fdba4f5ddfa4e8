"""The fair comparison's instrument: the pick under a cost ceiling, the held-out table's means and ranges, pooled
phases, and the T3 credits priced afterwards."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_simulator import fair, sensitivity
from warmswarm_simulator.billing import Bill
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.policies import load_policies, warmswarm_settings
from warmswarm_simulator.results import RunResult

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))
POLICIES = load_policies()


@pytest.fixture(scope="module")
def runs() -> list[RunResult]:
    """baseline and warmswarm on two small days: (seed 7, baseline), (seed 7, warmswarm), (8, b), (8, w)."""
    jobs = [fair.Job(seed, POLICIES.named(n)) for seed in (7, 8) for n in ("baseline", "warmswarm")]
    return fair.run_jobs(
        MODEL, jobs, lambda seed: generate_day(SPEC, seed), SPEC.groups, POLICIES.max_instances, workers=1
    )


def _priced(result: RunResult, total_usd: float, p50_s: float, p95_s: float) -> RunResult:
    bill = Bill(total_usd, 1.0, {}, 0.0, 0.0, 0.0, 0.0)
    waits = tuple(sorted([p50_s] * 50 + [p95_s] * 45 + [p95_s + 1] * 5))
    return replace(result, bill=bill, waits_s=waits)


def test_the_pick_is_the_lowest_p50_plus_p95_within_the_ceiling(runs: list[RunResult]) -> None:
    cheap_slow = replace(_priced(runs[0], 50.0, 200.0, 300.0), name="cheap")
    dear_fast = replace(_priced(runs[0], 90.0, 30.0, 100.0), name="dear")
    middle = replace(_priced(runs[0], 70.0, 60.0, 250.0), name="middle")
    assert fair.pick([cheap_slow, dear_fast, middle], ceiling_usd=100.0).name == "dear"
    assert fair.pick([cheap_slow, dear_fast, middle], ceiling_usd=80.0).name == "middle"
    with pytest.raises(ValueError, match="no candidate"):
        fair.pick([cheap_slow], ceiling_usd=10.0)


def test_a_candidate_that_leaves_sessions_unrun_is_never_picked(runs: list[RunResult]) -> None:
    broken = replace(_priced(runs[0], 10.0, 1.0, 2.0), never_ran=1, name="broken")
    fine = replace(_priced(runs[0], 50.0, 200.0, 300.0), name="fine")
    assert fair.pick([broken, fine], ceiling_usd=100.0).name == "fine"


def test_the_fair_table_gives_the_mean_and_range_over_the_seeds(runs: list[RunResult]) -> None:
    by_policy = {"baseline": [runs[0], runs[2]], "warmswarm": [runs[1], runs[3]]}
    text = fair.fair_table(by_policy)
    costs = [r.bill.total_usd for r in (runs[1], runs[3])]
    expected = f"{sum(costs) / 2:,.2f} ({min(costs):,.2f}–{max(costs):,.2f})"
    cost_row = next(line for line in text.splitlines() if line.startswith("| total cost"))
    assert cost_row.endswith(f"| {expected} |")
    assert "| cost vs baseline, × | 1.00 (1.00–1.00) |" in text
    assert "cost vs baseline-best" not in text  # the second ratio only when the best baseline is in the table


def test_the_fair_table_also_prices_each_policy_against_the_best_baseline(runs: list[RunResult]) -> None:
    by_policy = {"baseline": [runs[0], runs[2]], fair.BEST_BASELINE: [runs[1], runs[3]], "w": [runs[0], runs[2]]}
    ratios = [r.bill.total_usd / b.bill.total_usd for r, b in ((runs[0], runs[1]), (runs[2], runs[3]))]
    expected = f"{sum(ratios) / 2:.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
    row = next(line for line in fair.fair_table(by_policy).splitlines() if "cost vs baseline-best" in line)
    assert row == f"| cost vs baseline-best, × | {expected} | 1.00 (1.00–1.00) | {expected} |"


def test_pooled_results_carry_every_seed_s_sessions_and_the_mean_bill(runs: list[RunResult]) -> None:
    (base, _) = fair.pooled({"baseline": [runs[0], runs[2]], "warmswarm": [runs[1], runs[3]]})
    assert len(base.phases) == len(runs[0].phases) + len(runs[2].phases)
    assert len(base.waits_s) == len(runs[0].waits_s) + len(runs[2].waits_s)
    assert base.bill.total_usd == pytest.approx((runs[0].bill.total_usd + runs[2].bill.total_usd) / 2)


def test_t3_credits_are_the_use_above_each_type_s_baseline(runs: list[RunResult]) -> None:
    bill = Bill(0.0, 15.0, {"t3.medium": 10.0, "t3.large": 5.0, "m5.large": 100.0}, 0.0, 0.0, 0.0, 0.0)
    result = replace(runs[0], bill=bill)
    # t3.medium: 10 h x 2 vCPU x (0.4 - 0.2) x $0.05; t3.large: 5 h x 2 x (0.4 - 0.3) x $0.05; m5 earns none.
    assert sensitivity.t3_credit_usd(result, MODEL) == pytest.approx(0.2 + 0.05)
    assert sensitivity.t3_credit_usd(result, MODEL, cpu_use=0.1) == 0.0


def test_every_assumed_figure_has_a_variant_and_each_variant_changes_the_model_or_the_baseline() -> None:
    names = " ".join(v.name for v in sensitivity.VARIANTS)
    for figure in (
        "3 min",
        "restart",
        "pull 0",
        "download",
        "sidecar margin",
        "hot mount 3.4 s",
        "hot mount 20 s",
        "scrub 60 s",
    ):
        assert figure in names
    for variant in sensitivity.VARIANTS[1:]:
        assert variant.model(MODEL) != MODEL or variant.baseline_settings


@pytest.mark.parametrize("family", [f for f in fair.CANDIDATES if f"{f}-best" in {p.name for p in POLICIES.specs}])
def test_the_best_policies_are_candidates_of_the_choice(family: str) -> None:
    """policies.toml's -best policies hold what `choose` picked: one of its candidates, knob for knob."""
    best = POLICIES.named(f"{family}-best")
    fresh = POLICIES.named(best.kind)
    assert {c.kind for c in fair.CANDIDATES[family]} == {best.kind}
    knobs = [(dict(c.settings), dict(c.groups)) for c in fair.CANDIDATES[family]]
    extra = {k: v for k, v in best.settings.items() if fresh.settings.get(k) != v}
    assert (extra, dict(best.groups)) in knobs


def test_the_fair_policies_are_in_policies_toml_and_the_seeds_are_apart() -> None:
    for name in fair.FAIR_POLICIES:
        POLICIES.named(name)
    assert fair.BEST_BASELINE in fair.FAIR_POLICIES
    assert fair.CHOOSING_SEED not in fair.HELD_OUT_SEEDS


@pytest.mark.parametrize("name", ["warmswarm-hot-best", "warmswarm-hot-demand-best"])
def test_the_hot_best_policies_parse_into_the_autoscaler_s_settings_with_a_hot_buffer(name: str) -> None:
    spec = POLICIES.named(name)
    settings = warmswarm_settings(spec, POLICIES.max_instances, MODEL.platform)
    checked = AutoscalingSettings.model_validate(settings.model_dump())  # model_construct skips the validators
    assert checked.hot_buffer
    assert all(n > 0 for n in checked.hot_buffer.values())
    assert checked.buffer_sizing == ("demand" if "demand" in name else "fixed")
    assert name in fair.FAIR_POLICIES


def test_every_candidate_s_knobs_are_autoscaler_settings() -> None:
    """A misspelt or out-of-range knob in the choice's grid would be a run of defaults under the candidate's name."""
    for candidate in (c for candidates in fair.CANDIDATES.values() for c in candidates if c.kind == "warmswarm"):
        settings = warmswarm_settings(candidate, POLICIES.max_instances, MODEL.platform)
        assert set(candidate.settings) <= set(AutoscalingSettings.model_fields), candidate.name
        AutoscalingSettings.model_validate(settings.model_dump())


def test_the_fair_day_refuses_an_unknown_family_before_running_anything(tmp_path: Path) -> None:
    from warmswarm_simulator.cli import main

    with pytest.raises(SystemExit, match="unknown families \\['warmswarm-nope'\\]: choose among baseline, warmswarm"):
        main(["fair", "--small", "--seeds", "2", "--families", "warmswarm-nope", "--out", str(tmp_path)])
    assert not (tmp_path / "fair.md").exists()
