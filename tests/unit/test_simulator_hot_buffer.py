"""The hot buffer in the simulator: a session claims a running machine with its images pulled, its new volume is
attached and mounted while the machine runs (ebs.hot_mount_s), and it runs with no boot, no start and no pull."""

from __future__ import annotations

import pytest
from warmswarm_models import GroupProperties
from warmswarm_simulator.config import load_model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.workload import Session

MODEL = load_model()
ZONES = len(MODEL.availability_zones)
ARRIVAL_S = 8 * 3600.0
DATA_GB = 0.6  # a short download (10 s), so that the wait is the machine's


def _run(settings: dict[str, object]) -> RunResult:
    """Alice's first session of the day (a notebook, with a cache kept an hour) at 08:00."""
    groups = {"lab": GroupProperties(ebs_cache_enabled=True, cache_ttl_s=3600, cache_size_gib=20)}
    spec = PolicySpec("hot", "warmswarm", "a hot buffer", settings={"idle_grace_s": 60.0, **settings})
    session = Session(ARRIVAL_S, "alice", "p1", "n1", 1.0, 2.0, 0, 600.0, "lab", DATA_GB)
    return run_policy(MODEL, spec, [session], groups, max_instances=10)


@pytest.fixture(scope="module")
def warm() -> RunResult:
    return _run({"warm_buffer": {"t3.medium": 1}, "buffer_images": [SESSION_IMAGE]})


@pytest.fixture(scope="module")
def hot() -> RunResult:
    return _run({"hot_buffer": {"t3.medium": 1}, "buffer_images": [SESSION_IMAGE]})


def test_a_first_session_claims_a_hot_machine_and_runs_sooner_than_from_the_warm_buffer(
    warm: RunResult, hot: RunResult
) -> None:
    assert hot.never_ran == warm.never_ran == 0
    (hot_wait_s,), (warm_wait_s,) = hot.waits_s, warm.waits_s
    # No start and no boot: the volume's create, its attach, the hot mount, the download and the container.
    assert (hot.buffer_starts, hot.machines_resumed) == (0, 0)
    assert hot_wait_s < MODEL.ec2.restart_boot_s
    assert hot_wait_s < warm_wait_s / 2
    # Every machine launched was the buffer's: one per zone, and the refill behind the claim.
    assert hot.calls("RunInstances") == hot.machines_launched == ZONES + 1
    assert hot.downloaded_gb == pytest.approx(DATA_GB)  # the image was on the machine: only the data came
    assert hot.reused_across_owners == 0


def test_a_hot_buffer_costs_its_running_hours(warm: RunResult, hot: RunResult) -> None:
    assert hot.bill.total_usd > warm.bill.total_usd  # running machines cost instance-hours, stopped ones disks
