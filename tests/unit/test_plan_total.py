"""The planner is total: any snapshot gives a plan, and no plan gives one owner's room, node or data to another."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from warmswarm_autoscaling.snapshot import Snapshot

from .plan_properties import broken_rules, snapshots

# A few hundred examples here; `benchmarks/bench_total.py` runs 10,000 and more.
SUITE_EXAMPLES = 300


@settings(max_examples=SUITE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_every_plan_keeps_every_owners_room_node_and_data_their_own(snapshot: Snapshot) -> None:
    assert broken_rules(snapshot) == []
