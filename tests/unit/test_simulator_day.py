"""A small day simulated end to end: the real reconciler and planner against the modelled AWS and swarm, and the
osparc-like baseline on the same trace. The full default day is the benchmark (`make simulate`)."""

from __future__ import annotations

import pytest
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.policies import load_policies
from warmswarm_simulator.results import RunResult

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))
SESSIONS = generate_day(SPEC, seed=7)
POLICIES = load_policies()


def _run(name: str) -> RunResult:
    return run_policy(MODEL, POLICIES.named(name), SESSIONS, SPEC.groups, POLICIES.max_instances)


@pytest.fixture(scope="module")
def baseline() -> RunResult:
    return _run("baseline")


@pytest.fixture(scope="module")
def warmswarm() -> RunResult:
    return _run("warmswarm")


def test_the_small_day_has_every_kind_of_session() -> None:
    owners = [s.owner for s in SESSIONS]
    assert len(SESSIONS) >= 25
    assert len(set(owners)) < len(owners)  # returns
    assert any(s.user.startswith("s") for s in SESSIONS)
    assert any(s.user.startswith("h") for s in SESSIONS)


def test_every_session_runs_under_both_policies(baseline: RunResult, warmswarm: RunResult) -> None:
    for result in (baseline, warmswarm):
        assert result.sessions == len(SESSIONS)
        assert result.never_ran == 0
        assert result.interruptions == 0
        # No session starts before a machine has booted and pulled its image, unless its own machine still ran.
        assert result.wait_p50_s > 120


def test_the_baseline_downloads_every_sessions_data_and_keeps_no_cache(baseline: RunResult) -> None:
    assert baseline.downloaded_gb == pytest.approx(sum(s.data_gb for s in SESSIONS))
    assert baseline.hits_within_ttl == 0
    assert baseline.returns_within_ttl > 0
    assert baseline.bill.cache_usd == 0.0
    assert baseline.volumes_created == 0
    assert baseline.calls("RunInstances") <= baseline.machines_launched  # one call per type batch


def test_warmswarm_finds_returning_owners_data_in_place(baseline: RunResult, warmswarm: RunResult) -> None:
    assert warmswarm.returns_within_ttl == baseline.returns_within_ttl
    assert warmswarm.hit_rate_within_ttl >= 0.9
    assert warmswarm.downloaded_gb < baseline.downloaded_gb
    # One volume per cache owner, each deleted by the janitor once its TTL passed: the world ends empty.
    cache_owners = {s.owner for s in SESSIONS if "guests" not in s.groups}
    assert warmswarm.volumes_created == len(cache_owners)
    assert warmswarm.calls("CreateVolume") == warmswarm.volumes_created  # each made once, never asked again
    assert warmswarm.calls("DeleteVolume") == warmswarm.volumes_created
    assert warmswarm.bill.cache_usd > 0


def test_warmswarm_launches_the_cheapest_fit_one_machine_per_owner(baseline: RunResult, warmswarm: RunResult) -> None:
    assert warmswarm.calls("RunInstances") >= warmswarm.machines_launched
    assert warmswarm.bill.instance_usd < baseline.bill.instance_usd
    assert set(warmswarm.bill.instance_hours_by_type) <= {
        "t3.medium",
        "t3.large",
        "t3.xlarge",
        "m5.2xlarge",
        "g4dn.xlarge",
    }


def test_the_same_inputs_give_the_same_numbers(warmswarm: RunResult) -> None:
    assert _run("warmswarm") == warmswarm
