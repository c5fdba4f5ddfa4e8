"""Decisions at their edges: owners that match only in part, constraints beyond the owner's, a timeout to the second."""

from __future__ import annotations

from warmswarm_autoscaling.actions import AttachVolume, DetachVolume, Launch
from warmswarm_models import NODE_LABEL_INSTANCE_TYPE

from .factories import (
    ALICE_N1,
    ALICE_N2,
    NOW,
    actions_of,
    attachment,
    instance,
    make_policy,
    node_of,
    pending_task,
    run,
    snapshot,
    volume,
    waiting_for,
)


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


def test_an_attach_stuck_for_exactly_the_timeout_is_left_one_more_cycle() -> None:
    """The rule is 'longer than attach_timeout_s': at the second itself, nothing; a second later, a detach."""
    booted = instance("i-0a1", ALICE_N1, volume_id="vol-1", launched_at=NOW - 300)

    def stuck_for(stuck_s: float) -> list[DetachVolume]:
        stuck = attachment("i-0a1", state="attaching", attached_at=NOW - stuck_s)
        vol = volume("vol-1", ALICE_N1, state="in-use", attached_to=[stuck])
        result = run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=120.0))
        assert actions_of(result, AttachVolume) == []
        return actions_of(result, DetachVolume)

    assert stuck_for(120.0) == []
    assert [d.volume_id for d in stuck_for(121.0)] == ["vol-1"]
