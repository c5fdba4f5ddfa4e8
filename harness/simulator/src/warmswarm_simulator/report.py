"""The report's words and numbers: the table per policy, API calls by kind, the target check, results as JSON."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from warmswarm_simulator.phases import PHASES, PhaseSummary
from warmswarm_simulator.results import RunResult, percentile

# The target for warmswarm against the baseline on the default day.
TARGET_COST_RATIO = 0.8
TARGET_HIT_RATE = 0.9


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _s(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:,.0f}"


def _pct(value: float) -> str:
    return "–" if math.isnan(value) else f"{100 * value:.1f} %"


def _resumed(r: RunResult) -> str:
    if not r.resumed_waits_s:
        return "0"
    return f"{len(r.resumed_waits_s)}: {_s(r.resumed_wait_p50_s)} / {_s(r.resumed_waits_s[-1])}"


def _bigger(r: RunResult) -> str:
    if not r.bigger_return_waits_s:
        return f"{r.bigger_hits}/{r.bigger_returns}"
    waits = f"{_s(r.bigger_return_wait_p50_s)} / {_s(r.bigger_return_waits_s[-1])}"
    return f"{r.bigger_hits}/{r.bigger_returns}; {waits}"


def _from_buffer(r: RunResult) -> str:
    if not r.buffer_waits_s:
        return "0"
    return (
        f"{len(r.buffer_waits_s)} ({r.buffer_first_sessions} first): {_s(r.buffer_wait_p50_s)}"
        f" / {_s(r.buffer_waits_s[-1])}"
    )


def table(results: Sequence[RunResult]) -> str:
    """One column per policy: cost and its breakdown, waits, the cache, data, machines, API calls."""
    base = results[0]
    rows: list[tuple[str, list[str]]] = [
        ("total cost", [_usd(r.bill.total_usd) for r in results]),
        ("cost vs " + base.name, [f"{r.bill.total_usd / base.bill.total_usd:.2f}×" for r in results]),
        ("instances", [f"{_usd(r.bill.instance_usd)} ({r.bill.instance_hours:,.1f} h)" for r in results]),
        ("root disks (gp3)", [f"{_usd(r.bill.root_usd)} ({r.bill.root_gb_months:,.1f} GB-mo)" for r in results]),
        ("cache volumes (gp3)", [f"{_usd(r.bill.cache_usd)} ({r.bill.cache_gb_months:,.1f} GB-mo)" for r in results]),
        ("wait to running p50, s", [_s(r.wait_p50_s) for r in results]),
        ("wait to running p95, s", [_s(r.wait_p95_s) for r in results]),
        ("wait to running max, s", [_s(r.wait_max_s) for r in results]),
        ("sessions run / total", [f"{r.sessions - r.never_ran} / {r.sessions}" for r in results]),
        (
            "cache hits, returns within the TTL",
            [f"{_pct(r.hit_rate_within_ttl)} ({r.hits_within_ttl}/{r.returns_within_ttl})" for r in results],
        ),
        (
            "cache hits, all returns of cache owners",
            [f"{_pct(r.hit_rate_overall)} ({r.hits_overall}/{r.returns_overall})" for r in results],
        ),
        ("returns asking for more resources: hits; wait p50 / max, s", [_bigger(r) for r in results]),
        ("data downloaded, GB", [f"{r.downloaded_gb:,.0f}" for r in results]),
        ("peak machines", [str(r.peak_machines) for r in results]),
        ("machines launched", [str(r.machines_launched) for r in results]),
        ("cache volumes created", [str(r.volumes_created) for r in results]),
        ("machines stopped / resumed (warm tier)", [f"{r.machines_stopped} / {r.machines_resumed}" for r in results]),
        (
            "stopped machine-hours (their root disks)",
            [f"{r.stopped_hours:,.1f} h ({_usd(r.stopped_root_usd)})" for r in results],
        ),
        ("peak machines stopped", [str(r.peak_stopped) for r in results]),
        ("sessions on a resumed machine: wait p50 / max, s", [_resumed(r) for r in results]),
        (
            "warm buffer, billed for the day's 24 h (in the cost above)",
            [f"{_usd(r.bill.buffer_usd)} ({r.bill.buffer_hours:,.1f} machine-h)" for r in results],
        ),
        (
            "warm buffer: machines stopped / started for a claim",
            [f"{r.buffer_stops} / {r.buffer_starts}" for r in results],
        ),
        ("sessions from the buffer (first of the day): wait p50 / max, s", [_from_buffer(r) for r in results]),
        (
            "owners' first sessions of the day: wait p50, s",
            [f"{_s(r.first_wait_p50_s)} ({len(r.first_waits_s)})" for r in results],
        ),
        ("EC2 API calls (throttled)", [f"{sum(n for *_, n in r.api_calls):,} ({r.throttled})" for r in results]),
        ("sessions interrupted", [str(r.interruptions) for r in results]),
        ("sessions on a machine another owner had used", [str(r.reused_across_owners) for r in results]),
        ("world quiet again (but a standing buffer) at", [f"day + {r.end_s / 3600:.1f} h" for r in results]),
    ]
    header = "| | " + " | ".join(r.name for r in results) + " |"
    rule = "|---|" + "---:|" * len(results)
    lines = [header, rule, *("| " + name + " | " + " | ".join(cells) + " |" for name, cells in rows)]
    return "\n".join(lines)


def phase_table(results: Sequence[RunResult]) -> str:
    """Each policy's waits cut into phases: median / p95 of each, first sessions and returns apart (seconds)."""
    lines = [
        "| policy | sessions | " + " | ".join(PHASES) + " | wait |",
        "|---|---|" + "---:|" * (len(PHASES) + 1),
    ]
    for r in results:
        for kind, summary, waits in (
            ("first", r.first_phases, sorted(sum(p.durations_s) for p in r.phases if p.first)),
            ("returns", r.return_phases, sorted(sum(p.durations_s) for p in r.phases if not p.first)),
        ):
            lines.append(f"| {r.name} | {kind}: {summary.sessions} | " + _phase_cells(summary, waits) + " |")
    return "\n".join(lines)


