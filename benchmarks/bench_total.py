"""Benchmark: the planner is total — 10,000+ arbitrary snapshots, every plan checked against the owner and data rules.

Run: .venv/bin/python benchmarks/bench_total.py [--examples 10000] [--seed 0]
The suite runs the same property (tests/unit/test_plan_total.py) on a few hundred examples.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.unit

from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.snapshot import Snapshot

from tests.unit.plan_properties import POLICY, broken_rules, snapshots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"reproduce: .venv/bin/python benchmarks/bench_total.py --examples {args.examples} --seed {args.seed}")

    seen: Counter[str] = Counter()
    broken: Counter[str] = Counter()
    first_broken: dict[str, str] = {}

    # Generation only: a broken rule is counted and shown, not shrunk (shrinking a 10,000-example run takes long).
    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(snapshots())
    def check(snapshot: Snapshot) -> None:
        seen["snapshots"] += 1
        result = plan(snapshot, POLICY)
        for action in result.actions:
            seen[f"action {action.kind}"] += 1
        seen["notices"] += len(result.notices)
        seen["tasks waiting, with a reason"] += len(result.waiting)
        for rule in broken_rules(snapshot):
            broken[rule.rule] += 1
            first_broken.setdefault(rule.rule, str(rule))

    started = time.perf_counter()
    check()
    elapsed_s = time.perf_counter() - started

    each_ms = elapsed_s / max(1, seen["snapshots"]) * 1000
    print(f"{seen['snapshots']:,} snapshots planned and checked in {elapsed_s:.1f} s ({each_ms:.2f} ms each)")
    print("what the plans did, in all:")
    for what, count in sorted(seen.items()):
        if what != "snapshots":
            print(f"  {what:32} {count:>8,}")
    if not broken:
        print("rules broken: 0 (never raised; no task on another owner's room or node; no owner's node relabelled;")
        print("  no volume to another owner or attached twice; no delete of an attached, claimed or unexpired volume;")
        print("  every foreign task on an owner's node reported)")
        return 0
    print("rules broken:")
    for rule, count in broken.most_common():
        print(f"  {count:>6,}  {first_broken[rule]}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
