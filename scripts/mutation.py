"""Mutation testing of the decisions: mutmut over the planner, apply, the reconciler and journal, the lease and the
director's rules, against the unit tests; a table per module to stdout and to docs/testing.md.

Run: make mutation   (or .venv/bin/python scripts/mutation.py [--max-children N] [--survivors])

mutmut wants one `src/` to mutate, and the code lives in two packages (services/autoscaling, services/director),
so each run builds a fresh workspace, .mutation/: a copy of both packages under src/, of tests/, and a
pyproject.toml holding the pytest settings and mutmut's. mutmut copies that again into .mutation/mutants/,
mutates the modules below, and runs for each mutant only the tests that called the mutated function (it
learns which from one traced run of the selected tests). Nothing here names a mutant or a count: the modules
and the tests are found by glob, so the run follows the code as it changes.

A module's score is mutmut's: (killed + timed out) / mutants. A mutant no selected test reaches ("no tests")
counts as a survivor. Calls of the logger are not mutated (what a log line says is read by people, and
nothing in the autoscaler or the director acts on it); every other string is, reasons included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / ".mutation"
DOC = ROOT / "docs" / "testing.md"
PACKAGES = {
    "warmswarm_autoscaling": ROOT / "services" / "autoscaling" / "src" / "warmswarm_autoscaling",
    "warmswarm_director": ROOT / "services" / "director" / "src" / "warmswarm_director",
}


@dataclass(frozen=True)
class Group:
    name: str
    globs: tuple[str, ...]  # below the workspace's src/
    target: float  # the least share of mutants killed
    # The test files (globs in tests/unit) its mutants run against, within the selection; () for all of it.
    tests: tuple[str, ...] = ()


GROUPS: tuple[Group, ...] = (
    # The planner's own tests: plan() takes a snapshot and returns values, and they say everything it decides. The
    # loop's tests also call plan(), with a real-time stall among them; a surviving planner mutant would pay for
    # them all, and they catch nothing the planner's tests miss.
    Group(
        "planner",
        ("warmswarm_autoscaling/plan/*.py",),
        0.95,
        ("test_plan.py", "test_plan_*.py"),
    ),
    Group("apply", ("warmswarm_autoscaling/apply.py",), 0.85),
    Group("reconciler", ("warmswarm_autoscaling/reconciler.py",), 0.85),
    Group("journal", ("warmswarm_autoscaling/journal.py",), 0.85),
    Group("lease", ("warmswarm_autoscaling/lease.py",), 0.85),
    Group(
        "director rules",
        (
            "warmswarm_director/director.py",
            "warmswarm_director/placement.py",
            "warmswarm_director/status.py",
        ),
        0.85,
    ),
)

# Unit tests that reach none of the modules above, or only at a cost no mutant should pay (each runs for every
# mutant of every function it calls); the rest of tests/unit/test_*.py is selected, new files included.
EXCLUDED_TESTS = {
    "test_plan_total.py": "hypothesis over 300 generated worlds, 15 s a run: `make bench` runs it at 10,000",
    "test_openapi_conformance.py": "schemathesis against both APIs, 11 s a run: the documents, not the decisions",
    "test_simulator_*.py": "a simulated day: the simulator's own numbers",
    "test_*_settings.py": "settings and start-up in a subprocess",
    "test_cli_*.py": "the CLI",
    "test_node_cache_script.py": "a shell script",
    "test_stack_*.py": "the stack files",
    "test_dockerfiles.py": "the images",
    "test_grafana_dashboard.py": "the dashboard",
    "test_openapi_files.py": "the OpenAPI files on disk",
    "test_metrics_contract.py": "the metrics' names",
    "test_models*.py": "the shared models",
    "test_runtime.py": "the shared runtime",
}

# What mutmut does not mutate: a line calling the logger (the whole call, however many lines it spans).
LOG_CALL = r"^\s*log\.(debug|info|warning|error|exception|critical|log)\("

# Each mutant's tests run in a fresh pytest session (in a fork of one that ran them all): what a session costs to
# start is paid once per mutant, so the run loads only the plugins the selected tests use, by name (no scan of
# every installed package's entry points), and none that only reports on a session.
UNUSED_PLUGINS = ("cacheprovider", "unraisableexception", "threadexception", "faulthandler", "junitxml", "pastebin")
ROOT_CONFTEST = """\"\"\"Written by scripts/mutation.py: the plugins the tests need; hypothesis made repeatable.\"\"\"

