"""A small day simulated end to end: the real reconciler and planner against the modelled AWS and swarm, and the
osparc-like baseline on the same trace. The full default day is the benchmark (`make simulate`)."""

from __future__ import annotations

import itertools

import pytest
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.policies import load_policies
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.workload import Session

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))
SESSIONS = generate_day(SPEC, seed=7)
POLICIES = load_policies()


def _returns_of_cache_owners() -> list[tuple[Session, Session, float]]:
    """(previous session, return, planned gap in s) of each return of a cache owner in the trace."""
    by_owner: dict[tuple[str, str, str], list[Session]] = {}
    for s in SESSIONS:
        if SPEC.groups[s.group].ebs_cache_enabled:
            by_owner.setdefault(s.owner, []).append(s)
    pairs = [pair for owned in by_owner.values() for pair in itertools.pairwise(owned)]
    return [(a, b, b.arrival_s - (a.arrival_s + a.duration_s)) for a, b in pairs]


def _ttl_s(session: Session) -> int:
    return SPEC.groups[session.group].cache_ttl_s


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
    returns = _returns_of_cache_owners()
    assert any(gap > _ttl_s(b) for _, b, gap in returns)  # a return after its cache's TTL
    assert any(gap <= _ttl_s(b) for _, b, gap in returns)
    assert any(b.memory_gib > a.memory_gib and b.data_gb == a.data_gb for a, b, _ in returns)  # a bigger one


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
    # One volume per cache owner, and another for each return after its TTL (the janitor had deleted the first),
    # each deleted once its TTL passed: the world ends empty.
    cache_owners = {s.owner for s in SESSIONS if "guests" not in s.groups}
    after_ttl = warmswarm.returns_overall - warmswarm.returns_within_ttl
    assert warmswarm.volumes_created == len(cache_owners) + after_ttl
    # Each made once; a volume made again for an owner back after its TTL first meets the token of the deleted one
    # (AWS answers with that volume, or refuses other arguments), spent from then on: one call more per return.
    assert warmswarm.calls("CreateVolume") == warmswarm.volumes_created + after_ttl
    assert warmswarm.calls("DeleteVolume") == warmswarm.volumes_created
    assert warmswarm.bill.cache_usd > 0


def test_a_return_after_its_ttl_downloads_afresh_and_one_within_hits(baseline: RunResult, warmswarm: RunResult) -> None:
    returns = _returns_of_cache_owners()
    # The trace's gaps are far from the TTLs (more than a session's wait and the release after it), so which
    # returns come within their TTL is the planned gap's answer, not a race with the janitor.
    margin_s = 1200.0
    assert all(abs(gap - _ttl_s(b)) > margin_s for _, b, gap in returns)
    within = [b for _, b, gap in returns if gap <= _ttl_s(b)]
    after = [b for _, b, gap in returns if gap > _ttl_s(b)]
    assert len(after) >= 1
    for result in (baseline, warmswarm):
        assert (result.returns_overall, result.returns_within_ttl) == (len(returns), len(within))
    assert baseline.hits_overall == 0
    assert (warmswarm.hits_within_ttl, warmswarm.hits_overall) == (len(within), len(within))  # none after the TTL
    assert warmswarm.hit_rate_overall < warmswarm.hit_rate_within_ttl == 1.0
    # Every session downloads its data but the returns within their TTL: the ones after it download afresh.
    assert warmswarm.downloaded_gb == pytest.approx(sum(s.data_gb for s in SESSIONS) - sum(s.data_gb for s in within))


def test_a_return_asking_for_more_runs_and_finds_its_data(warmswarm: RunResult) -> None:
    bigger = [b for a, b, _ in _returns_of_cache_owners() if (b.cpus, b.memory_gib) > (a.cpus, a.memory_gib)]
    assert warmswarm.bigger_returns == len(bigger) >= 1
    assert warmswarm.bigger_hits == len(bigger)  # same data key: its volume follows it to the bigger machine
    assert len(warmswarm.bigger_return_waits_s) == len(bigger)


def test_warmswarm_launches_the_cheapest_fit_one_machine_per_owner(baseline: RunResult, warmswarm: RunResult) -> None:
    assert warmswarm.calls("RunInstances") >= warmswarm.machines_launched
    # With one platform overhead under both (model.toml [platform]) the baseline's best fit picks these types too, so
    # the bills are no longer apart by the type; that the types are the cheapest fits is what is checked here.
    assert set(warmswarm.bill.instance_hours_by_type) <= {
        "t3.medium",
        "t3.large",
        "t3.xlarge",
        "m5.2xlarge",
        "g4dn.xlarge",
    }


def test_the_same_inputs_give_the_same_numbers(warmswarm: RunResult) -> None:
    assert _run("warmswarm") == warmswarm
