"""Swarm's placement rules as the planner reads them (owner ids, node attributes) and where a launch goes."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.actions import Launch
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_models import Owner

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    INSTANCE_TYPES,
    ZONE_A,
    ZONE_B,
    actions_of,
    foreign_node,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    resources,
    run,
    snapshot,
    waiting_for,
)


@pytest.mark.parametrize(
    "owner",
    [Owner(user_id="alice"), Owner(user_id="alice", project_id="p1"), Owner(project_id="p1", node_id="n1")],
    ids=str,
)
def test_a_task_pinned_by_some_ids_fits_a_node_that_carries_those_and_more(owner: Owner) -> None:
    """Swarm checks only the ids a service is constrained on: alice/p1/n1's node takes work pinned to alice."""
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine, hostname="alice-box")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", owner)]))
    assert waiting_for(result, "t1").reason == "fits on node alice-box; waiting for the swarm scheduler"
    assert actions_of(result, Launch) == []


@pytest.mark.parametrize(
    "constraint",
    ["node.role==manager", "node.hostname==host-m1", "node.id==m1", "node.role!=worker", "node.hostname!=other"],
)
def test_constraints_on_a_nodes_own_attributes_are_checked_against_that_node(constraint: str) -> None:
    """A manager labelled for alice takes her work pinned to it by role, hostname or id (none a new node meets)."""
    manager = foreign_node("m1", role="manager", labels=ALICE.labels())
    result = run(snapshot(nodes=[manager], tasks=[pending_task("t1", ALICE, constraints=[constraint])]))
    assert waiting_for(result, "t1").reason == "fits on node host-m1; waiting for the swarm scheduler"
    assert result.actions == ()


def test_a_node_that_fails_a_constraint_is_not_the_tasks_room() -> None:
    """alice's manager is no room for work pinned to workers (a new worker is) nor to another node id (none is)."""
    manager = foreign_node("m1", role="manager", labels=ALICE.labels())

    on_workers = run(snapshot(nodes=[manager], tasks=[pending_task("t1", ALICE, constraints=["node.role==worker"])]))
    assert only(on_workers, Launch).task_ids == ("t1",)

    elsewhere = run(snapshot(nodes=[manager], tasks=[pending_task("t1", ALICE, constraints=["node.id==m2"])]))
    waiting = waiting_for(elsewhere, "t1")
    assert waiting.reason == "constraint 'node.id==m2' cannot be met by a node warmswarm launches"
    assert waiting.unschedulable


# -- where a launch goes ----------------------------------------------------------------------------------------


def test_owners_with_different_sizes_each_get_the_cheapest_type_that_fits_their_own_work() -> None:
    """The fitting types are worked out per demand: a large task's choice is not a small one's."""
    large = pending_task("t-large", ALICE, cpus=3.0, memory_gib=8.0)
    small = pending_task("t-small", BOB, cpus=1.0, memory_gib=1.0)
    launches = {
        launch.owner: launch.instance_type for launch in actions_of(run(snapshot(tasks=[large, small])), Launch)
    }
    assert launches == {ALICE: "m5.xlarge", BOB: "t3.medium"}


def test_a_launch_goes_to_the_allowed_zone_with_fewest_of_our_machines() -> None:
    busy_a = instance("i-01", BOB, zone=ZONE_A)
    result = run(snapshot(nodes=[node_of(busy_a)], instances=[busy_a], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).availability_zone == ZONE_B


def test_a_zone_missing_from_the_machine_count_counts_as_empty() -> None:
    """Called directly: plan() always counts every allowed zone (zero included), so only the method's own
    contract can show that a zone it is not told about holds none of our machines."""
    offerings = Offerings(INSTANCE_TYPES, make_policy())
    found = offerings.cheapest(resources(1.0, 1.0), {}, {ZONE_A: 1}, (ZONE_A, ZONE_B))
    assert found is not None
    assert (found[0].name, found[1]) == ("t3.medium", ZONE_B)
    # And a tie between zones goes to the first allowed.
    tie = offerings.cheapest(resources(1.0, 1.0), {}, {}, (ZONE_B, ZONE_A))
    assert tie is not None
    assert tie[1] == ZONE_B
