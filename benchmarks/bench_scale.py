"""Benchmark: the planner and a whole idle cycle at 10,000 nodes, the shape of their growth, and peak memory.

Run: .venv/bin/python benchmarks/bench_scale.py [--repeat 5]      (part of `make bench`)
In-memory worlds (benchmarks/worlds.py: 50 instance types, 3 zones), no I/O. Prints each figure next to its
target. Machines here are shared and noisy (2 cores): figures are medians, and the growth is a log-log slope
fitted over a doubling sweep, which noise moves far less than any one timing.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from warmswarm_autoscaling import views
from warmswarm_autoscaling.adapters.ec2_aiobotocore import _instance
from warmswarm_autoscaling.adapters.swarm_answers import SwarmAnswers
from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.snapshot import Snapshot
from warmswarm_runtime.memory import tune_gc
from worlds import NOW, World, instance_types, policy, world

TYPES = instance_types(50)
POLICY = policy(TYPES)
SWEEP = (1000, 2000, 4000, 8000)


def median_ms(run: Callable[[], object], repeat: int) -> float:
    """The median wall time of `run`, with Python's cycle collector paused while it runs.

    A collection walks every object of the process, whatever the call being timed made: with it, the
    figure would depend on what else this process holds. The whole-cycle figure below keeps it on.
    """
    timings = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            started = time.perf_counter()
            run()
            timings.append((time.perf_counter() - started) * 1000)
        finally:
            gc.enable()
    return statistics.median(timings)


def line(what: str, value: float, unit: str, target: float | None) -> None:
    verdict = "" if target is None else ("  ok" if value <= target else "  OVER the target")
    shown_target = "" if target is None else f"(target ≤ {target:g} {unit})"
    print(f"  {what:<66} {value:>9.1f} {unit:<4} {shown_target}{verdict}")


def slope(sizes: tuple[int, ...], timings_ms: list[float]) -> float:
    """Least-squares slope of log(time) over log(size): 1 is linear, 2 quadratic."""
    xs, ys = [math.log(s) for s in sizes], [math.log(max(t, 1e-3)) for t in timings_ms]
    mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)


def plan_cases(repeat: int) -> None:
    print("plan(), 50 types × 3 zones, median of", repeat)
    cases: list[tuple[str, World, float]] = [
        ("10,000 pending (new owners) × 1,000 nodes", world(nodes=1000, pending=10_000), 250),
        ("same, cache on, 2,000 of their volumes", world(nodes=1000, pending=10_000, cache=True, volumes=2000), 300),
        ("10,000 nodes, idle", world(nodes=10_000), 100),
        (
            "1,000 pending pinned by project only × 10,000 nodes",
            world(nodes=10_000, pending=1000, pinning="project"),
            250,
        ),
    ]
    for what, made, target in cases:
        line(what, median_ms(functools.partial(plan, made.snapshot(TYPES), POLICY), repeat), "ms", target)


def sweeps(repeat: int) -> None:
    print(f"growth: log-log slope of plan() over sizes {SWEEP} (target ≤ 1.1; 1 is linear)")
    shapes: dict[str, Callable[[int], World]] = {
        "owned pending tasks (n nodes, n pending)": lambda n: world(nodes=n, pending=n),
        "tasks pinned by project only (n nodes, n pending)": lambda n: world(nodes=n, pending=n, pinning="project"),
        "unowned tasks (n nodes, n pending)": lambda n: world(nodes=n, pending=n, pinning="unowned"),
        "volumes without pending work (n nodes, n volumes)": lambda n: world(nodes=n, volumes=n),
        "launches in flight (n booting, n pending)": lambda n: world(in_flight=n, pending=n),
        "cache on (n nodes, n pending, n volumes)": lambda n: world(nodes=n, pending=n, cache=True, volumes=n),
    }
    for what, build in shapes.items():
        timings = []
        for size in SWEEP:
            timings.append(median_ms(functools.partial(plan, build(size).snapshot(TYPES), POLICY), repeat))
        shown = ", ".join(f"{t:.0f}" for t in timings)
        line(f"{what}: {shown} ms", slope(SWEEP, timings), "", 1.1)


def raw_world(
    nodes: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """What the Engine API and DescribeInstances answer for `nodes` idle nodes, one running task each."""
    made = world(nodes=nodes)
    raw_nodes = [
        {
            "ID": n.id,
            "Version": {"Index": 100 + index},
            "Description": {
                "Hostname": n.hostname,
                "Engine": {"Labels": {"warmswarm.instance-id": n.engine_instance_id}},
                "Resources": {"NanoCPUs": 2_000_000_000, "MemoryBytes": 4 * 2**30},
            },
            "Spec": {"Labels": dict(n.labels), "Role": "worker", "Availability": "active"},
            "Status": {"State": "ready", "Addr": n.addr},
        }
        for index, n in enumerate(made.nodes)
    ]
    raw_tasks = [
        {
            "ID": t.id,
            "Version": {"Index": 20_000 + index},
            "ServiceID": t.service_id,
            "NodeID": t.node_id,
            "DesiredState": "running",
            "Status": {"State": "running"},
            "Spec": {
                "Resources": {"Reservations": {"NanoCPUs": 1_000_000_000, "MemoryBytes": 2**30}},
                "Placement": {
                    "Constraints": [str(c) for c in t.constraints] + (t.owner.constraints() if t.owner else [])
                },
            },
        }
        for index, t in enumerate(made.tasks)
    ]
    raw_services = [
        {
            "ID": t.service_id,
            "Version": {"Index": 40_000},
            "Spec": {"Name": t.service_name, "Labels": {}, "Mode": {"Replicated": {}}},
        }
        for t in made.tasks
    ]
    raw_instances = [
        {
            "InstanceId": i.id,
            "InstanceType": i.instance_type,
            "Placement": {"AvailabilityZone": i.availability_zone},
            "State": {"Name": i.state},
            "LaunchTime": _Moment(i.launched_at),
            "Tags": [{"Key": k, "Value": v} for k, v in i.tags.items()],
            "PrivateIpAddress": i.private_ip,
        }
        for i in made.instances
    ]
    return raw_nodes, raw_tasks, raw_services, raw_instances


class _Moment:
    """A datetime's one method the adapter calls, without building 10,000 datetimes in the fixture."""

    def __init__(self, epoch_s: float) -> None:
        self._epoch_s = epoch_s

    def timestamp(self) -> float:
        return self._epoch_s


