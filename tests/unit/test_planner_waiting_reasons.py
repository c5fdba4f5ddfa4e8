"""What a waiting task is told, in each of the planner's situations (the status shows it to its owner): a machine
joining, a node the scheduler has yet to use, a drained node brought back, a returning owner's node that is down;
and, when EC2 knows none of the allowed types, that nothing is offered."""

from __future__ import annotations

from .factories import (
    ALICE,
    NOW,
    instance,
    make_policy,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
    waiting_for,
)


def test_a_task_whose_machine_is_booting_waits_for_it_to_join() -> None:
    booting = instance("i-boot", ALICE, state="pending", launched_at=NOW - 30)

    result = run(snapshot(tasks=[pending_task("t1", ALICE)], instances=[booting]))

    waiting = waiting_for(result, "t1")
    assert waiting.reason == "waiting for instance i-boot (t3.medium) to join the swarm"
    assert waiting.starting
    assert not waiting.unschedulable


def test_a_task_that_fits_on_a_labelled_node_waits_for_the_scheduler() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11")

    result = run(snapshot(nodes=[node], tasks=[pending_task("t1", ALICE)], instances=[machine]))

    assert waiting_for(result, "t1").reason == "fits on node ip-10-0-0-11; waiting for the swarm scheduler"
    assert result.actions == ()


def test_a_drained_node_of_the_owner_is_brought_back_and_says_so() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11", availability="drain")

    result = run(snapshot(nodes=[node], tasks=[pending_task("t1", ALICE)], instances=[machine]))

    assert waiting_for(result, "t1").reason == f"node ip-10-0-0-11 of {ALICE} is brought back from drain"
    assert [a.kind for a in result.actions] == ["activate"]


def test_a_returning_owners_node_that_is_down_is_waited_for_while_its_machine_runs() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11", state="down")
    task = pending_task("t1", ALICE)
    earlier = running_task("t0", node, ALICE)

    result = run(snapshot(nodes=[node], tasks=[task, earlier], instances=[machine], down_since={node.id: NOW - 5}))

    assert waiting_for(result, "t1").reason == (
        f"node ip-10-0-0-11 of {ALICE} is down while i-1 runs: waiting for it to come back"
        " (terminated and replaced after max_start_s)"
    )


def test_when_ec2_knows_none_of_the_allowed_types_nothing_is_offered() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], instance_types={}), make_policy())

    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    assert "nothing (no allowed type is known to EC2)" in waiting.reason
    assert result.actions == ()


# -- what becomes of nodes, and why -------------------------------------------------------------------------


def test_a_stale_registration_of_a_machine_that_rejoined_is_removed_saying_so() -> None:
    machine = instance("i-1", ALICE)
    stale = node_of(machine, node_id="node-old", hostname="ip-10-0-0-11", state="down")
    fresh = node_of(machine, node_id="node-new", hostname="ip-10-0-0-11")

    result = run(snapshot(nodes=[stale, fresh], instances=[machine], idle_since={"node-new": NOW}))

    assert [(a.kind, a.target, a.reason) for a in result.actions] == [
        ("remove_node", "node-old", "node ip-10-0-0-11 is down; its machine rejoined as another node")
    ]


def test_a_node_down_for_longer_than_a_boot_has_its_machine_terminated_saying_for_how_long() -> None:
    machine = instance("i-1", ALICE)
    node = node_of(machine, hostname="ip-10-0-0-11", state="down")
    policy = make_policy()

    result = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - policy.max_start_s}), policy)

    (terminate,) = result.actions
    assert (terminate.kind, terminate.target) == ("terminate", "i-1")
    assert terminate.reason == (
        f"node ip-10-0-0-11 has been down for {policy.max_start_s:.0f} s while its instance runs"
        f" (max_start_s={policy.max_start_s:g})"
    )
