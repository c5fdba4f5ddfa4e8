"""Benchmark: the full default day, each policy of policies.toml in turn, timed (the in-suite test runs a small day).

Run: .venv/bin/python benchmarks/bench_day.py [--seed 1] [--repeat 1]
Prints each policy's wall time and how many simulated seconds it covered; `make simulate` runs the same day in
worker processes and writes the report.
"""

from __future__ import annotations

import argparse
import statistics
import time

from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.policies import load_policies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    model = load_model()
    spec = day_spec(model.raw_day)
    sessions = generate_day(spec, args.seed)
    policies = load_policies()
    print(f"default day, seed {args.seed}: {len(sessions)} sessions")
    for policy in policies.specs:
        walls = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = run_policy(model, policy, sessions, spec.groups, policies.max_instances)
            walls.append(time.perf_counter() - started)
        print(
            f"{policy.name:>16}: median {statistics.median(walls):6.1f} s wall for {result.end_s / 3600:5.1f} h"
            f" simulated ({result.machines_launched} machines, {result.machines_resumed} resumed,"
            f" {result.calls('DescribeInstances')} DescribeInstances)"
        )


if __name__ == "__main__":
    main()
