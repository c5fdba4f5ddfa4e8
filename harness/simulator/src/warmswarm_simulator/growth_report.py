"""Volumes that grow (issue 34): each candidate's cache spend against its fixed-volume twin's, at what waits."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from warmswarm_simulator.phases import SessionPhases
from warmswarm_simulator.results import RunResult, percentile

# The families whose candidates grow their volumes (candidates.py): their report is this table.
GROW_FAMILIES = ("warmswarm-grow", "warmswarm-grow-choice")
# What a growing candidate's name adds to its fixed-volume twin's (candidates._growing).
_GROWING = ", cache "


def fixed_twin(name: str) -> str:
    """The candidate with today's fixed volumes that a growing one is compared with: its name without the cache part
    (a fixed candidate is its own twin)."""
    return name.split(_GROWING, 1)[0]


def _waits(phases: Sequence[SessionPhases], first: bool, p: float) -> float:
    return percentile(sorted(sum(s.durations_s) for s in phases if s.first is first), p)


def mean_data_gb(result: RunResult) -> float:
    """The mean of the owners' data on their volumes when last seen (NaN when nobody wrote to a volume)."""
    data = result.owner_data_gb
    return sum(data) / len(data) if data else math.nan


Read = Callable[[RunResult], float]


def _first(p: float) -> Read:
    return lambda r: _waits(r.phases, True, p)


def _returns(p: float) -> Read:
    return lambda r: _waits(r.phases, False, p)


# Each column: its heading and the figures it prints, one value a run each, joined by " / " in the cell.
COLUMNS: tuple[tuple[str, tuple[Read, ...], str], ...] = (
    ("cost $", (lambda r: r.bill.total_usd,), ",.2f"),
    ("cache GB-mo", (lambda r: r.bill.cache_gb_months,), ",.1f"),
    ("cache $", (lambda r: r.bill.cache_usd,), ",.2f"),
    ("p50 / p95 s", (lambda r: r.wait_p50_s, lambda r: r.wait_p95_s), ",.0f"),
    ("first sessions p50 / p95 s", (_first(50), _first(95)), ",.0f"),
    ("returns p50 / p95 s", (_returns(50), _returns(95)), ",.0f"),
    ("hits, all returns %", (lambda r: 100.0 * r.hit_rate_overall,), ".1f"),
    ("sessions on a full volume", (lambda r: float(r.full_sessions),), ",.0f"),
    ("hours waited on a full volume", (lambda r: r.full_hours,), ",.1f"),
    ("volumes grown", (lambda r: float(r.volumes_grown),), ",.0f"),
    ("owner's data, mean GB", (mean_data_gb,), ".2f"),
)


def cell(values: Sequence[float], form: str) -> str:
    """The mean of `values` and, when there are several, their range in brackets; "–" when none is a number."""
    present = [v for v in values if not math.isnan(v)]
    if not present:
        return "–"
    mean = sum(present) / len(present)
    if len(present) == 1:
        return f"{mean:{form}}"
    return f"{mean:{form}} ({min(present):{form}}–{max(present):{form}})"


def cache_ratio(grown: Sequence[RunResult], fixed: Sequence[RunResult]) -> list[float]:
    """Per seed, the growing candidate's cache-volume spend over its fixed twin's."""
    pairs = zip(grown, fixed, strict=True)
    return [g.bill.cache_usd / f.bill.cache_usd if f.bill.cache_usd else math.nan for g, f in pairs]


def growth_table(by_candidate: Mapping[str, Sequence[RunResult]]) -> str:
    """Per candidate (one run a seed, the same seeds for all), each figure's mean and range over the seeds, and its
    cache spend over its fixed twin's, when that twin ran too."""
    header = ["candidate", "cache vs fixed twin, ×", *(c[0] for c in COLUMNS)]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for name, runs in by_candidate.items():
        twin = by_candidate.get(fixed_twin(name))
        ratio = cell(cache_ratio(runs, twin), ".2f") if twin is not None and fixed_twin(name) != name else "–"
        cells = [" / ".join(cell([read(r) for r in runs], form) for read in reads) for _, reads, form in COLUMNS]
        lines.append(f"| {name} | {ratio} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def growth_report(
    families: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    runs: Mapping[tuple[int, str, str], RunResult],
    baseline: Mapping[str, Sequence[RunResult]] | None = None,
) -> str:
    """The section of `fair`'s report for the growing families that ran, with `baseline`'s rows (its best: no cache,
    its own machines) for scale."""
    seeds_text = ", ".join(map(str, seeds))
    text = ""
    for family, names in families.items():
        if family not in GROW_FAMILIES:
            continue
        by_candidate = {**(baseline or {}), **{n: [runs[(s, family, n)] for s in seeds] for n in names}}
        text += f"### Volumes that grow: {family}, mean (range) over seeds {seeds_text}\n\n"
        text += growth_table(by_candidate) + "\n\n"
    return text
