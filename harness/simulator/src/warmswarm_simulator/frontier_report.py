"""make simulate's frontiers: each family's candidates over the held-out seeds, its cost-wait frontiers, and each
warmswarm frontier point's waits over the baseline frontier's at the same daily cost."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from warmswarm_simulator.frontier import Point, equal_cost_ratio, frontier, wait_at_cost
from warmswarm_simulator.results import RunResult, percentile

BASELINE = "baseline"


def _waits(result: RunResult, first: bool) -> list[float]:
    return sorted(sum(p.durations_s) for p in result.phases if p.first is first)


@dataclass(frozen=True, slots=True)
class Measure:
    """A wait the frontiers are drawn for: its key in fair.json, its name on the page, how to read it from a run."""

    key: str
    name: str
    read: Callable[[RunResult], float]


MEASURES: tuple[Measure, ...] = (
    Measure("p50_s", "wait p50", lambda r: r.wait_p50_s),
    Measure("p95_s", "wait p95", lambda r: r.wait_p95_s),
    Measure("first_p50_s", "first sessions' p50", lambda r: percentile(_waits(r, True), 50)),
    Measure("returns_p50_s", "returns' p50", lambda r: percentile(_waits(r, False), 50)),
)
# The frontiers printed as tables per family (the other measures' frontiers are in the ratio tables and fair.json).
TABLED = ("p50_s", "p95_s")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate's means over the held-out seeds."""

    family: str
    name: str
    cost_usd: float
    waits_s: Mapping[str, float]  # Measure.key -> the mean over the seeds
    never_ran: int  # sessions left unrun, summed over the seeds: such a candidate is on no frontier

    def point(self, key: str) -> Point:
        return Point(self.name, self.cost_usd, self.waits_s[key])


