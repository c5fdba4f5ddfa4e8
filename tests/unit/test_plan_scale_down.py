"""Scale down: idle nodes of ours are drained, terminated, then removed; busy or foreign nodes are left alone."""

from __future__ import annotations

from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import Activate, Drain, Launch, RemoveNode, Terminate
from warmswarm_autoscaling.snapshot import Node

from .factories import (
    ALICE,
    BOB,
    NOBODY,
    NOW,
    actions_of,
    foreign_node,
    instance,
    make_policy,
    names,
    next_snapshot,
    node_of,
    only,
    pending_task,
    run,
    running_task,
    snapshot,
    waiting_for,
)

GRACE_S = 300.0  # the default policy's idle_grace_s


def test_idle_node_is_drained_then_terminated_then_removed_carrying_idle_since_between_cycles() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)

    first = run(snapshot(nodes=[node], instances=[alice_i], now=NOW))
    assert first.actions == ()
    assert first.idle_since == {node.id: NOW}

    before_grace = run(next_snapshot(first, now=NOW + GRACE_S - 1, nodes=[node], instances=[alice_i]))
    assert before_grace.actions == ()
    assert before_grace.idle_since == {node.id: NOW}

    drain = run(next_snapshot(before_grace, now=NOW + GRACE_S, nodes=[node], instances=[alice_i]))
    assert only(drain, Drain).node_id == node.id
    assert len(drain.actions) == 1

    drained = node_of(alice_i, availability="drain")
    terminate = run(next_snapshot(drain, now=NOW + GRACE_S + 30, nodes=[drained], instances=[alice_i]))
    assert only(terminate, Terminate).instance_id == alice_i.id
    assert len(terminate.actions) == 1

    # The instance shuts down; the swarm notices the node is gone a little later.
    shutting = instance("i-01", ALICE, state="shutting-down")
    still_ready = run(next_snapshot(terminate, now=NOW + GRACE_S + 60, nodes=[drained], instances=[shutting]))
    assert still_ready.actions == ()

    down = node_of(alice_i, availability="drain", state="down")
    remove = run(next_snapshot(still_ready, now=NOW + GRACE_S + 90, nodes=[down], instances=[shutting]))
    assert only(remove, RemoveNode).node_id == node.id
    assert len(remove.actions) == 1


def test_idle_since_lost_restarts_the_grace() -> None:
    alice_i = instance("i-01", ALICE)
    result = run(snapshot(nodes=[node_of(alice_i)], instances=[alice_i], now=NOW + 10_000, idle_since={}))
    assert result.actions == ()
    assert result.idle_since == {"node-i-01": NOW + 10_000}


def test_idle_grace_comes_from_the_policy() -> None:
    alice_i = instance("i-01", ALICE)
    snap = snapshot(nodes=[node_of(alice_i)], instances=[alice_i], idle_since={"node-i-01": NOW - 60})
    assert actions_of(run(snap, make_policy(idle_grace_s=60.0)), Drain) != []
    assert actions_of(run(snap, make_policy(idle_grace_s=61.0)), Drain) == []


@pytest.mark.parametrize("state", ["assigned", "preparing", "starting", "running"])
def test_node_with_an_active_task_is_never_drained(state: str) -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    task = running_task("t1", node, ALICE, state=state)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task], idle_since={node.id: NOW - 10_000}))
    assert result.actions == ()
    assert node.id not in result.idle_since  # busy: the idle clock starts over


def test_drained_node_with_an_active_task_is_not_terminated() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    task = running_task("t1", node, ALICE)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task], idle_since={node.id: NOW - 10_000}))
    assert actions_of(result, Terminate) == []


def test_a_global_services_task_does_not_keep_a_node_busy() -> None:
    """A monitoring agent runs on every node: were it work, no node would ever go away."""
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    agent = replace(running_task("agent.n1", node, cpus=0.1, memory_gib=0.1), global_service=True)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[agent], idle_since={node.id: NOW - GRACE_S}))
    assert only(result, Drain).node_id == node.id

    # The same node with real work beside the agent stays.
    work = running_task("t1", node, ALICE)
    busy = run(snapshot(nodes=[node], instances=[alice_i], tasks=[agent, work], idle_since={node.id: NOW - GRACE_S}))
    assert busy.actions == ()


def test_a_global_services_reservation_still_takes_room_on_its_node() -> None:
    alice_i = instance("i-01", ALICE)  # t3.medium: 2 CPUs
    node = node_of(alice_i)
    agent = replace(running_task("agent.n1", node, cpus=1.5, memory_gib=0.1), global_service=True)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[agent, pending_task("t1", ALICE, cpus=1.0)]))
    (launch,) = actions_of(result, Launch)
    assert launch.task_ids == ("t1",), "the 0.5 CPU the agent leaves is too little: a new machine"


