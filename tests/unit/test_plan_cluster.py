"""How plan() reads the snapshot (plan/cluster.py): which nodes are ours (seen at their instance's address),
which instances joined, which are late or still booting, what the nodes' work reserves."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import LabelNode, Launch, RemoveNode, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_models import INSTANCE_BUFFER_TAG

from .factories import (
    ALICE,
    BACKOFF_S,
    BOB,
    MAX_START_S,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    foreign_node,
    instance,
    names,
    node_of,
    only,
    pending_task,
    run,
    running_task,
    snapshot,
    waiting_for,
)


def steps_on(result: Plan) -> list[tuple[str, str]]:
    """Every action of the plan as (kind, the ids it acts on)."""
    return [(action.kind, ",".join(sorted(names(action)))) for action in result.actions]


# -- which nodes are ours ----------------------------------------------------------------------------------


def test_a_down_node_we_did_not_boot_is_never_removed() -> None:
    """A manager or a worker ops added by hand: no engine label names one of our instances."""
    result = run(snapshot(nodes=[foreign_node("ops-1", state="down"), foreign_node("ops-2", state="down")]))
    assert result.actions == ()
    assert result.carried.down_since == {}


def test_a_down_node_we_labelled_is_removed_once_its_instance_left_the_account() -> None:
    gone = instance("i-01", ALICE)
    result = run(snapshot(nodes=[node_of(gone, state="down")], instances=[]))
    assert steps_on(result) == [("remove_node", "node-i-01")]


@pytest.mark.parametrize("labelled_for", [None, "i-99"], ids=["unlabelled", "labelled-for-another-instance"])
def test_a_node_naming_an_unknown_instance_is_not_ours_without_our_label_for_that_instance(
    labelled_for: str | None,
) -> None:
    """Only our own label for the same instance proves we booted it once its instance is gone."""
    gone = instance("i-01", ALICE)
    node = node_of(gone, state="down", labelled=labelled_for is not None)
    if labelled_for is not None:
        node = dataclasses.replace(node, labelled_instance_id=labelled_for)
    result = run(snapshot(nodes=[node], instances=[]))
    assert result.actions == ()
    assert result.notices == ()


@pytest.mark.parametrize(
    ("private_ip", "addr"),
    [("", ""), ("", "10.0.0.9"), ("10.0.0.9", "10.0.0.8")],
    ids=["no-addresses", "instance-without-address", "elsewhere"],
)
def test_a_node_not_seen_at_its_instances_private_address_is_an_impostor(private_ip: str, addr: str) -> None:
    machine = instance("i-01", ALICE, private_ip=private_ip)
    node = node_of(machine, labelled=False, addr=addr)
    result = run(snapshot(nodes=[node], instances=[machine]))
    assert actions_of(result, Launch) == []
    assert result.actions == ()
    assert len(result.notices) == 1
    assert result.notices[0].startswith(f"node {node.hostname} ({node.id}) says it is instance i-01")
    assert result.in_flight == ("i-01",)  # its machine has not joined: the impostor does not count


def test_a_node_seen_at_its_instances_address_is_ours_and_nothing_is_reported() -> None:
    machine = instance("i-01", ALICE, private_ip="10.0.0.9")
    result = run(snapshot(nodes=[node_of(machine, labelled=False, addr="10.0.0.9")], instances=[machine]))
    assert steps_on(result) == [("label_node", "node-i-01")]
    assert result.notices == ()


def test_a_node_naming_an_instance_not_in_the_account_is_no_impostor() -> None:
    stranger = foreign_node("n-1", engine_instance_id="i-77")
    assert run(snapshot(nodes=[stranger], instances=[instance("i-01", ALICE)])).notices == ()


def test_a_node_is_labelled_only_when_it_is_seen_at_its_instances_address() -> None:
    machine = instance("i-01", ALICE, zone=ZONE_A)
    impostor = node_of(machine, node_id="impostor", labelled=False, addr="10.9.9.9")

    result = run(snapshot(nodes=[impostor], instances=[machine]))

    assert actions_of(result, LabelNode) == []
    assert any("impostor" in notice and "10.9.9.9" in notice for notice in result.notices), result.notices


def test_a_second_node_claiming_an_instance_is_never_labelled_and_is_reported() -> None:
    machine = instance("i-01", ALICE, zone=ZONE_A)
    real = node_of(machine, node_id="real", labelled=False)
    second = node_of(machine, node_id="second", labelled=False, addr="10.9.9.9")

    result = run(snapshot(nodes=[second, real], instances=[machine]))

    assert [label.node_id for label in actions_of(result, LabelNode)] == ["real"]
    assert any("second" in notice for notice in result.notices), result.notices


# -- which instances joined --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "labelled", "joined"),
    [("ready", False, True), ("ready", True, True), ("down", True, True), ("down", False, False)],
)
def test_an_instance_joined_once_its_node_is_ready_or_carries_our_labels(
    state: str, labelled: bool, joined: bool
) -> None:
    """A joining node shows "down" or "unknown" first: until it is ready (or we labelled it) it is on its way."""
    machine = instance("i-01", ALICE, launched_at=NOW - 60)
    result = run(snapshot(nodes=[node_of(machine, state=state, labelled=labelled)], instances=[machine]))
    assert result.in_flight == (() if joined else ("i-01",))


def test_a_joined_instance_past_max_start_s_is_not_late() -> None:
    old = instance("i-01", ALICE, launched_at=NOW - 10 * MAX_START_S)
    result = run(snapshot(nodes=[node_of(old, state="down")], instances=[old]))
    assert actions_of(result, Terminate) == []
    assert result.carried.unavailable_offerings == {}


def test_a_claimed_buffer_machine_has_joined_before_and_is_not_timed_from_its_launch() -> None:
    """It joined once before it was stopped: its start is a return, timed by its down node, not a first boot."""
    machine = instance("i-01", tags={INSTANCE_BUFFER_TAG: "true", **BOB.labels()}, launched_at=NOW - 7200)
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[machine]))
    assert result.in_flight == ()
    assert steps_on(result) == []
    assert result.carried.down_since == {node.id: NOW}
    late = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - MAX_START_S}))
    assert [(t.instance_id, t.cause) for t in actions_of(late, Terminate)] == [("i-01", "node_down")]


def test_an_unclaimed_buffer_machine_whose_node_is_down_has_not_joined() -> None:
    machine = instance("i-01", tags={INSTANCE_BUFFER_TAG: "true"}, launched_at=NOW - 60)
    result = run(snapshot(nodes=[node_of(machine, labelled=False, state="down")], instances=[machine]))
    assert result.in_flight == ("i-01",)


def test_a_node_still_joining_is_left_to_the_start_timeout_and_starts_no_down_clock() -> None:
    booting = instance("i-01", ALICE, launched_at=NOW - 60)
    node = node_of(booting, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[booting], down_since={node.id: NOW - 10 * MAX_START_S}))
    assert result.actions == ()
    assert result.carried.down_since == {}


def test_a_machine_rejoined_only_when_another_node_of_it_is_ready() -> None:
    """A ready node is proof that the machine came back; two down ones are both waited for."""
    machine = instance("i-01", ALICE)
    old = node_of(machine, node_id="old", state="down")
    for state, removed in (("down", []), ("unknown", []), ("ready", ["old"])):
        new = node_of(machine, node_id="new", state=state)
        result = run(snapshot(nodes=[old, new], instances=[machine], tasks=[running_task("t", new, ALICE)]))
        assert [remove.node_id for remove in actions_of(result, RemoveNode)] == removed


# -- late and booting instances ----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["pending", "running"])
def test_a_live_instance_that_has_not_joined_is_late_only_past_max_start_s(state: str) -> None:
    at = instance("i-01", ALICE, state=state, launched_at=NOW - MAX_START_S)
    past = instance("i-02", ALICE, state=state, launched_at=NOW - MAX_START_S - 1, zone=ZONE_B)
    result = run(snapshot(instances=[at, past]))
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-02", "start_timeout")]
    assert result.carried.unavailable_offerings == {("t3.medium", ZONE_B): NOW + BACKOFF_S}
    assert result.in_flight == ("i-01", "i-02")


@pytest.mark.parametrize("state", ["stopped", "stopping", "shutting-down", "terminated"])
def test_an_instance_that_is_not_live_is_never_late(state: str) -> None:
    old = instance("i-01", state=state, launched_at=NOW - 10 * MAX_START_S)
    result = run(snapshot(instances=[old]))
    assert actions_of(result, Terminate) == []
    assert result.carried.unavailable_offerings == {}
    assert result.in_flight == ()


def test_a_late_instance_is_not_waited_for_and_its_offering_is_avoided_at_once() -> None:
    late = instance("i-01", ALICE, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(instances=[late], tasks=[pending_task("t", ALICE)]))
    launch = only(result, Launch)
    assert (launch.owner, launch.availability_zone) == (ALICE, ZONE_B)
    assert "i-01" not in waiting_for(result, "t").reason


def test_a_booting_instance_is_waited_for_by_its_owners_work() -> None:
    booting = instance("i-01", ALICE, state="pending", launched_at=NOW - MAX_START_S)
    result = run(snapshot(instances=[booting], tasks=[pending_task("t", ALICE)]))
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t").reason == "waiting for instance i-01 (t3.medium) to join the swarm"


@pytest.mark.parametrize(("until", "kept"), [(NOW + 1, True), (NOW, False), (NOW - 1, False)])
def test_an_unavailable_offering_is_avoided_only_until_its_moment(until: float, kept: bool) -> None:
    result = run(snapshot(unavailable={("t3.medium", ZONE_A): until}, tasks=[pending_task("t", ALICE)]))
    assert result.carried.unavailable_offerings == ({("t3.medium", ZONE_A): until} if kept else {})
    assert only(result, Launch).availability_zone == (ZONE_B if kept else ZONE_A)


# -- what the nodes' work reserves -------------------------------------------------------------------------


def _room_for(*tasks_on: tuple[float, str, str]) -> Plan:
    """A pending 1-CPU task of alice beside her m5.large (2 CPU) running `tasks_on` (cpus, state, desired state)."""
    machine = instance("i-01", ALICE, instance_type="m5.large")
    node = node_of(machine)
    running = [
        running_task(f"r{n}", node, ALICE, cpus=cpus, state=state, desired_state=desired)
        for n, (cpus, state, desired) in enumerate(tasks_on)
    ]
    return run(snapshot(nodes=[node], instances=[machine], tasks=[*running, pending_task("t", ALICE)]))


def test_the_work_on_a_node_adds_up_to_what_it_reserves() -> None:
    assert actions_of(_room_for((0.6, "running", "running")), Launch) == []
    assert actions_of(_room_for((0.6, "running", "running"), (0.6, "starting", "running")), Launch) != []


@pytest.mark.parametrize(
    ("state", "desired"), [("complete", "shutdown"), ("running", "shutdown"), ("failed", "running")]
)
def test_finished_work_reserves_nothing(state: str, desired: str) -> None:
    result = _room_for((0.6, "running", "running"), (0.6, state, desired))
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t").reason == "fits on node ip-10-0-0-01; waiting for the swarm scheduler"


def test_unplaced_work_reserves_no_node() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine)
    others = [pending_task(f"p{n}", BOB, cpus=1.5) for n in range(2)]
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[*others, pending_task("t", ALICE, cpus=1.5)]))
    assert waiting_for(result, "t").reason == "fits on node ip-10-0-0-01; waiting for the swarm scheduler"


def test_a_global_services_reservation_still_takes_room_on_its_node() -> None:
    alice_i = instance("i-01", ALICE)  # t3.medium: 2 CPUs
    node = node_of(alice_i)
    agent = replace(running_task("agent.n1", node, cpus=1.5, memory_gib=0.1), global_service=True)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[agent, pending_task("t1", ALICE, cpus=1.0)]))
    (launch,) = actions_of(result, Launch)
    assert launch.task_ids == ("t1",), "the 0.5 CPU the agent leaves is too little: a new machine"