from hypothesis import settings

pytest_plugins = ["pytest_asyncio.plugin"]

# The same examples for every mutant (a verdict does not depend on luck), no example database to write, and no
# deadline (two mutants run at once on a shared machine: slowness is not a failure here).
settings.register_profile("mutation", derandomize=True, database=None, deadline=None)
settings.load_profile("mutation")
"""

TABLE_START = "<!-- mutation-table:start (scripts/mutation.py writes what follows, up to the end marker) -->"
TABLE_END = "<!-- mutation-table:end -->"
COMMAND = "make mutation"
PROGRESS = re.compile(r"(\d+)/(\d+)\s+🎉 (\d+)\s+🫥 (\d+)\s+⏰ (\d+)\s+🤔 (\d+)\s+🙁 (\d+)")


def selected_tests(patterns: tuple[str, ...] = ()) -> list[str]:
    tests = sorted(p.name for p in (ROOT / "tests" / "unit").glob("test_*.py"))
    excluded = {name for pattern in EXCLUDED_TESTS for name in tests if Path(name).match(pattern)}
    chosen = [name for name in tests if name not in excluded]
    if patterns:
        chosen = [name for name in chosen if any(Path(name).match(pattern) for pattern in patterns)]
    return [f"tests/unit/{name}" for name in chosen]


def mutated_files(groups: tuple[Group, ...], work: Path | None = None) -> list[str]:
    """Every module to mutate, relative to a workspace (src/...): as the repository has them now, or as the
    workspace `work` copied them (what its run mutated, though the code moved on since)."""
    found: set[str] = set()
    for group in groups:
        for pattern in group.globs:
            package, _, rest = pattern.partition("/")
            where = work / "src" / package if work is not None else PACKAGES[package]
            found |= {f"src/{package}/{p.relative_to(where).as_posix()}" for p in where.glob(rest)}
    return sorted(found)


def runs(groups: tuple[Group, ...]) -> dict[str, tuple[Group, ...]]:
    """The groups in runs of one test selection each (one workspace, one traced run of the tests): by name."""
    by_tests: dict[tuple[str, ...], list[Group]] = {}
    for group in groups:
        by_tests.setdefault(group.tests, []).append(group)
    return {
        ("all" if tests == () else "-".join(g.name for g in found)): tuple(found) for tests, found in by_tests.items()
    }


def toml_value(value: object) -> str:
    # JSON's strings, numbers, booleans and lists of them are TOML's too.
    return json.dumps(value, ensure_ascii=False)


def build_workspace(work: Path, groups: tuple[Group, ...], max_children: int) -> None:
    if work.exists():
        shutil.rmtree(work)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for package, source in PACKAGES.items():
        shutil.copytree(source, work / "src" / package, ignore=ignore)
    (work / "tests").mkdir()
    shutil.copy2(ROOT / "tests" / "conftest.py", work / "tests" / "conftest.py")
    shutil.copytree(ROOT / "tests" / "unit", work / "tests" / "unit", ignore=ignore)

    tests = selected_tests(groups[0].tests)
    pytest_options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    pytest_options = {**pytest_options, "testpaths": ["tests/unit"]}
    mutmut_options = {
        "source_paths": ["src/"],
        "only_mutate": mutated_files(groups),
        "do_not_mutate_patterns": [LOG_CALL],
        "pytest_add_cli_args": [arg for plugin in UNUSED_PLUGINS for arg in ("-p", f"no:{plugin}")],
        "pytest_add_cli_args_test_selection": tests,
        "use_git_change_detection": False,
        "also_copy": ["conftest.py"],
        # A mutant that makes a test loop forever is caught after 5x its tests' time (mutmut's default of 15x
        # spends minutes on each of a dozen such mutants); the tests run well under their traced time.
        "timeout_multiplier": 5.0,
    }
    (work / "conftest.py").write_text(ROOT_CONFTEST)
    lines = ["# Written by scripts/mutation.py for one run; see docs/testing.md.", "", "[tool.pytest.ini_options]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in pytest_options.items()]
    lines += ["", "[tool.mutmut]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in mutmut_options.items()]
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n")
    print(f"workspace {work}: {', '.join(g.name for g in groups)}: {len(mutated_files(groups))} modules to mutate,")
    print(f"  {len(tests)} test files, {max_children} workers", flush=True)


def run_mutmut(work: Path, max_children: int) -> float:
    """mutmut run in `work`, its output in mutmut.log there, a progress line a minute; the seconds taken."""
    mutmut = Path(sys.executable).parent / "mutmut"
    log_path = work / "mutmut.log"
    started = time.monotonic()
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [str(mutmut), "run", "--max-children", str(max_children)],
            cwd=work,
            stdout=log_file,
            stderr=log_file,
            env=env,
        )
        last_told = started
        while process.poll() is None:
            time.sleep(2)
            if time.monotonic() - last_told >= 60:
                last_told = time.monotonic()
                progress = PROGRESS.findall(log_path.read_text(errors="replace")[-4000:])
                if progress:
                    done, total, killed, no_tests, timeout, _suspicious, survived = progress[-1]
                    print(
                        f"  {time.monotonic() - started:5.0f} s: {done}/{total} mutants tried, {killed} killed,"
                        f" {survived} survived, {no_tests} without a test, {timeout} timed out",
                        flush=True,
                    )
    elapsed = time.monotonic() - started
    if process.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        sys.exit(f"mutmut run failed with exit code {process.returncode}; the end of {log_path}:\n{tail}")
    return elapsed


def exit_codes(work: Path, groups: tuple[Group, ...]) -> dict[str, dict[str, int | None]]:
    """module (src/...) -> mutant -> mutmut's exit code for it, from the result files of the run in `work`."""
    found: dict[str, dict[str, int | None]] = {}
    for module in mutated_files(groups, work):
        meta = work / "mutants" / f"{module}.meta"
        found[module] = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    return found


