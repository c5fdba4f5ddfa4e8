"""Many campaigns, in worker processes: seeds in, one summary each out (each campaign is independent, deterministic)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from warmswarm_simulator.config import load_model
from warmswarm_simulator.faults.campaign import Campaign, Outcome
from warmswarm_simulator.faults.scenario import draw


@dataclass(frozen=True, slots=True)
class Plan:
    """What to run: the campaigns' length and the fault kinds enabled."""

    cycles: int
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Summary:
    seed: int
    cycles: int
    virtual_s: float
    wall_s: float
    faults: tuple[tuple[str, int], ...]  # (kind, injected), by kind
    failures: tuple[tuple[str, int, str], ...]  # (check, cycle, message), in the order they broke
    marks: int = 0  # recycle marks the autoscaler wrote
    proofs: int = 0  # scrubs it marked proven

    @property
    def checks(self) -> list[str]:
        return list(dict.fromkeys(check for check, _cycle, _message in self.failures))


def campaign(
    seed: int, plan: Plan, kept: frozenset[str] | None = None, stop_on: str = "", explain: bool = False
) -> Outcome:
    """One campaign of `plan` for `seed`, keeping only the faults `kept` names when given; `explain` notes each plan's
    actions with their reasons in the history."""
    scenario = draw(seed, plan.cycles, plan.kinds, load_model())
    return Campaign(scenario, kept, stop_on, explain).run()


def summarise(seed: int, plan: Plan) -> Summary:
    started = time.perf_counter()
    outcome = campaign(seed, plan)
    history = outcome.history
    return Summary(
        seed=seed,
        cycles=outcome.cycles,
        virtual_s=outcome.virtual_s,
        wall_s=time.perf_counter() - started,
        faults=tuple(sorted(history.fault_counts().items())),
        failures=tuple((f.check, f.cycle, f.message) for f in history.failures),
        marks=outcome.marks,
        proofs=outcome.proofs,
    )


def run_many(seeds: Sequence[int], plan: Plan, jobs: int) -> list[Summary]:
    """Every seed's summary, in seed order; `jobs` > 1 runs them in that many processes."""
    if jobs <= 1 or len(seeds) <= 1:
        return [summarise(seed, plan) for seed in seeds]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(summarise, seeds, [plan] * len(seeds), chunksize=max(1, len(seeds) // (jobs * 8))))
