"""`warmswarm-simulate faults`: many campaigns, a summary (faults by kind, failures by check, speed), and for each
check that failed, one seed's minimal history and the command that reproduces it."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

from warmswarm_simulator.faults import checks
from warmswarm_simulator.faults.kinds import KINDS, NAMES, UnknownKind, selected
from warmswarm_simulator.faults.runner import Plan, Summary, campaign, run_many
from warmswarm_simulator.faults.shrink import kept_keys, shrink

DEFAULT_CAMPAIGNS = 1000
DEFAULT_CYCLES = 60


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmswarm-simulate faults", description=__doc__)
    parser.add_argument("--campaigns", type=int, default=DEFAULT_CAMPAIGNS, help="how many (default 1000)")
    parser.add_argument("--cycles", type=int, default=DEFAULT_CYCLES, help="cycles per campaign (default 60)")
    parser.add_argument("--seed", type=int, default=1, help="the first campaign's seed; the others follow (default 1)")
    parser.add_argument(
        "--faults", default="all", help=f"comma-separated kinds, all (default) or none: {', '.join(NAMES)}"
    )
    parser.add_argument(
        "--no-fault",
        action="append",
        default=[],
        metavar="KINDS",
        help="kinds to leave out (comma-separated, repeatable): named in the summary as excluded",
    )
    parser.add_argument(
        "--no-check",
        action="append",
        default=[],
        metavar="CHECKS",
        help="checks set aside as known open (comma-separated, repeatable): still run and counted in"
        " the summary, they do not fail the run",
    )
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--no-shrink", action="store_true", help="do not shrink a failing seed to a minimal history")
    parser.add_argument("--history", action="store_true", help="print each campaign's full history (one campaign)")
    parser.add_argument("--keep", default="", help="replay only these faults (numbers in the full history)")
    parser.add_argument("--list", action="store_true", help="list the fault kinds and the checks, and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.list:
        for kind in KINDS:
            print(f"fault {kind.name:13} {kind.where:7} {kind.what}")
        for one in checks.CHECKS:
            print(f"check {one.name:21} {one.what}")
        return 0
    try:
        kinds = selected(args.faults, args.no_fault)
        aside = checks.names(args.no_check)
    except (UnknownKind, checks.UnknownCheck) as error:
        print(error, file=sys.stderr)
        return 2
    plan = Plan(args.cycles, kinds)
    excluded = [n for n in NAMES if n not in kinds]
    if args.campaigns == 1 and (args.history or args.keep):
        return _one(args.seed, plan, args.keep)
    started = time.perf_counter()
    seeds = list(range(args.seed, args.seed + args.campaigns))
    summaries = run_many(seeds, plan, args.jobs)
    wall_s = time.perf_counter() - started
    print(_report(summaries, plan, excluded, aside, wall_s, args.jobs))
    failing = {name: seed for name, seed in _first_by_check(summaries).items() if name not in aside}
    for name, seed in failing.items():
        print(f"\n## {name}: seed {seed}")
        print(f"reproduce: {_command(seed, plan)}")
        if not args.no_shrink:
            shrunk = shrink(seed, plan, name)
            keep = ",".join(str(n) for n in shrunk.kept)
            print(
                f"shrunk to {len(shrunk.kept)} fault(s) in {shrunk.replays} replays; the minimal history"
                f" (replay: {_command(seed, plan)} --keep '{keep or 0}'):"
            )
            for line in shrunk.outcome.history.lines():
                print(line)
    return 1 if failing else 0


def _one(seed: int, plan: Plan, keep: str) -> int:
    kept = kept_keys(seed, plan, tuple(int(n) for n in keep.split(",") if n.strip())) if keep else None
    outcome = campaign(seed, plan, kept, explain=True)
    for number, fault in enumerate(outcome.history.faults, 1):
        print(f"fault {number}: cycle {fault.cycle} {fault.kind}: {fault.detail}")
    for line in outcome.history.lines():
        print(line)
    print(
        f"{outcome.cycles} cycles, {outcome.virtual_s:.0f} virtual s, {len(outcome.history.failures)} failure(s);"
        f" recycling: {outcome.marks} mark(s), {outcome.proofs} proven"
    )
    return 1 if outcome.history.failures else 0


def _report(
    summaries: list[Summary], plan: Plan, excluded: list[str], aside: tuple[str, ...], wall_s: float, jobs: int
) -> str:
    cycles = sum(s.cycles for s in summaries)
    faults: Counter[str] = Counter()
    for summary in summaries:
        faults.update(dict(summary.faults))
    failed = [s for s in summaries if any(check not in aside for check in s.checks)]
    rate = len(summaries) / wall_s * 60 if wall_s > 0 else 0.0
    first, last = summaries[0].seed, summaries[-1].seed
    lines = [
        f"fault campaign: {len(summaries)} campaigns of {plan.cycles} cycles, seeds {first}..{last}",
        f"kinds: {', '.join(plan.kinds) or 'none'}",
        f"fault kinds excluded: {', '.join(excluded) or 'none'}",
        f"checks set aside as known open: {', '.join(aside) or 'none'}",
        f"ran {cycles} cycles in {wall_s:.1f} s wall with {jobs} process(es): {rate:.0f} campaigns/min",
        "faults injected: " + (", ".join(f"{k} {faults[k]}" for k in NAMES if faults[k]) or "none"),
        _recycling(summaries),
        f"failures: {len(failed)} of {len(summaries)} campaigns",
    ]
    by_check: Counter[str] = Counter(check for s in summaries for check in s.checks)
    for check, count in by_check.most_common():
        seed, message = next((s.seed, m) for s in summaries for c, _cycle, m in s.failures if c == check)
        aside_note = " (set aside: does not fail the run)" if check in aside else ""
        lines.append(f"  {check}{aside_note}: {count} campaign(s), first seed {seed}: {message}")
    return "\n".join(lines)


def _recycling(summaries: list[Summary]) -> str:
    """How much recycling the campaigns saw: those that marked a machine, and those that also proved a scrub."""
    marked = [s for s in summaries if s.marks]
    proved = [s for s in marked if s.proofs]
    share = 100.0 * len(proved) / len(summaries) if summaries else 0.0
    return (
        f"recycling: {len(marked)} campaigns marked {sum(s.marks for s in marked)} machines, {len(proved)} of them"
        f" proved {sum(s.proofs for s in proved)} scrubs: {share:.1f} % of campaigns marked and proved"
    )


def _first_by_check(summaries: list[Summary]) -> dict[str, int]:
    first: dict[str, int] = {}
    for summary in summaries:
        for check in summary.checks:
            first.setdefault(check, summary.seed)
    return first


def _command(seed: int, plan: Plan) -> str:
    kinds = ",".join(plan.kinds) if set(plan.kinds) != set(NAMES) else "all"
    kinds = kinds or "none"
    return (
        f"python -m warmswarm_simulator faults --campaigns 1 --seed {seed} --cycles {plan.cycles}"
        f" --faults {kinds} --history"
    )
