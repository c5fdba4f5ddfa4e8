"""Shared fixtures: one real local cloud (moto, a swarm manager, redis, the boot watcher) per test session."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

logging.getLogger("werkzeug").setLevel(logging.ERROR)

REPO = Path(__file__).resolve().parents[1]
STACK_TEST = REPO / "tests/e2e/test_stack_e2e.py"
# The stack images' background preparation, started by the session's controller (not by each xdist worker).
_PREPARING: list[tuple[subprocess.Popen[bytes], Path]] = []

# The session's sandbox once started: a failing test's report ends with the logs of the services it spawned.
_STARTED: list[Any] = []
FAILURE_LOG_LINES = 80


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
    _STARTED.append(cloud)
    try:
        yield cloud
    finally:
        _STARTED.clear()
        cloud.stop()


@pytest.fixture(scope="session")
def endpoints(sandbox: object) -> object:
    return sandbox.endpoints  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def ec2(endpoints: object) -> Any:
    """A plain EC2 client against the sandbox's strict layer, for tests to look at what the services did.

    The strict layer throttles like AWS, and tests poll while the services work: retry as a patient
    AWS client would, so a test never fails on RequestLimitExceeded.
    """
    import boto3
    from botocore.config import Config

    return boto3.client(
        "ec2",
        endpoint_url=endpoints.ec2_endpoint_url,  # type: ignore[attr-defined]
        region_name=endpoints.aws_region,  # type: ignore[attr-defined]
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "total_max_attempts": 10}, proxies={}),
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failing test's report carries the last lines of each running service's log (the autoscaler's journal says
    what it decided and why), and the boot watcher's (the hypervisor: each machine's power-on, stop and boot): a
    failure on a CI machine can be read without reproducing it."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed or not _STARTED:
        return
    cloud = _STARTED[0]
    for name in [*cloud.spawned(), "boot-watcher"]:
        report.sections.append((f"sandbox log {name}", cloud.log_tail(name, lines=FAILURE_LOG_LINES)))


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run that includes the stack's test starts making its images' base and wheels now, in the background: on a
    fresh machine (no cache) that is minutes of mmdebstrap and pip the other tests then hide. Runs before xdist
    starts its workers (its hook is trylast), so they inherit the variable that names the preparation's folder."""
    config = session.config
    if hasattr(config, "workerinput") or "not e2e" in (config.option.markexpr or ""):
        return
    chosen = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    if not any(path == STACK_TEST or path in STACK_TEST.parents for path in chosen):
        return
    from warmswarm_demos.stack_images import PREPARE_DIR_ENV, start_prepare

    folder = Path(tempfile.mkdtemp(prefix="wsbx-prepare-"))
    _PREPARING.append((start_prepare(REPO, folder), folder))
    os.environ[PREPARE_DIR_ENV] = str(folder)


def pytest_sessionfinish(session: pytest.Session) -> None:
    from warmswarm_demos.stack_images import stop_prepare

    for process, folder in _PREPARING:
        stop_prepare(process)
        shutil.rmtree(folder, ignore_errors=True)
    _PREPARING.clear()


@pytest.fixture(scope="session")
def stack_inputs_prepared() -> str:
    """Joins the session's background preparation: its output, or the test fails with it (ImageBuildError)."""
    from warmswarm_demos.stack_images import PREPARE_DIR_ENV, join_prepare

    folder = os.environ.get(PREPARE_DIR_ENV)
    if not folder:
        return "no background preparation in this run"
    started = time.monotonic()
    output = join_prepare(Path(folder))
    # What the stack's test still paid for it: the rest ran while the other tests did.
    return f"{output.strip()}\njoined after waiting {time.monotonic() - started:.1f} s"
