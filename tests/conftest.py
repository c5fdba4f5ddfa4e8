"""Shared fixtures: one real local cloud (moto, a swarm manager, redis, the boot watcher) per test session."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

logging.getLogger("werkzeug").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def sandbox_dir() -> Iterator[Path]:
    # A short path: unix sockets of the node daemons live below it.
    with tempfile.TemporaryDirectory(prefix="wsbx-") as path:
        yield Path(path)


@pytest.fixture(scope="session")
def sandbox(sandbox_dir: Path) -> Iterator[object]:
    from warmswarm_sandbox.cloud import Sandbox

    cloud = Sandbox(sandbox_dir / "cloud", boot_s=float(os.environ.get("WARMSWARM_TEST_BOOT_S", "1.0")))
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture(scope="session")
def endpoints(sandbox: object) -> object:
    return sandbox.endpoints  # type: ignore[attr-defined]
