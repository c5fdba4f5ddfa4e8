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

from warmswarm_models import GroupProperties

from warmswarm_simulator.billing import Bill
from warmswarm_simulator.candidates import CANDIDATES as CANDIDATES
from warmswarm_simulator.config import Model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.phases import PHASES
from warmswarm_simulator.platform import START_PATHS
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.report import phase_table
from warmswarm_simulator.reserved import DayReservation
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
    "warmswarm-recycle-best",
)
# The fair table's second cost ratio (the targets' reference): the best baseline.
BEST_BASELINE = "baseline-best"
# A candidate may cost at most this much more than the fresh-install baseline on the choosing seed: waits bought
# with an unbounded bill are not "at its best". 1.3x is about what the reviewer's fair warmswarm cost ($93 against
# $75): the ceiling admits every policy the review found competitive, and no standing fleet.
COST_CEILING = 1.3


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
    reservations: Sequence[DayReservation] = (),
) -> list[RunResult]:
    """Every (seed, policy) run, in the order given; in `workers` processes when more than one. `reservations`: the
    day's classes, for the policies that declare them."""
    days = {seed: sessions_of(seed) for seed in sorted({j.seed for j in jobs})}
    booked = tuple(reservations)
    if workers <= 1 or len(jobs) <= 1:
        return [run_policy(j.model or model, j.spec, days[j.seed], groups, max_instances, booked) for j in jobs]
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = [
            pool.submit(run_policy, j.model or model, j.spec, days[j.seed], dict(groups), max_instances, booked)
            for j in jobs
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
        f"## Start paths: how the first run of each session got its machine, seeds {seeds_text}",
        "",
        start_path_table(by_policy),
        "",
    ]
    return "\n".join(lines)


def start_path_table(by_policy: Mapping[str, Sequence[RunResult]]) -> str:
    """Per policy, each start path's share of the sessions that ran (platform.START_PATHS), every seed's sessions
    pooled, in %: a column adds up to 100 (to the rounding)."""
    names = list(by_policy)
    counts = {
        name: {path: sum(dict(r.start_paths).get(path, 0) for r in results) for path in START_PATHS}
        for name, results in by_policy.items()
    }
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for path in START_PATHS:
        cells = []
        for name in names:
            total = sum(counts[name].values())
            cells.append(f"{100.0 * counts[name][path] / total:.1f}" if total else "–")
        lines.append(f"| {path}, % | " + " | ".join(cells) + " |")
    return "\n".join(lines)