def test_a_global_services_task_never_causes_a_launch() -> None:
    unbound = replace(pending_task("agent.x", cpus=0.1), global_service=True)
    result = run(snapshot(tasks=[unbound]))
    assert result.actions == ()


def test_node_whose_tasks_are_all_finished_is_idle() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    tasks = [
        running_task("t1", node, ALICE, state="complete", desired_state="shutdown"),
        running_task("t2", node, ALICE, state="running", desired_state="shutdown"),
        running_task("t3", node, ALICE, state="failed", desired_state="running"),
    ]
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=tasks, idle_since={node.id: NOW - GRACE_S}))
    assert only(result, Drain).node_id == node.id


@pytest.mark.parametrize(
    ("state", "desired_state", "err"),
    [
        ("pending", "running", ""),  # created, the scheduler has not looked yet
        ("pending", "running", "no suitable node (insufficient resources on 1 node)"),
        ("new", "ready", ""),  # in its restart delay: swarm sets desired "running" once the delay is over
    ],
)
def test_task_restarting_keeps_its_owners_node_busy(state: str, desired_state: str, err: str) -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    old = running_task("t1", node, ALICE, state="failed", desired_state="shutdown")
    new = pending_task("t2", ALICE, state=state, desired_state=desired_state, err=err)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[old, new], idle_since={node.id: NOW - 10_000}))
    assert actions_of(result, Drain) == []
    assert actions_of(result, Launch) == []
    assert node.id not in result.idle_since


def test_another_owners_pending_task_does_not_keep_a_node_busy() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    result = run(
        snapshot(
            nodes=[node],
            instances=[alice_i],
            tasks=[pending_task("t2", BOB, err="")],
            idle_since={node.id: NOW - GRACE_S},
        )
    )
    assert only(result, Drain).node_id == node.id


def test_drained_idle_node_is_brought_back_for_its_owners_task_instead_of_a_launch() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    result = run(
        snapshot(
            nodes=[node],
            instances=[alice_i],
            tasks=[pending_task("t1", ALICE)],
            idle_since={node.id: NOW - 10_000},
        )
    )
    assert only(result, Activate).node_id == node.id
    assert actions_of(result, Launch) == []
    assert actions_of(result, Terminate) == []
    assert node.id not in result.idle_since


def test_drained_node_is_not_brought_back_for_a_task_that_does_not_fit() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    task = pending_task("t1", ALICE, cpus=3.0)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task], idle_since={node.id: NOW - GRACE_S}))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).instance_type == "m5.xlarge"
    assert only(result, Terminate).instance_id == alice_i.id


def test_drained_node_is_not_brought_back_for_another_owner() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, availability="drain")
    result = run(
        snapshot(
            nodes=[node], instances=[alice_i], tasks=[pending_task("t1", BOB)], idle_since={node.id: NOW - GRACE_S}
        )
    )
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == BOB
    assert only(result, Terminate).instance_id == alice_i.id


