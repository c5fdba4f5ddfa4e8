"""The report's pictures (matplotlib, PNG): wait-time CDF per policy, cluster size over the day (stopped machines
dotted), cost breakdown, waits by phase."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from warmswarm_simulator.phases import PHASES
from warmswarm_simulator.results import RunResult, percentile

_DPI = 120
# Fixed so that the same results draw the same picture on any machine (no colour cycle state carried over).
_COLOURS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
_METADATA = {"Software": "warmswarm-simulator"}


def write_plots(results: Sequence[RunResult], out: Path) -> list[Path]:
    return [
        _wait_cdf(results, out),
        _cluster_size(results, out),
        _cost_breakdown(results, out),
        _wait_phases(results, out),
        _buffers(results, out),
    ]


def _wait_cdf(results: Sequence[RunResult], out: Path) -> Path:
    figure = Figure(figsize=(8, 5), dpi=_DPI)
    axes = figure.add_subplot()
    for colour, r in zip(_COLOURS, results, strict=False):
        if not r.waits_s:
            continue
        n = len(r.waits_s)
        xs = [w / 60.0 for w in r.waits_s]
        ys = [(i + 1) / n for i in range(n)]
        axes.step(xs, ys, where="post", color=colour, label=f"{r.name} (p95 {r.wait_p95_s / 60:.1f} min)")
    axes.axhline(0.95, color="grey", linewidth=0.6, linestyle=":")
    axes.set_xlabel("wait from request to running with data in place, minutes")
    axes.set_ylabel("share of sessions")
    axes.set_title("Wait to running, per policy (CDF)")
    axes.set_ylim(0, 1.01)
    axes.set_xlim(left=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    path = out / "wait_cdf.png"
    figure.savefig(path, metadata=_METADATA)
    return path


def _cluster_size(results: Sequence[RunResult], out: Path) -> Path:
    figure = Figure(figsize=(10, 5), dpi=_DPI)
    axes = figure.add_subplot()
    for colour, r in zip(_COLOURS, results, strict=False):
        xs = [t / 3600.0 for t, _, _ in r.fleet_series] + [r.end_s / 3600.0]
        ys = [live for _, live, _ in r.fleet_series] + [r.fleet_series[-1][1]]
        axes.step(xs, ys, where="post", color=colour, label=f"{r.name}: machines (peak {r.peak_machines})")
        if r.peak_stopped:
            # The warm tier's stopped machines: no compute, their disks billed; drawn apart from the live ones.
            stopped = [n for _, _, n in r.fleet_series] + [r.fleet_series[-1][2]]
            axes.step(
                xs,
                stopped,
                where="post",
                color=colour,
                linestyle=":",
                label=f"{r.name}: stopped (peak {r.peak_stopped})",
            )
    first = results[0]
    xs = [t / 3600.0 for t, _ in first.running_series]
    ys = [n for _, n in first.running_series]
    axes.step(xs, ys, where="post", color="black", linewidth=0.8, linestyle="--", label="sessions running (baseline)")
    axes.set_xlabel("hour of the day")
    axes.set_ylabel("machines pending or running (dotted: stopped)")
    axes.set_title("Cluster size over the day")
    # The day, and the next morning when the trace has one: until the last session ended.
    last_session_h = max(t for t, _ in first.running_series) / 3600.0
    axes.set_xlim(6, max(24, math.ceil(last_session_h)))
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right")
    path = out / "cluster_size.png"
    figure.savefig(path, metadata=_METADATA)
    return path


def _buffers(results: Sequence[RunResult], out: Path) -> Path:
    """The buffers' machines held (nobody's yet) over the day: hot solid, warm dotted; what their targets keep."""
    figure = Figure(figsize=(10, 4), dpi=_DPI)
    axes = figure.add_subplot()
    for colour, r in zip(_COLOURS, results, strict=False):
        if len(r.buffer_series) < 2:
            continue  # no buffer (the baseline's are its own, not drawn)
        xs = [t / 3600.0 for t, _, _ in r.buffer_series] + [r.end_s / 3600.0]
        hot_h, warm_h = r.buffer_held_hours()
        hot = [n for _, n, _ in r.buffer_series] + [r.buffer_series[-1][1]]
        warm = [n for _, _, n in r.buffer_series] + [r.buffer_series[-1][2]]
        axes.step(xs, hot, where="post", color=colour, label=f"{r.name}: hot ({hot_h:,.0f} machine-h)")
        axes.step(
            xs, warm, where="post", color=colour, linestyle=":", label=f"{r.name}: warm ({warm_h:,.0f} machine-h)"
        )
    axes.set_xlabel("hour of the day")
    axes.set_ylabel("buffer machines held (dotted: warm)")
    axes.set_title("The buffers over the day: unclaimed machines, all zones")
    axes.set_xlim(0, 24)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right", fontsize="small")
    path = out / "buffers.png"
    figure.savefig(path, metadata=_METADATA)
    return path


def _cost_breakdown(results: Sequence[RunResult], out: Path) -> Path:
    figure = Figure(figsize=(8, 5), dpi=_DPI)
    axes = figure.add_subplot()
    names = [r.name for r in results]
    parts = [
        ("instances", [r.bill.instance_usd for r in results], _COLOURS[0]),
        ("root disks (gp3)", [r.bill.root_usd for r in results], _COLOURS[1]),
        ("cache volumes (gp3)", [r.bill.cache_usd for r in results], _COLOURS[2]),
    ]
    bottoms = [0.0] * len(results)
    for label, values, colour in parts:
        axes.bar(names, values, bottom=bottoms, color=colour, label=label)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    for x, total in enumerate(bottoms):
        axes.annotate(f"${total:,.2f}", (x, total), ha="center", va="bottom", fontsize=9)
    axes.set_ylabel("USD for the day (until the cluster is empty again)")
    axes.set_title("Cost breakdown per policy")
    axes.grid(alpha=0.3, axis="y")
    axes.legend(loc="upper right")
    path = out / "cost_breakdown.png"
    figure.savefig(path, metadata=_METADATA)
    return path


def _wait_phases(results: Sequence[RunResult], out: Path) -> Path:
    """Per policy, first sessions and returns: the mean of each phase, stacked (they add up to the mean wait), with
    the median and p95 wait marked. Means, not medians, because medians of phases do not add up to anything."""
    figure = Figure(figsize=(10, 6), dpi=_DPI)
    rows = [(f"{r.name}, {kind}", r, first) for r in results for kind, first in (("first", True), ("returns", False))]
    axes = figure.add_subplot()
    names = [name for name, _, _ in rows]
    lefts = [0.0] * len(rows)
    for index, phase in enumerate(PHASES):
        means = []
        for _, r, first in rows:
            chosen = [p.durations_s[index] for p in r.phases if p.first is first]
            means.append(sum(chosen) / len(chosen) if chosen else 0.0)
        axes.barh(names, means, left=lefts, color=_COLOURS[index % len(_COLOURS)], label=phase)
        lefts = [left + mean for left, mean in zip(lefts, means, strict=True)]
    for y, (_, r, first) in enumerate(rows):
        waits = sorted(sum(p.durations_s) for p in r.phases if p.first is first)
        if waits:
            axes.plot([percentile(waits, 50)], [y], marker="|", markersize=14, color="black")
            axes.plot([percentile(waits, 95)], [y], marker="|", markersize=14, color="grey")
    axes.invert_yaxis()
    axes.set_xlabel("seconds from request to running with data in place (bars: mean per phase; | p50, grey | p95)")
    axes.set_title("Waits by phase, per policy")
    axes.grid(alpha=0.3, axis="x")
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    path = out / "wait_phases.png"
    figure.savefig(path, metadata=_METADATA)
    return path
