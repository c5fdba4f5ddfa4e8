"""The command line: `warmswarm-simulate [day]` runs the policies on a day and writes a report; `sweep` tries knobs;
`faults` runs the fault campaign (faults/cli.py, its own options)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from warmswarm_simulator.config import Model, load_model
from warmswarm_simulator.dayspec import DaySpec, day_spec, small_day
from warmswarm_simulator.faults import cli as faults_cli
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.plots import write_plots
from warmswarm_simulator.policies import Policies, load_policies
from warmswarm_simulator.report import api_table, phase_table, results_json, table, target_check
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.runs import run_many
from warmswarm_simulator.sweep import sweep
from warmswarm_simulator.workload import Session, read_trace, write_trace

DEFAULT_SEED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmswarm-simulate", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("day", "sweep", "faults"), default="day")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the generated day's seed (default 1)")
    parser.add_argument("--trace", type=Path, help="a trace CSV to run instead of the generated day")
    parser.add_argument("--small", action="store_true", help="the small day of the test suite instead of the full one")
    parser.add_argument("--out", type=Path, default=Path("report"), help="the report folder (default ./report)")
    parser.add_argument("--policies", help="comma-separated policy names (default: all in policies.toml, in order)")
    parser.add_argument("--model", type=Path, help="a model.toml to use instead of the packaged one")
    parser.add_argument("--policies-file", type=Path, help="a policies.toml to use instead of the packaged one")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    return parser


def _day(model: Model, args: argparse.Namespace) -> tuple[DaySpec, list[Session]]:
    spec = day_spec(model.raw_day)
    if args.small:
        spec = small_day(spec)
    sessions = read_trace(args.trace) if args.trace else generate_day(spec, args.seed)
    return spec, sessions


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["faults"]:
        return faults_cli.main(argv[1:])
    args = _parser().parse_args(argv)
    started = time.perf_counter()
    model = load_model(args.model)
    policies: Policies = load_policies(args.policies_file)
    spec, sessions = _day(model, args)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    source = str(args.trace) if args.trace else f"{'small' if args.small else 'default'} day, seed {args.seed}"
    if args.command == "sweep":
        print(sweep(model, policies, spec, sessions, out, args.jobs, source))
        print(f"\nwall time {time.perf_counter() - started:.0f} s", file=sys.stderr)
        return 0
    chosen = [policies.named(n.strip()) for n in args.policies.split(",")] if args.policies else list(policies.specs)
    write_trace(out / "trace.csv", sessions)
    timed = run_many(model, chosen, sessions, spec.groups, policies.max_instances, args.jobs)
    results = [t.result for t in timed]
    text = _report_text(results, source, len(sessions), policies)
    (out / "table.md").write_text(text)
    meta = {"source": source, "sessions": len(sessions), "max_instances": policies.max_instances}
    (out / "results.json").write_text(results_json(results, meta))
    pictures = write_plots(results, out)
    print(text)
    for t in timed:
        print(f"{t.result.name}: simulated in {t.wall_s:.1f} s", file=sys.stderr)
    print(f"wrote {out}/table.md, results.json, trace.csv, {', '.join(p.name for p in pictures)}", file=sys.stderr)
    print(f"wall time {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


def _report_text(results: list[RunResult], source: str, sessions: int, policies: Policies) -> str:
    lines = [f"# A day of users: {source}, {sessions} sessions", "", table(results), "", api_table(results), ""]
    lines += ["Waits by phase, median / p95 s:", "", phase_table(results), ""]
    if results and results[0].kind == "baseline":
        lines += [target_check(results, r.name) for r in results[1:] if r.kind == "warmswarm"]
    lines += ["", "Policies:"]
    lines += [f"- {r.name}: {policies.named(r.name).label}" for r in results]
    return "\n".join(lines) + "\n"
