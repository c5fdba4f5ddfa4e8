"""The fair comparison: each policy at its best (knobs chosen on one seed), reported over seeds the choice never saw.

`choose` runs each family's candidates (CANDIDATES) on the choosing seed and keeps, per family, the candidate with
the lowest p50 + p95 wait whose cost stays under the ceiling (COST_CEILING x the family-free fresh-install
baseline's cost on that seed); policies.toml then holds the winners as `<family>-best` (`baseline-best`,
`warmswarm-best`, `warmswarm-hot-best`, `warmswarm-hot-demand-best`).
`held_out` runs the fair policies on the held-out seeds and sums them up: the mean and range of each figure per
policy, and the waits by phase with every held-out session pooled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from warmswarm_models import GroupProperties

from warmswarm_simulator.billing import Bill
from warmswarm_simulator.config import Model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.phases import PHASES
from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.report import phase_table
from warmswarm_simulator.results import RunResult, percentile
from warmswarm_simulator.workload import Session

CHOOSING_SEED = 1
HELD_OUT_SEEDS = (2, 3, 4, 5, 6)
# The policies of the fair table, in its order: each family's fresh install and its best.
FAIR_POLICIES = (
    "baseline",
    "baseline-best",
    "warmswarm",
    "warmswarm-best",
    "warmswarm-hot-best",
    "warmswarm-hot-demand-best",
)
# The fair table's second cost ratio (the targets' reference): the best baseline.
BEST_BASELINE = "baseline-best"
# A candidate may cost at most this much more than the fresh-install baseline on the choosing seed: waits bought
# with an unbounded bill are not "at its best". 1.3x is about what the reviewer's fair warmswarm cost ($93 against
# $75): the ceiling admits every policy the review found competitive, and no standing fleet.
COST_CEILING = 1.3
_HOT_T3 = {"t3.medium": 2, "t3.large": 1}


def _baseline(name: str, **settings: Any) -> PolicySpec:
    return PolicySpec(name, "baseline", name, settings=settings)


def _warmswarm(name: str, warm_ttl_s: int, **settings: Any) -> PolicySpec:
    groups = {g: {"warm_ttl_s": warm_ttl_s} for g in ("lab", "guests", "compute", "course")} if warm_ttl_s else {}
    return PolicySpec(name, "warmswarm", name, settings=settings, groups=groups)


def _buffered(name: str, warm_ttl_s: int, buffer: dict[str, int]) -> PolicySpec:
    """warmswarm with a 120 s grace, a warm buffer of `buffer` machines per type and zone, the session image pulled
    into it, and the warm tier when warm_ttl_s (then no cap below the fleet's on stopped machines)."""
    settings: dict[str, Any] = {"idle_grace_s": 120.0}
    if warm_ttl_s:
        settings["max_stopped_instances"] = 200
    settings.update(warm_buffer=buffer, buffer_images=[SESSION_IMAGE])
    return _warmswarm(name, warm_ttl_s, **settings)


# warmswarm-best's warm buffer per zone, which the hot families keep (fixed) or take as their warm maximum (demand).
_WARM_BEST = {"t3.medium": 8, "t3.large": 4}


def _hot(name: str, hot: dict[str, int], warm: dict[str, int] | None = None) -> PolicySpec:
    """warmswarm-best (grace 120 s, warm tier 2 h, its warm buffer unless `warm`) plus a hot buffer of `hot` running,
    joined, pulled machines per type and zone."""
    spec = _buffered(name, 7200, _WARM_BEST if warm is None else warm)
    return replace(spec, settings={**spec.settings, "hot_buffer": hot})


def _demand(name: str, hot: dict[str, int], warm: dict[str, int] | None = None, **knobs: float) -> PolicySpec:
    """_hot with both buffers sized by demand: the counts become each type's maximum per zone, `knobs` (the demand
    rule's buffer_window_s, buffer_headroom) differ from the settings' defaults."""
    spec = _hot(name, hot, warm)
    return replace(spec, settings={**spec.settings, "buffer_sizing": "demand", **knobs})


# Each family's candidates: its knobs that the sweep of docs/simulation.md found to matter, and its buffers.
CANDIDATES: Mapping[str, tuple[PolicySpec, ...]] = {
    "baseline": (
        _baseline("fresh"),
        _baseline("hot t3.medium x1", hot_buffers={"t3.medium": 1}),
        _baseline("hot t3.medium x2", hot_buffers={"t3.medium": 2}),
        _baseline("hot t3.medium x2 + t3.large x1", hot_buffers=_HOT_T3),
        _baseline("hot t3.medium x4 + t3.large x2", hot_buffers={"t3.medium": 4, "t3.large": 2}),
        _baseline("warm t3.medium x2", warm_buffers={"t3.medium": 2}),
        _baseline("warm t3.medium x2, hot x2 + large x1", warm_buffers={"t3.medium": 2}, hot_buffers=_HOT_T3),
        _baseline("hot x2 + large x1, drained 300 s", hot_buffers=_HOT_T3, drained_to_terminating_s=300.0),
        _baseline("hot t3.medium x8 + t3.large x4", hot_buffers={"t3.medium": 8, "t3.large": 4}),
    ),
    "warmswarm": (
        _warmswarm("fresh", 0),
        _warmswarm("grace 120 s", 0, idle_grace_s=120.0),
        _warmswarm("grace 120 s, warm 2 h", 7200, idle_grace_s=120.0, max_stopped_instances=200),
        _warmswarm("grace 600 s, warm 2 h", 7200, idle_grace_s=600.0, max_stopped_instances=200),
        _buffered("grace 120 s, warm 2 h, buffer 2/zone", 7200, {"t3.medium": 2}),
        _buffered("grace 120 s, warm 2 h, buffer 4/zone", 7200, {"t3.medium": 4}),
        _buffered("grace 120 s, buffer 4/zone", 0, {"t3.medium": 4}),
        _buffered("grace 120 s, warm 2 h, buffer 8/zone", 7200, {"t3.medium": 8}),
        _buffered("grace 120 s, warm 2 h, buffer 16/zone", 7200, {"t3.medium": 16}),
        _buffered("grace 120 s, warm 2 h, buffer 8 + t3.large 4/zone", 7200, {"t3.medium": 8, "t3.large": 4}),
    ),
    # warmswarm-best plus a fixed hot buffer per zone: its size and mix, and one with a smaller warm buffer behind it.
    "warmswarm-hot": (
        _hot("hot 1/zone", {"t3.medium": 1}),
        _hot("hot 2 + large 1/zone", {"t3.medium": 2, "t3.large": 1}),
        _hot("hot 3 + large 1/zone", {"t3.medium": 3, "t3.large": 1}),
        _hot("hot 2 + large 2/zone", {"t3.medium": 2, "t3.large": 2}),
        _hot("hot 4 + large 2/zone", {"t3.medium": 4, "t3.large": 2}),
        _hot("hot 6 + large 3/zone", {"t3.medium": 6, "t3.large": 3}),
        _hot("hot 2 + large 1, warm 4 + 2/zone", {"t3.medium": 2, "t3.large": 1}, {"t3.medium": 4, "t3.large": 2}),
        # The first pass picked the smallest warm buffer tried: past that edge, and bigger hot ones on a smaller warm.
        _hot("hot 2 + large 1, warm 2 + 1/zone", {"t3.medium": 2, "t3.large": 1}, {"t3.medium": 2, "t3.large": 1}),
        _hot("hot 3 + large 1, warm 4 + 2/zone", {"t3.medium": 3, "t3.large": 1}, {"t3.medium": 4, "t3.large": 2}),
        _hot("hot 2 + large 2, warm 4 + 2/zone", {"t3.medium": 2, "t3.large": 2}, {"t3.medium": 4, "t3.large": 2}),
        _hot("hot 4 + large 2, warm 2 + 1/zone", {"t3.medium": 4, "t3.large": 2}, {"t3.medium": 2, "t3.large": 1}),
        # The second pass picked the smallest warm buffer again: a third went to none behind the hot buffer.
        _hot("hot 2 + large 1, no warm buffer", {"t3.medium": 2, "t3.large": 1}, {}),
        _hot("hot 3 + large 1, warm 2 + 1/zone", {"t3.medium": 3, "t3.large": 1}, {"t3.medium": 2, "t3.large": 1}),
    ),
    # Both buffers sized by demand (plan/demand.py): ceil(arrivals / window x refill x headroom), hot first. The refill
    # stays at the physical 240 s (launch, boot, pull, join): it enters only as refill x headroom, so the headroom
    # alone spans their product. The window, the headroom and the maxima vary; no daily budget (the ceiling bounds).
    "warmswarm-hot-demand": (
        _demand("demand, defaults (30 min, x1.5), max hot 2 + 1", {"t3.medium": 2, "t3.large": 1}),
        _demand("demand 30 min x3, max hot 2 + 1", {"t3.medium": 2, "t3.large": 1}, buffer_headroom=3.0),
        _demand("demand 2 h x1.5, max hot 2 + 1", {"t3.medium": 2, "t3.large": 1}, buffer_window_s=7200.0),
        _demand(
            "demand 2 h x3, max hot 2 + 1",
            {"t3.medium": 2, "t3.large": 1},
            buffer_window_s=7200.0,
            buffer_headroom=3.0,
        ),
        _demand("demand 30 min x3, max hot 4 + 2", {"t3.medium": 4, "t3.large": 2}, buffer_headroom=3.0),
        _demand(
            "demand 2 h x3, max hot 4 + 2",
            {"t3.medium": 4, "t3.large": 2},
            buffer_window_s=7200.0,
            buffer_headroom=3.0,
        ),
        _demand("demand 30 min x6, max hot 4 + 2", {"t3.medium": 4, "t3.large": 2}, buffer_headroom=6.0),
        _demand(
            "demand 30 min x3, max hot 4 + 2, warm 16 + 8",
            {"t3.medium": 4, "t3.large": 2},
            {"t3.medium": 16, "t3.large": 8},
            buffer_headroom=3.0,
        ),
    ),
}


@dataclass(frozen=True, slots=True)
class Job:
    seed: int
    spec: PolicySpec
    model: Model | None = None  # another model than the run's (a sensitivity variant)


def run_jobs(
    model: Model,
    jobs: Sequence[Job],
    sessions_of: Callable[[int], list[Session]],
    groups: Mapping[str, GroupProperties],
    max_instances: int,
    workers: int,
) -> list[RunResult]:
    """Every (seed, policy) run, in the order given; in `workers` processes when more than one."""
    days = {seed: sessions_of(seed) for seed in sorted({j.seed for j in jobs})}
    if workers <= 1 or len(jobs) <= 1:
        return [run_policy(j.model or model, j.spec, days[j.seed], groups, max_instances) for j in jobs]
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = [
            pool.submit(run_policy, j.model or model, j.spec, days[j.seed], dict(groups), max_instances) for j in jobs
        ]
        return [f.result() for f in futures]


def objective_s(result: RunResult) -> float:
    """What "at its best" minimises: the median and the tail wait, alike."""
    return result.wait_p50_s + result.wait_p95_s


def pick(results: Sequence[RunResult], ceiling_usd: float) -> RunResult:
    """The candidate with the lowest p50 + p95 among those that ran every session within the ceiling; the cheaper
    on a tie, the first listed on an exact one. Raises when none qualifies (the ceiling is then too low)."""
    allowed = [r for r in results if r.never_ran == 0 and r.bill.total_usd <= ceiling_usd]
    if not allowed:
        raise ValueError(f"no candidate ran every session within ${ceiling_usd:,.2f}")
    return min(allowed, key=lambda r: (objective_s(r), r.bill.total_usd))


def choice_table(family: str, results: Sequence[RunResult], chosen: RunResult, ceiling_usd: float) -> str:
    lines = [
        f"### {family} (ceiling ${ceiling_usd:,.2f})",
        "",
        "| candidate | cost | p50 s | p95 s | p50 + p95 | first p50 / p95 s | returns p50 / p95 s | within ceiling |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        mark = " **chosen**" if r is chosen else ""
        first, back = _waits(r, True), _waits(r, False)
        lines.append(
            f"| {r.name}{mark} | ${r.bill.total_usd:,.2f} | {r.wait_p50_s:,.0f} | {r.wait_p95_s:,.0f} |"
            f" {objective_s(r):,.0f} | {_pair(first)} | {_pair(back)} |"
            f" {'yes' if r.bill.total_usd <= ceiling_usd else 'no'} |"
        )
    return "\n".join(lines)


def _waits(result: RunResult, first: bool) -> list[float]:
    return sorted(sum(p.durations_s) for p in result.phases if p.first is first)


def class_wait_p50_s(result: RunResult, first: bool) -> float:
    """The median wait of the owners' first sessions of the day (first) or of the returns."""
    return percentile(_waits(result, first), 50)


def _pair(waits: Sequence[float]) -> str:
    return f"{percentile(waits, 50):,.0f} / {percentile(waits, 95):,.0f}" if waits else "–"


# -- the held-out table --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Figure:
    """One row of the fair table: its name, how to read it from a run, how to print a value."""

    name: str
    read: Callable[[RunResult], float]
    form: str  # a format spec for one value


def _hit_rate(result: RunResult) -> float:
    return result.hit_rate_within_ttl


def _first_wait(p: float) -> Callable[[RunResult], float]:
    return lambda r: percentile(_waits(r, True), p)


def _return_wait(p: float) -> Callable[[RunResult], float]:
    return lambda r: percentile(_waits(r, False), p)


FIGURES: tuple[Figure, ...] = (
    Figure("total cost, $", lambda r: r.bill.total_usd, ",.2f"),
    Figure("wait p50, s", lambda r: r.wait_p50_s, ",.0f"),
    Figure("wait p95, s", lambda r: r.wait_p95_s, ",.0f"),
    Figure("first sessions' wait p50, s", _first_wait(50), ",.0f"),
    Figure("first sessions' wait p95, s", _first_wait(95), ",.0f"),
    Figure("returns' wait p50, s", _return_wait(50), ",.0f"),
    Figure("returns' wait p95, s", _return_wait(95), ",.0f"),
    Figure("cache hits, returns within the TTL, %", lambda r: 100.0 * _hit_rate(r), ".1f"),
    Figure("cache hits, all returns of cache owners, %", lambda r: 100.0 * r.hit_rate_overall, ".1f"),
    Figure("returns asking for more resources", lambda r: float(r.bigger_returns), ",.0f"),
    Figure("data downloaded, GB", lambda r: r.downloaded_gb, ",.0f"),
    Figure("sessions on a machine another owner had used", lambda r: float(r.reused_across_owners), ",.0f"),
    Figure("machines launched", lambda r: float(r.machines_launched), ",.0f"),
    Figure("sessions", lambda r: float(r.sessions), ",.0f"),
)


def _cell(values: Sequence[float], form: str) -> str:
    present = [v for v in values if not math.isnan(v)]
    if not present:
        return "–"
    mean = sum(present) / len(present)
    return f"{mean:{form}} ({min(present):{form}}–{max(present):{form}})"


def fair_table(by_policy: Mapping[str, Sequence[RunResult]]) -> str:
    """Per policy, each figure's mean over the held-out seeds and, in brackets, its range."""
    names = list(by_policy)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for figure in FIGURES:
        cells = [_cell([figure.read(r) for r in by_policy[n]], figure.form) for n in names]
        lines.append(f"| {figure.name} | " + " | ".join(cells) + " |")
    references = [names[0]] + [BEST_BASELINE] * (BEST_BASELINE in names[1:])
    for row, reference in enumerate(references, start=3):
        base = by_policy[reference]
        ratios = [
            _cell([r.bill.total_usd / b.bill.total_usd for r, b in zip(by_policy[n], base, strict=True)], ".2f")
            for n in names
        ]
        lines.insert(row, f"| cost vs {reference}, × | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def pooled(by_policy: Mapping[str, Sequence[RunResult]]) -> list[RunResult]:
    """One result per policy for the phase table and the pictures: every held-out seed's sessions and waits, the
    mean bill, and the first held-out seed's fleet over the day (a picture of one day, not of an average)."""
    out = []
    for results in by_policy.values():
        phases = tuple(p for r in results for p in r.phases)
        waits = tuple(sorted(w for r in results for w in r.waits_s))
        out.append(replace(results[0], phases=phases, waits_s=waits, bill=_mean_bill([r.bill for r in results])))
    return out


def _mean_bill(bills: Sequence[Bill]) -> Bill:
    def mean(read: Callable[[Bill], float]) -> float:
        return sum(read(b) for b in bills) / len(bills)

    types = sorted({t for b in bills for t in b.instance_hours_by_type})
    return Bill(
        instance_usd=mean(lambda b: b.instance_usd),
        instance_hours=mean(lambda b: b.instance_hours),
        instance_hours_by_type={
            t: sum(b.instance_hours_by_type.get(t, 0.0) for b in bills) / len(bills) for t in types
        },
        root_gb_months=mean(lambda b: b.root_gb_months),
        cache_gb_months=mean(lambda b: b.cache_gb_months),
        root_usd=mean(lambda b: b.root_usd),
        cache_usd=mean(lambda b: b.cache_usd),
    )


def fair_report(by_policy: Mapping[str, Sequence[RunResult]], seeds: Sequence[int], source: str) -> str:
    seeds_text = ", ".join(str(s) for s in seeds)
    lines = [
        f"# The fair day: {source}, held-out seeds {seeds_text}",
        "",
        f"Each cell: the mean over seeds {seeds_text} and, in brackets, the range. The `-best` policies' knobs were"
        f" chosen on seed {CHOOSING_SEED} (`warmswarm-simulate choose`), which is not among them.",
        "",
        fair_table(by_policy),
        "",
        f"## Waits by phase, median / p95 s, every session of seeds {seeds_text} pooled",
        "",
        "Phases: " + "; ".join(PHASES) + ". Each ends at its event, so a session's phases add up to its wait.",
        "",
        phase_table(pooled(by_policy)),
        "",
    ]
    return "\n".join(lines)
