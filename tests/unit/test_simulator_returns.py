"""Returns the cache can miss, on the real autoscaler: one after its TTL downloads afresh into a new volume while one
within it reads its data in place; one asking for more resources runs on a machine type that fits it, its data there."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_models import GroupProperties
from warmswarm_simulator.config import load_model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.policies import load_policies
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.workload import Session

MODEL = load_model()
POLICIES = load_policies()
FIRST_ARRIVAL_S = 8 * 3600.0
DURATION_S = 600.0
TTL_S = 3600
# A session's end comes after its planned end by its wait (a cold start, about four minutes): gaps are counted
# from the planned end plus this, so that "3 h after" is 3 h after the session really ended, give or take minutes.
_WAIT_ALLOWANCE_S = 300.0
# A fresh install's idle grace: how long an owner's idle machine (and the volume on it) is kept for them.
IDLE_GRACE_S = float(AutoscalingSettings.model_fields["idle_grace_s"].default)


def _session(user: str, arrival_s: float, data_gb: float, cpus: float = 1.0, memory_gib: float = 2.0) -> Session:
    return Session(arrival_s, user, f"p-{user}", "n1", cpus, memory_gib, 0, DURATION_S, "short", data_gb)


def _back(gap_s: float) -> float:
    """The arrival of a return `gap_s` after the first session (arrived at FIRST_ARRIVAL_S) ended."""
    return FIRST_ARRIVAL_S + DURATION_S + _WAIT_ALLOWANCE_S + gap_s


def _run(sessions: list[Session]) -> RunResult:
    groups = {"short": GroupProperties(ebs_cache_enabled=True, cache_ttl_s=TTL_S, cache_size_gib=20)}
    return run_policy(MODEL, POLICIES.named("warmswarm"), sessions, groups, max_instances=10)


def test_a_return_after_its_ttl_downloads_afresh_and_one_within_it_hits() -> None:
    alice_gb, bob_gb = 3.0, 5.0
    result = _run(
        [
            _session("alice", FIRST_ARRIVAL_S, alice_gb),
            _session("alice", _back(3 * TTL_S), alice_gb),  # long after her volume's TTL ran out
            _session("bob", FIRST_ARRIVAL_S, bob_gb),
            _session("bob", _back(TTL_S / 3), bob_gb),
        ]
    )
    assert result.never_ran == 0
    assert (result.returns_within_ttl, result.hits_within_ttl) == (1, 1)  # bob's
    assert (result.returns_overall, result.hits_overall) == (2, 1)  # alice's missed
    assert result.hit_rate_overall == pytest.approx(0.5)
    # Alice's data twice (the janitor had deleted her volume; a new one was made), Bob's once.
    assert result.downloaded_gb == pytest.approx(2 * alice_gb + bob_gb)
    assert result.volumes_created == 3


def _bigger_return(gap_s: float) -> RunResult:
    """carol works on a notebook (1 CPU, 2 GiB), closes it and comes back `gap_s` later asking for 3 CPUs, 12 GiB."""
    return _run(
        [
            _session("carol", FIRST_ARRIVAL_S, 2.0),
            _session("carol", _back(gap_s), 2.0, cpus=3.0, memory_gib=12.0),
        ]
    )


@pytest.mark.parametrize(
    "gap_s",
    [
        pytest.param(1800.0, id="her machine gone"),
        pytest.param(60.0, id="her machine still idle"),  # within idle_grace_s: it holds her volume
    ],
)
def test_a_return_asking_for_more_runs_on_a_machine_that_fits_it_and_finds_its_data(gap_s: float) -> None:
    result = _bigger_return(gap_s)
    assert result.never_ran == 0
    assert (result.bigger_returns, result.bigger_hits) == (1, 1)
    assert result.downloaded_gb == pytest.approx(2.0)  # once: the volume followed her to the bigger machine
    # The notebook's machine (2 vCPUs, 4 GiB) cannot hold the return; the cheapest type that does, 4 / 16, ran it.
    assert set(result.bill.instance_hours_by_type) == {"t3.medium", "t3.xlarge"}
    assert result.machines_launched == 2
    assert result.volumes_created == 1
    (wait_s,) = result.bigger_return_waits_s
    assert wait_s in result.waits_s
    # At worst her idle machine keeps the volume until its grace ends (the planner does not release it early for a
    # task it cannot hold), then a cold start: never longer.
    assert wait_s < IDLE_GRACE_S + _WAIT_ALLOWANCE_S
