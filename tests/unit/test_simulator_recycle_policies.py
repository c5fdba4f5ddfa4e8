"""The simulator's recycling policies (issue 33): the warmswarm-recycle family recycles and accepts in every group,
and the fair page counts how each session got its machine, recycled ones among them."""

from __future__ import annotations

import math

from warmswarm_simulator.candidates import CANDIDATES
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.fair import start_path_table
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.platform import START_PATHS
from warmswarm_simulator.policies import load_policies

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))


def test_every_recycling_candidate_recycles_and_accepts_in_every_group() -> None:
    for candidate in CANDIDATES["warmswarm-recycle"]:
        merged = candidate.group_properties(SPEC.groups)
        assert all(g.recycle_machines and g.accept_recycled for g in merged.values()), candidate.name
        assert candidate.name.endswith(", recycled")


def test_a_recycling_policy_on_a_small_day_serves_sessions_from_recycled_machines_and_the_shares_add_up() -> None:
    spec = next(c for c in CANDIDATES["warmswarm-recycle"] if c.name.startswith("hot "))
    result = run_policy(MODEL, spec, generate_day(SPEC, 7), SPEC.groups, load_policies().max_instances)

    shares = result.start_path_shares()
    assert set(shares) == set(START_PATHS)
    assert math.isclose(sum(shares.values()), 1.0)
    assert shares["recycled"] > 0.0
    assert sum(n for _, n in result.start_paths) == result.sessions - result.never_ran
    table = start_path_table({spec.name: [result]})
    assert "| recycled, % |" in table
