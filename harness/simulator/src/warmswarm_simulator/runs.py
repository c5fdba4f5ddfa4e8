"""Running several policies on one trace, in worker processes when asked (each run is independent and deterministic)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from warmswarm_models import GroupProperties

from warmswarm_simulator.config import Model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.workload import Session


@dataclass(frozen=True, slots=True)
class Timed:
    result: RunResult
    wall_s: float  # how long the run took here: reported on the console, never in the report's files


def _timed(
    model: Model,
    spec: PolicySpec,
    sessions: list[Session],
    groups: Mapping[str, GroupProperties],
    max_instances: int,
) -> Timed:
    started = time.perf_counter()
    result = run_policy(model, spec, sessions, groups, max_instances)
    return Timed(result, time.perf_counter() - started)


def run_many(
    model: Model,
    specs: Sequence[PolicySpec],
    sessions: list[Session],
    groups: Mapping[str, GroupProperties],
    max_instances: int,
    jobs: int = 1,
) -> list[Timed]:
    """Each spec against the same sessions, in the order given; `jobs` > 1 runs them in that many processes."""
    if jobs <= 1 or len(specs) <= 1:
        return [_timed(model, spec, sessions, groups, max_instances) for spec in specs]
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs))) as pool:
        futures = [pool.submit(_timed, model, spec, sessions, dict(groups), max_instances) for spec in specs]
        return [future.result() for future in futures]