def statuses(codes: dict[str, dict[str, int | None]]) -> dict[str, Counter[str]]:
    """module -> how many of its mutants ended how."""
    from mutmut.stats import status_by_exit_code

    return {module: Counter(status_by_exit_code[c] for c in by_mutant.values()) for module, by_mutant in codes.items()}


def survivors(codes: dict[str, dict[str, int | None]]) -> list[str]:
    from mutmut.stats import status_by_exit_code

    return sorted(
        name
        for by_mutant in codes.values()
        for name, code in by_mutant.items()
        if status_by_exit_code[code] not in ("killed", "timeout")
    )


def write_survivor_diffs(work: Path, names: list[str]) -> Path:
    mutmut = Path(sys.executable).parent / "mutmut"
    out = work / "survivors.txt"
    with out.open("w") as f:
        for name in names:
            shown = subprocess.run([str(mutmut), "show", name], cwd=work, capture_output=True, text=True).stdout
            changed = [line for line in shown.splitlines() if line.startswith(("+ ", "- "))]
            f.write(f"{name}\n" + "\n".join(changed) + "\n\n")
    return out


def table(counts: dict[str, Counter[str]], elapsed_s: float, groups: tuple[Group, ...]) -> str:
    header = "| module | mutants | killed | survived | no tests | timed out | other | score | target |"
    rows = [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def row(label: str, c: Counter[str], target: float | None) -> str:
        total = sum(c.values())
        caught = c["killed"] + c["timeout"]
        other = total - caught - c["survived"] - c["no tests"]
        score = caught / total if total else 1.0
        verdict = "" if target is None else f"{target:.0%} {'met' if score >= target else 'NOT met'}"
        return (
            f"| {label} | {total} | {c['killed']} | {c['survived']} | {c['no tests']} | {c['timeout']} | {other} |"
            f" {score:.1%} | {verdict} |"
        )

    for group in groups:
        modules = [m for m in counts if any(Path(m).match(f"src/{g}") for g in group.globs)]
        subtotal: Counter[str] = Counter()
        for module in modules:
            subtotal += counts[module]
            if len(modules) > 1:
                rows.append(row(f"`{module.removeprefix('src/')}`", counts[module], None))
        rows.append(row(f"**{group.name}**", subtotal, group.target))
    rows.append("")
    rows.append(
        f"Command: `{COMMAND}` ({elapsed_s / 60:.1f} min of mutmut on {os.cpu_count()} cores);"
        " score = (killed + timed out) / mutants; 'other' is mutmut's suspicious, skipped or not checked."
    )
    return "\n".join(rows)


def write_doc(text: str) -> None:
    block = f"{TABLE_START}\n{text}\n{TABLE_END}"
    if DOC.exists() and TABLE_START in DOC.read_text():
        before, _, rest = DOC.read_text().partition(TABLE_START)
        _, _, after = rest.partition(TABLE_END)
        DOC.write_text(before + block + after)
    else:
        DOC.write_text(f"# Testing\n\n## Mutation testing\n\n`{COMMAND}`\n\n{block}\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-children", type=int, default=os.cpu_count() or 2, help="mutants tested at once")
    parser.add_argument("--survivors", action="store_true", help="each survivor's diff in survivors.txt of its run")
    parser.add_argument("--no-doc", action="store_true", help="print the table only, leave docs/testing.md alone")
    parser.add_argument("--only", choices=[g.name for g in GROUPS], action="append", help="these groups alone")
    parser.add_argument("--workspace", type=Path, default=WORK, help="where the runs work (made afresh)")
    parser.add_argument(
        "--modules",
        action="append",
        metavar="GLOB",
        help="with one --only group: mutate only these of its modules (e.g. warmswarm_autoscaling/plan/backoff.py);"
        " a module new since the last table is run alone this way",
    )
    args = parser.parse_args()
    base = args.workspace.resolve()
    groups = tuple(g for g in GROUPS if not args.only or g.name in args.only)
    if args.modules:
        if len(groups) != 1:
            parser.error("--modules narrows one group: name it with --only")
        groups = (dataclasses.replace(groups[0], globs=tuple(args.modules)),)
    if args.only:
        args.no_doc = True  # the document keeps the whole table
    elif base.exists():
        shutil.rmtree(base)  # nothing of an earlier run (or an earlier layout) is read as this one's

    counts: dict[str, Counter[str]] = {}
    elapsed = 0.0
    for run_name, run_groups in runs(groups).items():
        work = base / run_name
        build_workspace(work, run_groups, args.max_children)
        elapsed += run_mutmut(work, args.max_children)
        codes = exit_codes(work, run_groups)
        counts.update(statuses(codes))
        names = survivors(codes)
        if args.survivors:
            print(f"  {len(names)} survivors' diffs in {write_survivor_diffs(work, names)}")
        else:
            print(f"  {len(names)} survivors: cd {work} && {Path(sys.executable).parent / 'mutmut'} show <name>")
    rendered = table(counts, elapsed, groups)
    print()
    print(rendered)
    if not args.no_doc:
        write_doc(rendered)
        print(f"\nwritten to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