def test_drained_node_whose_instance_is_going_is_not_brought_back() -> None:
    shutting = instance("i-01", ALICE, state="shutting-down")
    node = node_of(shutting, availability="drain")
    result = run(snapshot(nodes=[node], instances=[shutting], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == ALICE


def test_active_node_whose_instance_is_going_takes_no_task() -> None:
    # Terminated from outside (a spot interruption, by hand): swarm still shows it ready for a while.
    shutting = instance("i-01", ALICE, state="shutting-down")
    node = node_of(shutting)
    result = run(snapshot(nodes=[node], instances=[shutting], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


@pytest.mark.parametrize("gone", ["shutting-down", "terminated", "absent"])
def test_down_node_whose_instance_is_gone_is_removed(gone: str) -> None:
    alice_i = instance("i-01", ALICE, state="running" if gone == "absent" else gone)
    node = node_of(alice_i, state="down")
    instances = [] if gone == "absent" else [alice_i]  # terminated instances drop out of the listing
    result = run(snapshot(nodes=[node], instances=instances))
    assert only(result, RemoveNode).node_id == node.id
    assert len(result.actions) == 1


def test_down_unlabelled_node_whose_instance_is_gone_is_removed() -> None:
    shutting = instance("i-01", ALICE, state="shutting-down")
    node = node_of(shutting, state="down", labelled=False)
    assert only(run(snapshot(nodes=[node], instances=[shutting])), RemoveNode).node_id == node.id


def test_ready_node_whose_instance_is_gone_is_not_removed_yet() -> None:
    shutting = instance("i-01", ALICE, state="shutting-down")
    result = run(snapshot(nodes=[node_of(shutting)], instances=[shutting], idle_since={"node-i-01": NOW - 10_000}))
    assert result.actions == ()


def test_down_node_whose_instance_still_runs_is_not_removed() -> None:
    alice_i = instance("i-01", ALICE)
    result = run(snapshot(nodes=[node_of(alice_i, state="down")], instances=[alice_i]))
    assert actions_of(result, RemoveNode) == []


def _foreign_nodes() -> list[Node]:
    return [
        foreign_node("mgr", role="manager"),
        foreign_node("by-hand"),
        foreign_node("by-hand-down", state="down"),
        foreign_node("by-hand-drained", availability="drain"),
        foreign_node("other-cluster", engine_instance_id="i-not-ours"),
        foreign_node("other-cluster-down", engine_instance_id="i-not-ours-2", state="down"),
        foreign_node("ops-labelled", labels={"user_id": "alice"}),
        foreign_node("ops-mislabelled", labels={"user_id": "not a valid id"}),
        foreign_node("claims-warmswarm", labels={"warmswarm.instance-id": "i-x"}, engine_instance_id="i-y"),
    ]


def test_node_we_did_not_create_is_never_touched_even_when_idle_or_down() -> None:
    nodes = _foreign_nodes()
    ours = instance("i-01", ALICE)
    snap = snapshot(
        nodes=[*nodes, node_of(ours)],
        instances=[ours],
        tasks=[pending_task("t1", NOBODY, cpus=64.0, constraints=["node.labels.other==y"]), pending_task("t2", BOB)],
        idle_since={n.id: NOW - 100_000 for n in nodes},
    )
    result = run(snap)
    named = {name for action in result.actions for name in names(action)}
    assert named.isdisjoint({n.id for n in nodes})
    assert all(n.id not in result.idle_since for n in nodes)
    # The plan did act (on our node and for the tasks), so the check above is not vacuous.
    assert result.actions


def test_drained_node_we_did_not_create_is_not_brought_back() -> None:
    drained = foreign_node("by-hand-drained", availability="drain")
    result = run(snapshot(nodes=[drained], tasks=[pending_task("t1", NOBODY)]))
    assert actions_of(result, Activate) == []
    assert only(result, Launch).owner == NOBODY


def test_node_labelled_with_an_unusable_owner_id_does_not_break_the_plan() -> None:
    mislabelled = foreign_node("ops-mislabelled", labels={"user_id": "not a valid id"})
    result = run(snapshot(nodes=[mislabelled], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Launch).owner == ALICE


def test_drained_node_of_the_owner_is_preferred_to_a_machine_still_booting() -> None:
    # Alice's idle node was drained and a machine was launched for her meanwhile: the task goes
    # back to the node she has (no wait for a boot, and her node is not terminated under her).
    drained_i = instance("i-01", ALICE)
    drained = node_of(drained_i, availability="drain")
    booting = instance("i-02", ALICE, state="pending", launched_at=NOW - 5)
    result = run(
        snapshot(
            nodes=[drained],
            instances=[drained_i, booting],
            tasks=[pending_task("t1", ALICE)],
            idle_since={drained.id: NOW - 10_000},
        )
    )
    assert only(result, Activate).node_id == drained.id
    assert actions_of(result, Terminate) == []


def test_node_down_while_its_instance_runs_is_terminated_after_max_start_s() -> None:
    # The machine lost the swarm (a crashed daemon, a broken network): it runs nothing and costs money.
    lost_i = instance("i-01", ALICE)
    lost = node_of(lost_i, state="down")
    policy = make_policy(max_start_s=600.0)
    first = run(snapshot(nodes=[lost], instances=[lost_i]), policy)
    assert actions_of(first, Terminate) == []
    assert first.down_since == {lost.id: NOW}

    later = run(snapshot(nodes=[lost], instances=[lost_i], down_since={lost.id: NOW - 601}), policy)
    terminate = only(later, Terminate)
    assert terminate.instance_id == lost_i.id
    assert terminate.cause == "node_down"


def test_stale_down_node_of_a_machine_that_rejoined_is_removed_not_its_instance() -> None:
    machine = instance("i-01", ALICE)
    stale = node_of(machine, node_id="old", state="down")
    fresh = node_of(machine, node_id="new")
    result = run(
        snapshot(nodes=[stale, fresh], instances=[machine], tasks=[running_task("t1", fresh, ALICE)]),
    )
    assert only(result, RemoveNode).node_id == "old"
    assert actions_of(result, Terminate) == []


def test_someone_elses_work_on_an_owners_node_does_not_keep_it_and_is_reported() -> None:
    """Swarm places an unconstrained service on any active node: that must not keep an owner's machine forever."""
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    stray = running_task("stray.1", node)  # no owner constraints: swarm chose this node by itself
    bobs = running_task("bob.1", node, BOB)
    for foreign in (stray, bobs):
        result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[foreign], idle_since={node.id: NOW - GRACE_S}))
        assert only(result, Drain).node_id == node.id
        assert any(foreign.id in notice and node.hostname in notice for notice in result.notices)

    # The owner's own work beside the stray keeps the node, and the stray is still reported.
    own = running_task("t1", node, ALICE)
    busy = run(snapshot(nodes=[node], instances=[alice_i], tasks=[stray, own], idle_since={node.id: NOW - GRACE_S}))
    assert busy.actions == ()
    assert [notice for notice in busy.notices if stray.id in notice] != []


def test_a_node_nobody_owns_is_kept_by_any_work() -> None:
    pool_i = instance("i-02", NOBODY)
    node = node_of(pool_i)
    work = running_task("t1", node)
    result = run(snapshot(nodes=[node], instances=[pool_i], tasks=[work], idle_since={node.id: NOW - GRACE_S}))
    assert result.actions == ()
    assert not any(work.id in notice for notice in result.notices)


def test_a_machine_left_stopped_is_terminated_after_max_start_s_so_its_owners_volume_is_freed() -> None:
    """Stopped by someone else (no policy of ours keeps a stopped machine yet), it would hold the owner's cache
    volume, attached, forever while the owner's next session waited "still attached"."""
    policy = make_policy(max_start_s=600.0)
    stopped = instance("i-01", ALICE, state="stopped", volume_id="vol-1")
    node = node_of(stopped, state="down")

    first = run(snapshot(nodes=[node], instances=[stopped], now=NOW), policy)
    assert actions_of(first, Terminate) == []
    assert first.stopped_since == {"i-01": NOW}
    assert first.deadline == NOW + 600.0  # the loop wakes for it

    before = run(next_snapshot(first, now=NOW + 599, nodes=[node], instances=[stopped]), policy)
    assert actions_of(before, Terminate) == []

    after = run(next_snapshot(before, now=NOW + 600, nodes=[node], instances=[stopped]), policy)
    [terminate] = actions_of(after, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "stopped")
    assert "vol-1 is kept" in terminate.reason

    # Started again in time (a resize), the clock is gone: a later stop waits its whole max_start_s again.
    running = instance("i-01", ALICE, volume_id="vol-1")
    back = run(next_snapshot(before, now=NOW + 600, nodes=[node_of(running)], instances=[running]), policy)
    assert actions_of(back, Terminate) == []
    assert back.stopped_since == {}


def test_a_node_that_dropped_out_is_waited_for_not_replaced_until_max_start_s() -> None:
    """Re-integration: a reboot or a network cut must not buy the owner a second machine while the first comes back."""
    policy = make_policy(max_start_s=600.0)
    alice_i = instance("i-01", ALICE)
    down = node_of(alice_i, state="down")
    rescheduled = pending_task("t1.2", ALICE)  # swarm's new task for the one that ran there

    first = run(snapshot(nodes=[down], instances=[alice_i], tasks=[rescheduled], now=NOW), policy)
    assert actions_of(first, Launch) == []
    assert "waiting for it to come back" in waiting_for(first, "t1.2").reason
    assert first.down_since == {down.id: NOW}

    still = run(next_snapshot(first, now=NOW + 599, nodes=[down], instances=[alice_i], tasks=[rescheduled]), policy)
    assert actions_of(still, Launch) == []

    late = run(next_snapshot(still, now=NOW + 600, nodes=[down], instances=[alice_i], tasks=[rescheduled]), policy)
    assert only(late, Terminate).cause == "node_down"
    assert [launch.owner for launch in actions_of(late, Launch)] == [ALICE]


def test_a_machine_shown_down_by_two_registrations_is_terminated_once() -> None:
    # Found by the property test: each down node of one machine decided its own Terminate; the second call races
    # the first. A machine is stopped or terminated once per plan, whatever number of nodes show it.
    machine = instance("i-01", ALICE)
    first = node_of(machine, node_id="node-a", state="down")
    second = node_of(machine, node_id="node-b", state="down")
    world = snapshot(instances=[machine], nodes=[first, second], down_since={"node-a": NOW - 600, "node-b": NOW - 600})
    assert [t.instance_id for t in actions_of(run(world), Terminate)] == ["i-01"]


def test_a_machine_shown_twice_does_not_hold_up_the_nodes_after_it() -> None:
    machine, other = instance("i-01", ALICE), instance("i-02", BOB)
    first = node_of(machine, node_id="node-a", state="down")
    second = node_of(machine, node_id="node-b", state="down")
    idle = node_of(other, availability="drain")
    down_since = {"node-a": NOW - 600, "node-b": NOW - 600}
    world = snapshot(
        instances=[machine, other], nodes=[first, second, idle], down_since=down_since, idle_since={idle.id: NOW - 600}
    )
    assert sorted(t.instance_id for t in actions_of(run(world), Terminate)) == ["i-01", "i-02"]
