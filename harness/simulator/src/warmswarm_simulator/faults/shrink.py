"""A failing campaign shrunk to the faults it needs: drop faults (halves first, then one at a time) while it still
fails the same check; each try is a replay that keeps exactly the faults not dropped (dice.py)."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_simulator.faults.campaign import Outcome
from warmswarm_simulator.faults.runner import Plan, campaign


@dataclass(frozen=True, slots=True)
class Shrunk:
    seed: int
    check: str
    kept: tuple[int, ...]  # the faults kept, by their number (1-based) in the full campaign's order
    outcome: Outcome  # the replay with those faults only: its history is the minimal one
    replays: int


def fails(outcome: Outcome, check: str) -> bool:
    return any(f.check == check for f in outcome.history.failures)


def shrink(seed: int, plan: Plan, check: str, *, max_replays: int = 400) -> Shrunk:
    """The fewest faults (found greedily) with which `seed` still fails `check`."""
    full = campaign(seed, plan)
    keys = [f.key for f in full.history.faults]
    kept = list(keys)
    replays = 0
    # Liveness is only known at the end; any other check stops the replay at its first failure.
    stop_on = "" if check == "liveness" else check
    chunk = max(1, len(kept) // 2)
    while kept and replays < max_replays:
        start = 0
        while start < len(kept) and replays < max_replays:
            trial = kept[:start] + kept[start + chunk :]
            replays += 1
            if fails(campaign(seed, plan, frozenset(trial), stop_on), check):
                kept = trial
            else:
                start += chunk
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    outcome = campaign(seed, plan, frozenset(kept))
    numbers = tuple(keys.index(key) + 1 for key in kept)
    return Shrunk(seed, check, numbers, outcome, replays)


def kept_keys(seed: int, plan: Plan, numbers: tuple[int, ...]) -> frozenset[str]:
    """The keys of the faults numbered `numbers` in the full campaign of `seed` (what `--keep` names)."""
    full = campaign(seed, plan)
    return frozenset(full.history.faults[n - 1].key for n in numbers if 0 < n <= len(full.history.faults))
