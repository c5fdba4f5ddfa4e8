"""make simulate's runs: every candidate of every family on each held-out seed (resumable through a RunCache), grouped
by family for the frontiers, and the former single picks found among them for the fair table."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from warmswarm_models import GroupProperties

from warmswarm_simulator import fair
from warmswarm_simulator.config import Model
from warmswarm_simulator.frontier_report import Candidate, summarise
from warmswarm_simulator.policies import Policies, PolicySpec
from warmswarm_simulator.reserved import DayReservation
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.runcache import RunCache, run_key
from warmswarm_simulator.workload import Session

Keyed = tuple[str, PolicySpec]  # (family, candidate)


def keyed_candidates(families: Mapping[str, Sequence[PolicySpec]]) -> list[Keyed]:
    return [(family, c) for family, candidates in families.items() for c in candidates]


def run_candidates(
    model: Model,
    keyed: Sequence[Keyed],
    seeds: Sequence[int],
    sessions_of: Callable[[int], list[Session]],
    groups: Mapping[str, GroupProperties],
    max_instances: int,
    workers: int,
    reservations: Sequence[DayReservation],
    cache: RunCache | None = None,
) -> dict[tuple[int, str, str], RunResult]:
    """(seed, family, candidate) -> its run. Seed by seed, so that a stopped run leaves whole seeds in the cache;
    with a cache, a run already in it is read, not run again, and each new one is written as soon as it ends."""
    jobs = [(seed, family, spec) for seed in seeds for family, spec in keyed]
    done: dict[tuple[int, str, str], RunResult] = {}
    missing = []
    for seed, family, spec in jobs:
        key = run_key(seed, spec, model, max_instances, tuple(reservations))
        cached = cache.get(key) if cache else None
        if cached is not None:
            done[(seed, family, spec.name)] = cached
        else:
            missing.append((key, seed, family, spec))
    # Batches of one a worker: each finished batch is in the cache before the next starts.
    step = max(1, workers)
    for at in range(0, len(missing), step):
        batch = missing[at : at + step]
        results = fair.run_jobs(
            model,
            [fair.Job(seed, spec) for _, seed, _, spec in batch],
            sessions_of,
            groups,
            max_instances,
            workers,
            reservations,
        )
        for (key, seed, family, spec), result in zip(batch, results, strict=True):
            done[(seed, family, spec.name)] = result
            if cache:
                cache.put(key, result)
        print(f"runs: {len(done)} / {len(jobs)}", file=sys.stderr, flush=True)
    return done


def by_family(
    keyed: Sequence[Keyed], seeds: Sequence[int], runs: Mapping[tuple[int, str, str], RunResult]
) -> dict[str, list[Candidate]]:
    """Each family's candidates, their means over `seeds`, in CANDIDATES' order."""
    out: dict[str, list[Candidate]] = {}
    for family, spec in keyed:
        results = [runs[(seed, family, spec.name)] for seed in seeds]
        out.setdefault(family, []).append(summarise(family, spec.name, results))
    return out


def _knobs(spec: PolicySpec, fresh: PolicySpec) -> tuple[dict[str, object], dict[str, object]]:
    """What a policy sets beyond its kind's fresh install, and its groups: how a candidate and a policy compare."""
    extra = {k: v for k, v in spec.settings.items() if fresh.settings.get(k) != v}
    return extra, {g: dict(v) for g, v in spec.groups.items()}


def former_picks(policies: Policies, keyed: Sequence[Keyed]) -> dict[str, Keyed]:
    """The fair table's policies (fair.FAIR_POLICIES: the fresh installs and the former `-best` picks), each found
    among the candidates knob for knob; a policy that is no candidate is left out."""
    out: dict[str, Keyed] = {}
    for name in fair.FAIR_POLICIES:
        policy = policies.named(name)
        family = name.removesuffix("-best") if name.endswith("-best") else policy.kind
        fresh = policies.named(policy.kind)
        wanted = _knobs(policy, fresh)
        match = next(
            ((f, c) for f, c in keyed if f == family and not c.reserve_classes and _knobs(c, fresh) == wanted),
            None,
        )
        if match:
            out[name] = match
    return out


def picks_by_policy(
    picks: Mapping[str, Keyed], seeds: Sequence[int], runs: Mapping[tuple[int, str, str], RunResult]
) -> dict[str, list[RunResult]]:
    """The former picks' runs under their policy names (the fair table's columns)."""
    return {
        name: [replace(runs[(seed, family, spec.name)], name=name) for seed in seeds]
        for name, (family, spec) in picks.items()
    }
