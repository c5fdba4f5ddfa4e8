"""Swarm's placement rules as the planner reads them (plan/constraints.py): the owner ids a task is pinned to,
the attributes of an existing node, and what a node warmswarm would launch meets."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.actions import Launch
from warmswarm_models import NODE_LABEL_INSTANCE_TYPE, Owner

from .factories import (
    ALICE,
    ALICE_N1,
    ALICE_N2,
    NOW,
    actions_of,
    foreign_node,
    instance,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    waiting_for,
)

# -- owner ids ---------------------------------------------------------------------------------------------


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


def test_a_task_whose_owner_matches_a_node_only_in_part_is_not_waited_on_that_node() -> None:
    """Same user and project, another node id: swarm will never place it on alice/p1/n1's node."""
    n1_machine = instance("i-01", ALICE_N1)
    n1_node = node_of(n1_machine)

    result = run(snapshot(nodes=[n1_node], instances=[n1_machine], tasks=[pending_task("t-n2", ALICE_N2)]))

    [launch] = actions_of(result, Launch)
    assert launch.owner == ALICE_N2


def test_a_task_whose_owner_matches_a_booting_machine_only_in_part_does_not_wait_for_it() -> None:
    booting = instance("i-01", ALICE_N1, state="pending", launched_at=NOW - 10)

    result = run(snapshot(instances=[booting], tasks=[pending_task("t-n2", ALICE_N2)]))

    assert [launch.owner for launch in actions_of(result, Launch)] == [ALICE_N2]


# -- an existing node's attributes -------------------------------------------------------------------------


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


def test_a_constraint_beyond_the_owners_is_checked_against_existing_nodes_and_booting_machines() -> None:
    """Pinned to another instance type: alice's t3.medium (running or booting) has room but will never take it."""
    wants_large = f"node.labels.{NODE_LABEL_INSTANCE_TYPE}==m5.large"
    task = pending_task("t-large", ALICE_N1, cpus=0.5, constraints=[wants_large])
    small = instance("i-01", ALICE_N1)
    booting_small = instance("i-02", ALICE_N1, state="pending", launched_at=NOW - 10)

    for world in (
        snapshot(nodes=[node_of(small)], instances=[small], tasks=[task]),
        snapshot(instances=[booting_small], tasks=[task]),
    ):
        reason = waiting_for(run(world), "t-large").reason
        assert "fits on node" not in reason
        assert "waiting for instance" not in reason

    # A constraint the node meets leaves it the task's room.
    on_workers = pending_task("t-worker", ALICE_N1, cpus=0.5, constraints=["node.role==worker"])
    result = run(snapshot(nodes=[node_of(small, hostname="alice-box")], instances=[small], tasks=[on_workers]))
    assert actions_of(result, Launch) == []
    assert "fits on node alice-box" in waiting_for(result, "t-worker").reason


# -- what a new node meets ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "constraint",
    # Swarm compares values, and the names of node attributes, regardless of case.
    [
        "node.role==worker",
        "node.platform.os==linux",
        "node.labels.other!=y",
        "Node.Role==Worker",
        "node.platform.os==Linux",
    ],
)
def test_constraints_a_new_node_meets_do_not_stop_a_launch(constraint: str) -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE, constraints=[constraint])]))
    assert only(result, Launch).owner == ALICE
