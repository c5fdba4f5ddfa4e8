"""Issue 21's targets for the hot policies, and how each session started (a running machine, a restarted one, a cold
launch), both printed from the runs rather than worked out by hand."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from warmswarm_simulator.phases import SessionPhases
from warmswarm_simulator.results import RunResult, percentile

# A boot to join shorter than this is a restart (StartInstances 15 s + restart_boot_s 40 s, model.toml) or a machine
# launched before the session came, already booting (the baseline has no other); longer, a cold launch
# (boot_to_join_s 120 s). A session with no launch call and no boot ran on a machine already running.
RESTART_BELOW_S = 70.0
_LAUNCH, _BOOT = 0, 1
PATHS = ("on a running machine", "short boot", "cold launch")


def start_path(session: SessionPhases) -> str:
    launch_s, boot_s = session.durations_s[_LAUNCH], session.durations_s[_BOOT]
    if launch_s == 0 and boot_s == 0:
        return PATHS[0]
    return PATHS[1] if boot_s < RESTART_BELOW_S else PATHS[2]


def start_path_table(by_policy: Mapping[str, Sequence[RunResult]]) -> str:
    """Per policy, first sessions and returns: the share that started each way and its median wait, every seed's
    sessions pooled."""
    lines = [
        "| policy | sessions | " + " | ".join(PATHS) + " |",
        "|---|---|" + "---:|" * len(PATHS),
    ]
    for name, results in by_policy.items():
        for first, label in ((True, "first"), (False, "returns")):
            sessions = [s for r in results for s in r.phases if s.first is first]
            cells = []
            for path in PATHS:
                waits = sorted(sum(s.durations_s) for s in sessions if start_path(s) == path)
                share = 100.0 * len(waits) / len(sessions) if sessions else 0.0
                cells.append(f"{share:.1f} %, p50 {percentile(waits, 50):,.0f} s" if waits else f"{share:.1f} %")
            lines.append(f"| {name} | {label}, {len(sessions):,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _waits(result: RunResult, first: bool) -> list[float]:
    return sorted(sum(p.durations_s) for p in result.phases if p.first is first)


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    limit: float
    read: Callable[[RunResult, RunResult], float]  # (the policy's run, the reference's run on the same seed)
    unit: str  # "s" or "×"


TARGETS: tuple[Target, ...] = (
    Target("p50", 45.0, lambda r, _: r.wait_p50_s, "s"),
    Target("p95", 150.0, lambda r, _: r.wait_p95_s, "s"),
    Target("first sessions' p50", 60.0, lambda r, _: percentile(_waits(r, True), 50), "s"),
    Target("returns' p50", 30.0, lambda r, _: percentile(_waits(r, False), 50), "s"),
    Target("cost against the reference", 1.1, lambda r, b: r.bill.total_usd / b.bill.total_usd, "×"),
)


def target_table(by_policy: Mapping[str, Sequence[RunResult]], policies: Sequence[str], reference: str) -> str:
    """Each target (at most `limit`), for each of `policies`: its mean over the seeds, range, and met or by how much
    it was missed; the cost against `reference` seed by seed."""
    lines = ["| target | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
    base = by_policy[reference]
    for target in TARGETS:
        cells = []
        for name in policies:
            values = [target.read(r, b) for r, b in zip(by_policy[name], base, strict=True)]
            mean = sum(values) / len(values)
            form = ",.0f" if target.unit == "s" else ".2f"
            value = f"{mean:{form}} {target.unit} ({min(values):{form}}–{max(values):{form}})"
            verdict = "**met**" if mean <= target.limit else f"**missed by {mean - target.limit:{form}} {target.unit}**"
            cells.append(f"{value}: {verdict}")
        limit = f"{target.limit:g} {target.unit}" if target.unit == "s" else f"{target.limit:g}× {reference}"
        lines.append(f"| {target.name} ≤ {limit} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
