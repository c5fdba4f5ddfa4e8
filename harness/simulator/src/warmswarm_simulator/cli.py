"""The command line: `warmswarm-simulate fair` (make simulate) runs the fair policies on the held-out seeds and writes
the fair table; `choose` picks each policy's knobs on the choosing seed; `sensitivity` re-runs the best policies with
each assumed figure changed; `day` runs policies on one day; `sweep` tries warmswarm's knobs one at a time; `faults`
runs the fault campaign (faults/cli.py, its own options)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from warmswarm_simulator import fair, fair_run, frontier_report, growth_report, sensitivity, targets
from warmswarm_simulator.config import Model, load_model
from warmswarm_simulator.dayspec import DaySpec, day_spec, small_day
from warmswarm_simulator.faults import cli as faults_cli
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.plots import write_plots
from warmswarm_simulator.policies import Policies, load_policies
from warmswarm_simulator.report import api_table, phase_table, results_json, table, target_check
from warmswarm_simulator.reserved import class_reservations
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.runcache import RunCache
from warmswarm_simulator.runs import run_many
from warmswarm_simulator.sweep import sweep
from warmswarm_simulator.workload import Session, read_trace, write_trace

DEFAULT_SEED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warmswarm-simulate", description=__doc__)
    parser.add_argument(
        "command", nargs="?", choices=("day", "fair", "choose", "sensitivity", "sweep", "faults"), default="day"
    )
    parser.add_argument(
        "--seeds",
        default=",".join(str(s) for s in fair.HELD_OUT_SEEDS),
        help="fair: the held-out seeds (default 2,3,4,5,6); sensitivity: the first of them",
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the generated day's seed (default 1)")
    parser.add_argument("--trace", type=Path, help="a trace CSV to run instead of the generated day")
    parser.add_argument("--small", action="store_true", help="the small day of the test suite instead of the full one")
    parser.add_argument("--out", type=Path, default=Path("report"), help="the report folder (default ./report)")
    parser.add_argument("--policies", help="comma-separated policy names (default: all in policies.toml, in order)")
    parser.add_argument("--model", type=Path, help="a model.toml to use instead of the packaged one")
    parser.add_argument("--policies-file", type=Path, help="a policies.toml to use instead of the packaged one")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument(
        "--families",
        help="choose, fair: comma-separated families of fair.CANDIDATES (default all; the baseline's always)",
    )
    parser.add_argument(
        "--runs-cache",
        type=Path,
        help="fair: a folder that keeps each finished run, read instead of running it again (empty it after a change)",
    )
    parser.add_argument(
        "--variants", help="sensitivity: run only the variants whose name contains one of these comma-separated words"
    )
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
    if args.command in ("fair", "choose", "sensitivity"):
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        runner = {"fair": _fair, "choose": _choose, "sensitivity": _sensitivity}[args.command]
        text = runner(model, policies, spec, args, seeds, out)
        print(text)
        print(f"wall time {time.perf_counter() - started:.1f} s", file=sys.stderr)
        return 0
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


def _sessions_of(spec: DaySpec) -> Callable[[int], list[Session]]:
    return lambda seed: generate_day(spec, seed)


def _day_name(args: argparse.Namespace) -> str:
    return "small day" if args.small else "default day"


def _fair(
    model: Model, policies: Policies, spec: DaySpec, args: argparse.Namespace, seeds: list[int], out: Path
) -> str:
    """make simulate: every candidate of every family on the held-out seeds; each family's frontiers and the
    equal-cost ratios, the former picks' fair table, their phases and pictures, every figure."""
    chosen = _families(args, with_baseline=True)
    keyed = fair_run.keyed_candidates({family: fair.CANDIDATES[family] for family in chosen})
    cache = RunCache(args.runs_cache) if args.runs_cache else None
    runs = fair_run.run_candidates(
        model,
        keyed,
        seeds,
        _sessions_of(spec),
        spec.groups,
        policies.max_instances,
        args.jobs,
        class_reservations(spec),
        cache,
    )
    families = fair_run.by_family(keyed, seeds, runs)
    picks = fair_run.picks_by_policy(fair_run.former_picks(policies, keyed), seeds, runs)
    text = f"# The fair day: {_day_name(args)}, held-out seeds {', '.join(map(str, seeds))}\n\n"
    text += frontier_report.frontier_report(families, seeds)
    text += "\n" + fair.fair_report(picks, seeds, _day_name(args)).replace("# The fair day", "## The former picks", 1)
    text += "\n" + _start_and_targets(picks, seeds)
    names = {family: [c.name for f, c in keyed if f == family] for family in chosen}
    best_baseline = {name: picks[name] for name in (fair.BEST_BASELINE,) if name in picks}
    text += "\n" + growth_report.growth_report(names, seeds, runs, best_baseline)
    text += "\nPolicies:\n" + "".join(f"- {name}: {policies.named(name).label}\n" for name in picks)
    (out / "fair.md").write_text(text)
    meta = {"source": _day_name(args), "seeds": seeds, "max_instances": policies.max_instances}
    per_seed = {
        str(seed): {
            family: json.loads(results_json([runs[(seed, family, c.name)] for f, c in keyed if f == family], meta))
            for family in chosen
        }
        for seed in seeds
    }
    document = {"frontier": frontier_report.frontier_json(families, seeds), "runs": per_seed}
    (out / "fair.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    pictures = write_plots(fair.pooled(picks), out) if picks else []
    print(f"wrote {out}/fair.md, fair.json, {', '.join(p.name for p in pictures)}", file=sys.stderr)
    return text


def _families(args: argparse.Namespace, *, with_baseline: bool) -> list[str]:
    """The families --families names (all by default); with_baseline: the baseline's first whether named or not (the
    fair day compares every family with its frontier)."""
    wanted = [f.strip() for f in args.families.split(",")] if args.families else list(fair.CANDIDATES)
    unknown = [f for f in wanted if f not in fair.CANDIDATES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}: choose among {', '.join(fair.CANDIDATES)}")
    return ["baseline", *(f for f in wanted if f != "baseline")] if with_baseline else wanted


def _start_and_targets(picks: dict[str, list[RunResult]], seeds: list[int]) -> str:
    """How each former pick's sessions started, and the hot picks against issue 21's targets (vs baseline-best)."""
    seeds_text = ", ".join(map(str, seeds))
    text = (
        f"### How each session started, every session of seeds {seeds_text} pooled\n\n"
        f"No launch call and no boot: a machine already running; a boot under {targets.RESTART_BELOW_S:g} s: a"
        " restart, or a machine launched earlier and already booting; longer: a cold launch.\n\n"
        + targets.start_path_table(picks)
        + "\n"
    )
    hot = [name for name in picks if "hot" in name]
    if hot and fair.BEST_BASELINE in picks:
        text += (
            f"\n### Against issue 21's targets, mean (range) over seeds {seeds_text}\n\n"
            + targets.target_table(picks, hot, fair.BEST_BASELINE)
            + "\n"
        )
    return text


def _choose(
    model: Model, policies: Policies, spec: DaySpec, args: argparse.Namespace, seeds: list[int], out: Path
) -> str:
    """Each family's candidates on the choosing seed (--seed, default 1); the pick per family and the evidence."""
    del seeds
    sessions_of = _sessions_of(spec)
    families = [(f, fair.CANDIDATES[f]) for f in _families(args, with_baseline=False)]
    keyed = [((f, c.name), c) for f, candidates in families for c in candidates]
    fresh = ("baseline", "fresh")
    if fresh not in dict(keyed):  # the ceiling's reference, run even when its family is not asked for
        keyed.insert(0, (fresh, next(c for c in fair.CANDIDATES["baseline"] if c.name == "fresh")))
    jobs = [fair.Job(args.seed, c) for _, c in keyed]
    results = fair.run_jobs(model, jobs, sessions_of, spec.groups, policies.max_instances, args.jobs)
    by_name = {key: r for (key, _), r in zip(keyed, results, strict=True)}
    fresh_baseline = by_name[fresh]
    ceiling_usd = fair.COST_CEILING * fresh_baseline.bill.total_usd
    lines = [
        f"# Choosing each policy's knobs: {_day_name(args)}, seed {args.seed}",
        "",
        f"Rule: the lowest p50 + p95 wait among the candidates that run every session for at most"
        f" {fair.COST_CEILING}x the fresh-install baseline's cost (${fresh_baseline.bill.total_usd:,.2f}).",
        "",
    ]
    for family, candidates in families:
        family_results = [by_name[(family, c.name)] for c in candidates]
        chosen = fair.pick(family_results, ceiling_usd)
        spec_of = next(c for c in candidates if by_name[(family, c.name)] is chosen)
        lines += [fair.choice_table(family, family_results, chosen, ceiling_usd), ""]
        lines += [
            f"{family}-best: `{spec_of.name}`: settings {dict(spec_of.settings)}, groups {dict(spec_of.groups)}",
            "",
        ]
    text = "\n".join(lines)
    (out / "choice.md").write_text(text)
    return text


def _sensitivity(
    model: Model, policies: Policies, spec: DaySpec, args: argparse.Namespace, seeds: list[int], out: Path
) -> str:
    """The best policies (or --policies) under each variant of the model (or --variants), on the first held-out seed."""
    seed = seeds[0]
    names = args.policies.split(",") if args.policies else [n for n in fair.FAIR_POLICIES if n.endswith("-best")]
    best = [policies.named(n.strip()) for n in names]
    words = [w.strip() for w in args.variants.split(",")] if args.variants else []
    variants = [v for v in sensitivity.VARIANTS if not words or any(w in v.name for w in words)]
    jobs = [job for v in variants for job in sensitivity.variant_jobs(v, best, seed, model)]
    results = fair.run_jobs(model, jobs, _sessions_of(spec), spec.groups, policies.max_instances, args.jobs)
    rows = [(v, results[i * len(best) : (i + 1) * len(best)]) for i, v in enumerate(variants)]
    text = (
        f"# Sensitivity: {_day_name(args)}, seed {seed}\n\n"
        f"T3 credits: unlimited mode's surplus at {100 * sensitivity.ASSUMED_CPU_USE:.0f} % average CPU over every T3"
        " instance-hour, $0.05 per vCPU-hour above the type's baseline (an upper bound).\n\n"
        + sensitivity.sensitivity_table(rows, model)
        + "\n"
    )
    (out / "sensitivity.md").write_text(text)
    return text
