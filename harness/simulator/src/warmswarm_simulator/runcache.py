"""Finished runs kept on disk by what made them, so that a long measuring run can stop, resume and grow by a seed."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

from warmswarm_simulator.results import RunResult


def run_key(*parts: object) -> str:
    """A run's name in the cache: a digest of everything that decides its result (seed, policy, model, bookings)."""
    return hashlib.sha256("|".join(repr(p) for p in parts).encode()).hexdigest()[:24]


class RunCache:
    """One pickled RunResult a file, under `folder`. It knows nothing of the simulator's code: a changed simulator
    needs an empty folder (delete it), as the report says."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def get(self, key: str) -> RunResult | None:
        path = self.folder / f"{key}.pickle"
        if not path.exists():
            return None
        result = pickle.loads(path.read_bytes())  # our own files, written by put() below
        if not isinstance(result, RunResult):
            raise TypeError(f"{path} holds no run; delete the folder {self.folder}")
        return result

    def put(self, key: str, result: RunResult) -> None:
        partial = self.folder / f"{key}.partial"
        partial.write_bytes(pickle.dumps(result))
        partial.replace(self.folder / f"{key}.pickle")  # whole or absent, even when the run is stopped mid-write
