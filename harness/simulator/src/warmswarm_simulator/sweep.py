"""Which knobs matter: warmswarm's settings and the cache TTL varied one at a time from a fresh install, on one trace.

The baseline runs once for the ratios. The variants' results go to sweep.md; the tuned policy in policies.toml takes
the values that moved cost or wait the right way without costing the other (chosen by a person reading this table).
"""

from __future__ import annotations

from pathlib import Path

from warmswarm_simulator.config import Model
from warmswarm_simulator.dayspec import DaySpec
from warmswarm_simulator.policies import Policies, PolicySpec
from warmswarm_simulator.report import table
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.runs import run_many
from warmswarm_simulator.workload import Session

# (variant name, autoscaler settings, group overrides): one knob at a time from a fresh install, then combinations.
GRID: tuple[tuple[str, dict[str, float], dict[str, dict[str, int]]], ...] = (
    ("idle_grace_s=60", {"idle_grace_s": 60.0}, {}),
    ("idle_grace_s=120", {"idle_grace_s": 120.0}, {}),
    ("idle_grace_s=600", {"idle_grace_s": 600.0}, {}),
    ("idle_grace_s=1800", {"idle_grace_s": 1800.0}, {}),
    ("max_launches_per_cycle=20", {"max_launches_per_cycle": 20}, {}),
    ("busy_resync_interval_s=1", {"busy_resync_interval_s": 1.0}, {}),
    ("debounce_s=0.1", {"debounce_s": 0.1}, {}),
    ("lab ttl 12 h", {}, {"lab": {"cache_ttl_s": 12 * 3600}}),
    ("lab ttl 2 d", {}, {"lab": {"cache_ttl_s": 2 * 86400}}),
    ("busy 1 s + debounce 0.1 s", {"busy_resync_interval_s": 1.0, "debounce_s": 0.1}, {}),
    (
        "grace 120 s + busy 1 s + debounce 0.1 s",
        {"idle_grace_s": 120.0, "busy_resync_interval_s": 1.0, "debounce_s": 0.1},
        {},
    ),
)


def variants() -> list[PolicySpec]:
    specs = [PolicySpec("fresh", "warmswarm", "warmswarm, fresh install")]
    specs += [PolicySpec(name, "warmswarm", name, settings=knobs, groups=groups) for name, knobs, groups in GRID]
    return specs


def sweep(
    model: Model, policies: Policies, spec: DaySpec, sessions: list[Session], out: Path, jobs: int, source: str
) -> str:
    tried = [policies.specs[0], *variants(), *(s for s in policies.specs[1:] if s.name == "warmswarm-tuned")]
    timed = run_many(model, tried, sessions, spec.groups, policies.max_instances, jobs)
    results: list[RunResult] = [t.result for t in timed]
    text = f"# Sweep: {source}, {len(sessions)} sessions\n\nEach column changes one knob from a fresh install.\n\n"
    text += _compact(results) + "\n\n## Every figure\n\n" + table(results) + "\n"
    (out / "sweep.md").write_text(text)
    return text


def _compact(results: list[RunResult]) -> str:
    base = results[0]
    lines = [
        "| variant | cost | vs baseline | p50 s | p95 s | max s | hits, returns within TTL | hits, within a day"
        " | cache GB-mo | instance h |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | ${r.bill.total_usd:,.2f} | {r.bill.total_usd / base.bill.total_usd:.2f}× |"
            f" {r.wait_p50_s:,.0f} | {r.wait_p95_s:,.0f} | {r.wait_max_s:,.0f} |"
            f" {r.hits_within_ttl}/{r.returns_within_ttl} | {r.hits_within_day}/{r.returns_within_day} |"
            f" {r.bill.cache_gb_months:,.1f} |"
            f" {r.bill.instance_hours:,.1f} |"
        )
    return "\n".join(lines)
