"""The campaign's chance: every decision a pure function of the seed and the decision's name, replayable in part."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TypeVar

from warmswarm_simulator.faults.history import Fault, History

T = TypeVar("T")


class Dice:
    """Decides each fault by hashing (seed, its key), never by drawing from a sequence: a fault's fate does not
    depend on which other faults happened, so a replay that keeps some of them (`kept`, the shrinker's) injects
    exactly those, and the same seed gives the same history to the last event."""

    def __init__(
        self, seed: int, rates: Mapping[str, float], history: History, kept: frozenset[str] | None = None
    ) -> None:
        self.seed = seed
        self.rates = dict(rates)  # kind -> probability per chance (a call, a cycle); absent: off in this campaign
        self.history = history
        self.kept = kept
        self.cycle = 0
        self.on = True  # faults are injected; False once the campaign's calm phase begins

    def roll(self, key: str) -> float:
        """A number in [0, 1) that only the seed and `key` decide."""
        digest = hashlib.blake2b(f"{self.seed}|{key}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def pick(self, items: Sequence[T], key: str) -> T:
        return items[min(len(items) - 1, int(self.roll(key) * len(items)))]

    def fires(self, kind: str, site: str, detail: str, *, owner: str = "", rate_scale: float = 1.0) -> str | None:
        """Whether a fault of `kind` strikes at `site` this cycle; its key (recorded with `detail` and the `owner`
        it strikes) if it does."""
        rate = self.rates.get(kind)
        if not self.on or rate is None:
            return None
        key = f"c{self.cycle} {site} {kind}"
        if self.roll(key) >= rate * rate_scale:
            return None
        if self.kept is not None and key not in self.kept:
            return None
        self.history.faults.append(Fault(self.cycle, kind, key, detail, owner))
        return key

    def setup(self, kind: str, detail: str) -> bool:
        """A fault of the campaign's setup (its settings), decided once: on when the kind is on in this campaign."""
        if kind not in self.rates:
            return False
        key = f"setup {kind}"
        if self.kept is not None and key not in self.kept:
            return False
        self.history.faults.append(Fault(0, kind, key, detail, "*"))
        return True