def _phase_cells(summary: PhaseSummary, waits_s: Sequence[float]) -> str:
    cells = [f"{_s(p50)} / {_s(p95)}" for p50, p95 in zip(summary.p50_s, summary.p95_s, strict=True)]
    if waits_s:
        cells.append(f"{_s(percentile(waits_s, 50))} / {_s(percentile(waits_s, 95))}")
    else:
        cells.append("–")
    return " | ".join(cells)


def api_table(results: Sequence[RunResult]) -> str:
    """Calls per EC2 operation and policy: "ok" calls, and in brackets any other answer (throttles, no capacity)."""
    operations = sorted({op for r in results for op, _, _ in r.api_calls})
    lines = ["| EC2 operation | " + " | ".join(r.name for r in results) + " |", "|---|" + "---:|" * len(results)]
    for op in operations:
        cells = []
        for r in results:
            ok = sum(n for o, code, n in r.api_calls if o == op and code == "ok")
            other = ", ".join(f"{n} {code}" for o, code, n in r.api_calls if o == op and code != "ok")
            cells.append(f"{ok:,}" + (f" ({other})" if other else ""))
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target_check(results: Sequence[RunResult], candidate: str) -> str:
    """Whether `candidate` meets the issue's target against the first (baseline) result, with the figures."""
    base = results[0]
    run = next(r for r in results if r.name == candidate)
    ratio = run.bill.total_usd / base.bill.total_usd
    checks = [
        (ratio <= TARGET_COST_RATIO, f"cost {ratio:.2f}× the baseline (target ≤ {TARGET_COST_RATIO}×)"),
        (
            run.wait_p95_s <= base.wait_p95_s,
            f"p95 wait {_s(run.wait_p95_s)} s against the baseline's {_s(base.wait_p95_s)} s (target ≤)",
        ),
        (
            run.hit_rate_within_ttl >= TARGET_HIT_RATE,
            f"cache hit rate {_pct(run.hit_rate_within_ttl)} for returns within the TTL (target ≥ 90 %)",
        ),
    ]
    verdict = "met" if all(ok for ok, _ in checks) else "NOT met"
    lines = [f"{candidate}: target {verdict}"]
    lines += [f"  - {'✓' if ok else '✗'} {text}" for ok, text in checks]
    return "\n".join(lines)


def results_json(results: Sequence[RunResult], meta: dict[str, Any]) -> str:
    def one(r: RunResult) -> dict[str, Any]:
        data = asdict(r)
        data.pop("fleet_series")
        data.pop("running_series")
        series = data.pop("buffer_series")
        hot_h, warm_h = r.buffer_held_hours()
        data["buffer_held"] = {
            "hot_machine_hours": round(hot_h, 2),
            "warm_machine_hours": round(warm_h, 2),
            "hot_peak": max((hot for _, hot, _ in series), default=0),
            "warm_peak": max((warm for _, _, warm in series), default=0),
        }
        data["phases"] = [{**asdict(p), "durations_s": [round(d, 3) for d in p.durations_s]} for p in r.phases]
        data["waits_s"] = [round(w, 3) for w in r.waits_s]
        data["bill"]["total_usd"] = r.bill.total_usd
        data["wait_p50_s"], data["wait_p95_s"], data["wait_max_s"] = r.wait_p50_s, r.wait_p95_s, r.wait_max_s
        data["hit_rate_within_ttl"] = None if math.isnan(r.hit_rate_within_ttl) else r.hit_rate_within_ttl
        data["hit_rate_overall"] = None if math.isnan(r.hit_rate_overall) else r.hit_rate_overall
        data["bigger_return_waits_s"] = [round(w, 3) for w in r.bigger_return_waits_s]
        return data

    return json.dumps({"meta": meta, "policies": [one(r) for r in results]}, indent=1, sort_keys=True) + "\n"