def _mean(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else math.nan


def summarise(family: str, name: str, results: Sequence[RunResult]) -> Candidate:
    return Candidate(
        family,
        name,
        _mean([r.bill.total_usd for r in results]),
        {m.key: _mean([m.read(r) for r in results]) for m in MEASURES},
        sum(r.never_ran for r in results),
    )


def family_frontier(candidates: Sequence[Candidate], key: str) -> list[Point]:
    return frontier(c.point(key) for c in candidates if c.never_ran == 0 and not math.isnan(c.waits_s[key]))


@dataclass(frozen=True, slots=True)
class Ratio:
    """A warmswarm frontier point read against the baseline's frontier at its cost. `flat`: dearer than the
    baseline frontier's dearest point, yet not dearer than the dearest baseline candidate tried; every baseline
    candidate there is beaten by that point, so the baseline's wait for the money is that point's (the reading is
    flat, not interpolated). None: the baseline has no candidate as cheap, or none as dear."""

    family: str
    measure: str
    point: Point
    baseline_wait_s: float | None
    ratio: float | None
    flat: bool = False


def read_reference(point: Point, reference: Sequence[Point], dearest_tried_usd: float) -> Ratio:
    """`point` against the `reference` frontier (family and measure left blank for the caller)."""
    wait_s = wait_at_cost(reference, point.cost_usd)
    if wait_s is not None:
        return Ratio("", "", point, wait_s, equal_cost_ratio(point, reference))
    if reference and reference[-1].cost_usd < point.cost_usd <= dearest_tried_usd:
        wait_s = reference[-1].wait_s
        return Ratio("", "", point, wait_s, point.wait_s / wait_s if wait_s > 0 else None, flat=True)
    return Ratio("", "", point, None, None)


def ratios(by_family: Mapping[str, Sequence[Candidate]]) -> list[Ratio]:
    """Every warmswarm family's frontier points, per measure, over the baseline frontier at the same cost."""
    out = []
    dearest_usd = max(c.cost_usd for c in by_family[BASELINE])
    for measure in MEASURES:
        reference = family_frontier(by_family[BASELINE], measure.key)
        for family, candidates in by_family.items():
            if family == BASELINE:
                continue
            for point in family_frontier(candidates, measure.key):
                read = read_reference(point, reference, dearest_usd)
                out.append(replace(read, family=family, measure=measure.key))
    return out


def _num(value: float | None, form: str) -> str:
    return "–" if value is None or math.isnan(value) else f"{value:{form}}"


def candidates_table(candidates: Sequence[Candidate]) -> str:
    """Every candidate of a family, its means, and the frontiers it is on."""
    lines = [
        "| candidate | cost $ | " + " | ".join(f"{m.name} s" for m in MEASURES) + " | on the frontier of |",
        "|---|---:|" + "---:|" * len(MEASURES) + "---|",
    ]
    on = {m.key: {p.policy for p in family_frontier(candidates, m.key)} for m in MEASURES}
    for c in candidates:
        waits = " | ".join(_num(c.waits_s[m.key], ",.0f") for m in MEASURES)
        fronts = ", ".join(m.name for m in MEASURES if c.name in on[m.key]) or "–"
        unrun = f" ({c.never_ran} sessions never ran)" if c.never_ran else ""
        lines.append(f"| {c.name}{unrun} | {c.cost_usd:,.2f} | {waits} | {fronts} |")
    return "\n".join(lines)


def frontier_table(candidates: Sequence[Candidate], key: str) -> str:
    name = next(m.name for m in MEASURES if m.key == key)
    lines = [f"| candidate | cost $ | {name} s |", "|---|---:|---:|"]
    lines += [f"| {p.policy} | {p.cost_usd:,.2f} | {p.wait_s:,.0f} |" for p in family_frontier(candidates, key)]
    return "\n".join(lines)


def ratio_table(rows: Sequence[Ratio], key: str) -> str:
    name = next(m.name for m in MEASURES if m.key == key)
    lines = [
        f"| family | candidate | cost $ | {name} s | baseline's at that cost, s | ratio |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.measure == key:
            lines.append(
                f"| {r.family} | {r.point.policy} | {r.point.cost_usd:,.2f} | {r.point.wait_s:,.0f} |"
                f" {_num(r.baseline_wait_s, ',.0f')}{' (flat)' if r.flat else ''} | {_num(r.ratio, '.2f')} |"
            )
    return "\n".join(lines)


def frontier_report(by_family: Mapping[str, Sequence[Candidate]], seeds: Sequence[int]) -> str:
    seeds_text = ", ".join(str(s) for s in seeds)
    rows = ratios(by_family)
    lines = [
        f"## The frontiers: every candidate, means over held-out seeds {seeds_text}",
        "",
        "Buffers in the names are machines in the whole cluster (t3.medium + t3.large): warmswarm's per-zone counts"
        " x 3 zones, the baseline's as osparc counts them. A candidate is on a frontier when no other of its family"
        " costs as little or less and waits as little or less (one of them strictly); one that left sessions unrun"
        " is on none.",
        "",
    ]
    for family, candidates in by_family.items():
        lines += [f"### {family}", "", candidates_table(candidates), ""]
        for key in TABLED:
            name = next(m.name for m in MEASURES if m.key == key)
            lines += [f"Frontier, daily cost against {name}:", "", frontier_table(candidates, key), ""]
    lines += [
        "## At equal cost: warmswarm's waits over the baseline's",
        "",
        "Each warmswarm family's frontier points, per wait: the wait over the baseline frontier's wait at the same"
        " daily cost, read on the line between the two baseline frontier candidates around that cost. '(flat)': dearer"
        " than the baseline frontier's dearest point but not than its dearest candidate tried, every one of which that"
        " point beats: the baseline's wait for the money is that point's. '–': no baseline candidate as cheap, or as"
        " dear (no extrapolation). Below 1: warmswarm waits less for the money.",
        "",
    ]
    for measure in MEASURES:
        lines += [f"### {measure.name}", "", ratio_table(rows, measure.key), ""]
    return "\n".join(lines)


def frontier_json(by_family: Mapping[str, Sequence[Candidate]], seeds: Sequence[int]) -> dict[str, Any]:
    """fair.json's frontier part: every candidate's means, each family's frontier per wait, every ratio."""
    return {
        "seeds": list(seeds),
        "families": {
            family: {
                "candidates": [
                    {
                        "name": c.name,
                        "cost_usd": c.cost_usd,
                        "never_ran": c.never_ran,
                        **{k: None if math.isnan(v) else v for k, v in c.waits_s.items()},
                    }
                    for c in candidates
                ],
                "frontiers": {m.key: [p.policy for p in family_frontier(candidates, m.key)] for m in MEASURES},
            }
            for family, candidates in by_family.items()
        },
        "equal_cost_ratios": [
            {
                "family": r.family,
                "measure": r.measure,
                "candidate": r.point.policy,
                "cost_usd": r.point.cost_usd,
                "wait_s": r.point.wait_s,
                "baseline_wait_s": r.baseline_wait_s,
                "ratio": r.ratio,
                "flat": r.flat,
            }
            for r in ratios(by_family)
        ],
    }
