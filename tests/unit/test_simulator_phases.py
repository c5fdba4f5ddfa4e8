"""Waits cut into phases: they add up to the wait, each ends at its own event, and a small day reads them right."""

from __future__ import annotations

import pytest
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.phases import PHASES, Marks, SessionPhases, summarise
from warmswarm_simulator.policies import load_policies

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))
SESSIONS = generate_day(SPEC, seed=7)
POLICIES = load_policies()


def test_a_cold_start_s_phases_end_at_their_events() -> None:
    marks = Marks(
        requested_s=100.0,
        launch_call_s=103.0,
        joined_s=223.0,
        assigned_s=225.0,
        image_ready_s=315.0,
        running_s=320.0,
        ready_s=350.0,
    )
    assert marks.durations_s() == (3.0, 120.0, 2.0, 90.0, 5.0, 30.0)


def test_events_before_the_request_count_nothing_and_the_phases_still_add_up() -> None:
    # A hot machine: launched and joined long before, its image already there.
    marks = Marks(
        100.0, launch_call_s=10.0, joined_s=50.0, assigned_s=101.0, image_ready_s=101.0, running_s=106.0, ready_s=106.0
    )
    durations = marks.durations_s()
    assert durations == (0.0, 0.0, 1.0, 0.0, 5.0, 0.0)
    assert sum(durations) == pytest.approx(marks.ready_s - marks.requested_s)


def test_the_summary_takes_each_phase_s_median_and_p95_over_its_sessions() -> None:
    sessions = [SessionPhases(True, False, tuple(float(i + k) for k in range(len(PHASES)))) for i in range(20)]
    summary = summarise(sessions)
    assert summary.sessions == 20
    assert summary.p50_s[0] == 9.0
    assert summary.p95_s[0] == 18.0
    assert summary.p50_s[5] == 14.0


@pytest.mark.parametrize("name", ["baseline", "warmswarm"])
def test_every_session_s_phases_add_up_to_its_wait_on_a_small_day(name: str) -> None:
    result = run_policy(MODEL, POLICIES.named(name), SESSIONS, SPEC.groups, POLICIES.max_instances)
    assert len(result.phases) == result.sessions - result.never_ran
    assert sorted(sum(p.durations_s) for p in result.phases) == pytest.approx(list(result.waits_s), abs=1e-6)
    firsts = [p for p in result.phases if p.first]
    assert firsts
    assert len(firsts) < len(result.phases)
    pull = PHASES.index("image pull")
    # A first session on a machine launched for it pulls the image; the model's pull is 90 s.
    assert any(p.durations_s[pull] == pytest.approx(MODEL.swarm.image_pull_s) for p in firsts)
    if name == "warmswarm":
        assert result.reused_across_owners == 0, "warmswarm never gives one owner's machine to another"