def idle_cycle(repeat: int) -> None:
    print("a whole idle cycle at 10,000 nodes: reading the answers, plan, the status view, the next wake")
    raw_nodes, raw_tasks, raw_services, raw_instances = raw_world(10_000)
    answers = SwarmAnswers()  # as one replica holds it from cycle to cycle

    def cycle() -> None:
        snapshot = Snapshot(
            NOW,
            tuple(answers.nodes(raw_nodes)),
            tuple(answers.tasks(raw_tasks, raw_services)),
            tuple(_instance(i) for i in raw_instances),
            TYPES,
        )
        result = plan(snapshot, POLICY)
        answer = views.status(
            cluster="bench",
            dry_run=False,
            leader=True,
            last_cycle=None,
            snapshot=snapshot,
            plan=result,
            decisions=(),
            now=NOW,
        )
        answer.model_dump_json()
        _ = (result.busy, result.deadline)

    def cpu_ms() -> float:
        gc.collect()
        started = time.process_time()
        cycle()
        return (time.process_time() - started) * 1000

    first = cpu_ms()  # every answer new: the first cycle after a start
    line("CPU of the first cycle (every answer read)", first, "ms", None)
    # Nothing changed since: Docker's versions let the reading of each node and task be reused.
    line(
        "CPU per idle cycle (nothing changed since the last)",
        statistics.median(cpu_ms() for _ in range(repeat)),
        "ms",
        200,
    )


def peak_rss() -> None:
    """In a fresh process, so the sweeps' garbage does not count. Its VmHWM, not ru_maxrss: Linux carries
    ru_maxrss across exec, so a child of this (large) process would report this process's peak."""
    code = (
        "import sys; sys.path.insert(0, 'benchmarks');"
        "from worlds import world, instance_types, policy;"
        "from warmswarm_autoscaling.plan import plan;"
        "from warmswarm_runtime.memory import tune_gc; tune_gc();"
        "types = instance_types(50); snapshot = world(nodes=10_000, pending=10_000).snapshot(types);"
        "plan(snapshot, policy(types));"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line("peak RSS, 10,000 nodes + 10,000 pending, planned", int(done.stdout) / 1024, "MiB", 150 * 1e6 / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    tune_gc()  # the collector as the service sets it at start (warmswarm_runtime.memory)
    plan_cases(args.repeat)
    sweeps(max(3, args.repeat // 2))
    idle_cycle(args.repeat)
    peak_rss()
    print(
        json.dumps(
            {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}
        )
    )


if __name__ == "__main__":
    main()
