"""Benchmark: the whole reconcile cycle over the real adapters, EC2 and Docker replayed by stand-ins, part by part.

Run: .venv/bin/python benchmarks/bench_cycle.py [--sizes 1000,3000,10000] [--shapes moto,reference] [--repeat 3]
(part of `make bench`; `--sizes 1000,3000` is a quick run). For each size and EC2 answer shape, a process of its own
serves the answers (benchmarks/cycle_servers.py, loopback) and another runs the reconciler and measures it
(benchmarks/cycle_measure.py), so neither the servers' CPU nor another size's memory is counted. Figures are
medians of CPU ms (process time) over --repeat runs, each printed next to issue 23's target.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

from cycle_ec2_answers import SHAPES
from cycle_lease import RENEW_INTERVAL_S, TTL_S
from cycle_measure import measure
from warmswarm_runtime.memory import tune_gc

HERE = Path(__file__).parent
SEED = 1
# Issue 23's targets (API-reference-shaped answers, a 2-core machine): CPU ms per cycle by size, RSS, block.
IDLE_TARGET_MS: Final = {1000: 40.0, 10_000: 300.0}
BUSY_TARGET_MS: Final = {10_000: 150.0}
FIRST_TARGET_MS: Final = {10_000: 12_000.0}
RSS_TARGET_MIB: Final = 250e6 / 2**20  # 250 MB
BLOCK_TARGET_MS: Final = 100.0
PARTS: Final = ("EC2 read+parse", "Docker read+parse", "plan()")
SCENARIOS: Final = {
    "idle": "idle cycle (nothing changed)",
    "busy": "busy cycle (one task changed)",
    "full": "a cycle with EC2's full listing (every AUTOSCALING_EC2_FULL_LISTING_INTERVAL_S)",
    "first": "first cycle after a start",
}


def run_one(machines: int, shape: str, repeat: int) -> dict[str, Any]:
    """One size and shape: the stand-ins in one child process, the measurement in another; its figures."""
    now_s = time.time()
    servers = subprocess.Popen(
        [
            *(sys.executable, str(HERE / "cycle_servers.py"), "--machines", str(machines), "--shape", shape),
            *("--seed", str(SEED), "--now-s", repr(now_s)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert servers.stdout is not None
        urls = json.loads(servers.stdout.readline())
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps({**urls, "machines": machines, "repeat": repeat})],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        servers.terminate()
        servers.wait()
    if done.returncode != 0:
        raise SystemExit(f"the measurement of {machines} machines ({shape}) failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def child(arguments: str) -> None:
    """The measuring process: the collector tuned as the service tunes it, fake AWS keys for the stand-in."""
    asked = json.loads(arguments)
    # botocore signs every request; the stand-in checks no signature, and no instance metadata is asked for keys.
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_EC2_METADATA_DISABLED="true")
    tune_gc()
    figures = asyncio.run(measure(asked["ec2_url"], asked["docker_url"], "bench", asked["machines"], asked["repeat"]))
    print(json.dumps(figures))


def line(what: str, value: float, unit: str, target: float | None) -> None:
    verdict = "" if target is None else ("  ok" if value <= target else f"  OVER the target ({value / target:.1f}×)")
    shown_target = "" if target is None else f"(target ≤ {target:g} {unit})"
    print(f"    {what:<46} {value:>10.1f} {unit:<4} {shown_target}{verdict}")


def report(machines: int, shape: str, result: dict[str, Any]) -> dict[str, float]:
    cpu = result["cpu_ms"]
    medians = {key: statistics.median(values) for key, values in cpu.items()}
    print(f"  {machines:,} machines, {shape} shape (median of {result['repeat']}; load {result['load_1min']:.2f})")
    # The targets are set on API-reference-shaped answers; moto's shape is shown without them.
    targeted = shape == "reference"
    targets = {"idle": IDLE_TARGET_MS, "busy": BUSY_TARGET_MS, "full": {}, "first": FIRST_TARGET_MS}
    for scenario, what in SCENARIOS.items():
        print(f"   {what}")
        for part in PARTS:
            line(part, medians[f"{scenario}/{part}"], "ms", None)
        total = medians[f"{scenario}/total"]
        rest = total - sum(medians[f"{scenario}/{part}"] for part in PARTS)
        # The parts are timed alone, the total in the cycle: near 0, either sign, is the noise between those runs.
        line("apply and the rest (total - parts)", rest, "ms", None)
        spread = f"total ({min(cpu[f'{scenario}/total']):.0f}-{max(cpu[f'{scenario}/total']):.0f})"
        line(spread, total, "ms", targets[scenario].get(machines) if targeted else None)
        line("longest event-loop block, wall", medians[f"{scenario}/longest block"], "ms", BLOCK_TARGET_MS)
        line("  the loop thread's CPU in it", medians[f"{scenario}/longest block CPU"], "ms", BLOCK_TARGET_MS)
    line("the clients' creation (before the first cycle)", medians["first/clients' creation"], "ms", None)
    line("peak RSS (VmHWM)", result["peak_rss_mib"], "MiB", RSS_TARGET_MIB if machines == 10_000 else None)
    leases = result["lease"]
    held = sum(1 for lease in leases if lease["held"])
    longest_gap_ms = statistics.median(lease["longest renewal gap ms"] for lease in leases)
    verdict = "  ok" if held == len(leases) else "  LOST"
    print(
        f"    the lease ({TTL_S:g} s TTL, renewed every {RENEW_INTERVAL_S:g} s) through a first cycle: held in {held}"
        f" of {len(leases)}{verdict}; longest gap between renewals {longest_gap_ms:.0f} ms (median)"
    )
    reused, cycles = result["plans_reused"], result["cycles_after_the_second"]
    print(f"    plans taken again (plan_reuse.py) in {reused} of {cycles} timed cycles after the second")
    if any(actions != 0 for actions in result["planned_actions"]):
        print(f"    the cycles planned {result['planned_actions']} actions: the fleet is not idle, the figures are off")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,3000,10000", help="machine counts, comma-separated")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="EC2 answer shapes: moto, reference")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each figure; its median is shown (≥ 3)")
    parser.add_argument("--json", type=Path, default=None, help="also write every run's figures here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child)
        return
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = [shape for shape in args.shapes.split(",") if shape]
    print("the whole cycle, real adapters over the stand-ins (CPU ms = process CPU time, the planner's thread too)")
    everything = []
    for machines in sizes:
        for shape in shapes:
            result = run_one(machines, shape, args.repeat)
            report(machines, shape, result)
            everything.append({"shape": shape, **result})
    context = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
    print(json.dumps(context))
    if args.json is not None:
        args.json.write_text(json.dumps({"context": context, "runs": everything}, indent=1))


if __name__ == "__main__":
    main()
