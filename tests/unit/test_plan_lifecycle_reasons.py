"""What plan() says at each step of a node's life and in each notice; and which nodes it drains for lack of cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from warmswarm_autoscaling.actions import Action, Drain, LabelNode, RemoveNode, TagInstance, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.readings import read_node
from warmswarm_autoscaling.snapshot import Instance, Node, Task
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, INSTANCE_BATCH_TAG, CachePolicy

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    INSTANCE_TYPES,
    NOBODY,
    NOW,
    actions_of,
    cached_task,
    instance,
    make_policy,
    node_of,
    our_labels,
    pending_task,
    run,
    running_task,
    snapshot,
)

CACHE_LABELS = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3").to_labels()


def batch_machine(instance_id: str, batch: str = "b1", **kwargs: object) -> Instance:
    return instance(instance_id, NOBODY, tags={INSTANCE_BATCH_TAG: batch}, **kwargs)  # type: ignore[arg-type]


def hand_labelled(of: Instance, labels: dict[str, str], *, addr: str | None = None) -> Node:
    """The node of `of`, joined (ready, drained), carrying owner labels someone wrote by hand (no instance id)."""
    return read_node(
        id=f"node-{of.id}",
        hostname=f"ip-10-0-0-{of.id[-2:]}",
        state="ready",
        availability="drain",
        role="worker",
        resources=INSTANCE_TYPES[of.instance_type].resources,
        labels=labels,
        engine_labels={ENGINE_LABEL_INSTANCE_ID: of.id},
        addr=of.private_ip if addr is None else addr,
    )


def _label_owned() -> Plan:
    alice_i = instance("i-01", ALICE)
    return run(snapshot(nodes=[node_of(alice_i, labelled=False)], instances=[alice_i]))


def _label_batch() -> Plan:
    machine = batch_machine("i-02", batch="b7", instance_type="m5.large", zone="eu-west-1b")
    return run(snapshot(nodes=[node_of(machine, labelled=False)], instances=[machine], tasks=[pending_task("t", BOB)]))


def _label_unmounted() -> Plan:
    machine = instance("i-03", ALICE_N1, volume_id="vol-3")
    return run(snapshot(nodes=[node_of(machine, labelled=False, mounted=False)], instances=[machine]))


def _tag_bound() -> Plan:
    machine = batch_machine("i-04")
    return run(snapshot(nodes=[node_of(machine, owner=BOB)], instances=[machine]))


def _drain_unmounted() -> Plan:
    machine = instance("i-05", ALICE_N1, volume_id="vol-5")
    node = node_of(machine, mounted=False)
    return run(snapshot(nodes=[node], instances=[machine], tasks=[running_task("t", node, ALICE_N1)]))


def _drain_for_cache() -> Plan:
    machine = instance("i-06", ALICE_N1)
    node = node_of(machine)
    task = running_task("t", node, ALICE_N1, service_labels=CACHE_LABELS)
    return run(snapshot(nodes=[node], instances=[machine], tasks=[task]))


def _remove_gone() -> Plan:
    gone = instance("i-07", ALICE, state="terminated")
    return run(snapshot(nodes=[node_of(gone, state="down", availability="drain")], instances=[gone]))


def _remove_rejoined() -> Plan:
    machine = instance("i-08", ALICE)
    stale = node_of(machine, node_id="old", state="disconnected")
    fresh = node_of(machine, node_id="new")
    task = running_task("t", fresh, ALICE)
    return run(snapshot(nodes=[stale, fresh], instances=[machine], tasks=[task]))


def _terminate_down() -> Plan:
    machine = instance("i-09", ALICE)
    node = node_of(machine, state="unknown")
    return run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - 750.4}))


def _drain_idle() -> Plan:
    machine = instance("i-10", ALICE)
    node = node_of(machine)
    return run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - 321.6}))


def _terminate_unneeded() -> Plan:
    machine = batch_machine("i-11", batch="b9")
    node = node_of(machine, labelled=False)
    return run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - 400}))


def _terminate_late() -> Plan:
    late = instance("i-12", ALICE, state="pending", instance_type="m5.xlarge", launched_at=NOW - 700)
    return run(snapshot(instances=[late]), make_policy(max_start_s=650.0, capacity_backoff_s=120.5))


REASONS: list[tuple[Callable[[], Plan], type[Action], str]] = [
    (_label_owned, LabelNode, "node ip-10-0-0-01 joined as i-01 (t3.medium, eu-west-1a) for user_id=alice"),
    (
        _label_batch,
        LabelNode,
        "node ip-10-0-0-02 joined as i-02 (m5.large, eu-west-1b) for user_id=bob,"
        " whose pending work took this machine of batch b7",
    ),
    (
        _label_unmounted,
        LabelNode,
        "node ip-10-0-0-03 joined as i-03 (t3.medium, eu-west-1a) for user_id=alice,project_id=p1,node_id=n1,"
        " but its boot did not mount cache volume vol-3: left drained",
    ),
    (
        _tag_bound,
        TagInstance,
        "its node ip-10-0-0-04 was labelled for user_id=bob: the instance carries its owner too",
    ),
    (
        _drain_unmounted,
        Drain,
        "node ip-10-0-0-05 is up without its owner's cache: its boot did not mount volume vol-5"
        " (a reboot whose mount failed); drained, so no work runs without its data",
    ),
    (
        _drain_for_cache,
        Drain,
        "node ip-10-0-0-06 has no cache volume, and service service-t on it asks for the cache:"
        " drained so it moves to a machine with its owner's volume",
    ),
    (_remove_gone, RemoveNode, "node ip-10-0-0-07 is down and its instance is gone"),
    (_remove_rejoined, RemoveNode, "node ip-10-0-0-08 is disconnected; its machine rejoined as another node"),
    (
        _terminate_down,
        Terminate,
        "node ip-10-0-0-09 has been unknown for 750 s while its instance runs (max_start_s=600)",
    ),
    (_drain_idle, Drain, "node ip-10-0-0-10 idle for 322 s (idle_grace_s=300)"),
    (
        _terminate_unneeded,
        Terminate,
        "node ip-10-0-0-11 of batch b9 joined 400 s ago and no owner's work needs it (idle_grace_s=300);"
        " it never ran anything",
    ),
    (
        _terminate_late,
        Terminate,
        "instance i-12 (m5.xlarge in eu-west-1a) did not join the swarm within max_start_s=650;"
        " that offering is avoided for 120.5 s",
    ),
]


@pytest.mark.parametrize(("scenario", "kind", "reason"), REASONS, ids=[s.__name__.strip("_") for s, _, _ in REASONS])
def test_each_step_of_a_nodes_life_says_why(scenario: Callable[[], Plan], kind: type[Action], reason: str) -> None:
    """Reasons are what an operator reads in /v1/status, the journal and the CLI: they must name the facts."""
    result = scenario()
    steps = [a for a in result.actions if isinstance(a, kind)]
    assert [step.reason for step in steps] == [reason]


@pytest.mark.parametrize(
    ("scenario", "cause"),
    [(_terminate_down, "node_down"), (_terminate_unneeded, "idle"), (_terminate_late, "start_timeout")],
)
def test_each_termination_names_its_cause(scenario: Callable[[], Plan], cause: str) -> None:
    """The cause is counted apart in the metrics: a start timeout is a capacity problem, an idle one is not."""
    [terminate] = [a for a in scenario().actions if isinstance(a, Terminate)]
    assert terminate.cause == cause


def _impostor(addr: str, private_ip: str | None = None) -> Plan:
    machine = instance("i-20", ALICE, private_ip=private_ip)
    return run(snapshot(nodes=[node_of(machine, node_id="n-x", labelled=False, addr=addr)], instances=[machine]))


def _foreign_task(service_name: str) -> Plan:
    alice_i = instance("i-21", ALICE)
    node = node_of(alice_i)
    stray = dataclasses.replace(running_task("stray.1", node), service_name=service_name)
    return run(snapshot(nodes=[node], instances=[alice_i], tasks=[stray]))


def _conflict(labels: dict[str, str]) -> Plan:
    alice_i = instance("i-22", ALICE)
    return run(snapshot(nodes=[hand_labelled(alice_i, labels)], instances=[alice_i]))


NOTICES: list[tuple[Callable[[], Plan], str]] = [
    (
        lambda: _impostor("10.9.9.9"),
        "node ip-10-0-0-20 (n-x) says it is instance i-20, but the manager sees it at 10.9.9.9, not at that"
        f" instance's private address {instance('i-20').private_ip}: it is never labelled nor given work;"
        " remove it (docker node rm) if it is not one of yours",
    ),
    (
        lambda: _impostor("", private_ip=""),
        "node ip-10-0-0-20 (n-x) says it is instance i-20, but the manager sees it at no address, not at that"
        " instance's private address (none): it is never labelled nor given work;"
        " remove it (docker node rm) if it is not one of yours",
    ),
    (
        lambda: _foreign_task("stray"),
        "task stray.1 of service stray runs on node ip-10-0-0-21, which is user_id=alice's, without being that"
        " owner's work: it does not keep the node (it moves when the node goes); pin the service to its own"
        " nodes with placement constraints",
    ),
    (
        lambda: _foreign_task(""),
        "task stray.1 of service svc-stray.1 runs on node ip-10-0-0-21, which is user_id=alice's, without being"
        " that owner's work: it does not keep the node (it moves when the node goes); pin the service to its own"
        " nodes with placement constraints",
    ),
    (
        lambda: _conflict(BOB.labels()),
        "node ip-10-0-0-22 carries owner labels for user_id=bob, but its instance i-22 was launched for"
        " user_id=alice: not labelled, no work placed there; correct or remove the labels"
        " (docker node update --label-rm), or remove the node",
    ),
    (
        lambda: _conflict({"user_id": "not a valid id"}),
        "node ip-10-0-0-22 carries owner labels for ids that cannot be read, but its instance i-22 was launched"
        " for user_id=alice: not labelled, no work placed there; correct or remove the labels"
        " (docker node update --label-rm), or remove the node",
    ),
]


@pytest.mark.parametrize(
    ("scenario", "notice"),
    NOTICES,
    ids=["impostor", "impostor-without-addresses", "foreign-task", "foreign-task-unnamed", "conflict", "unreadable"],
)
def test_each_notice_tells_the_operator_what_is_wrong_and_what_to_do(scenario: Callable[[], Plan], notice: str) -> None:
    assert list(scenario().notices) == [notice]


def test_a_cache_task_on_a_node_without_a_volume_is_named_once_by_its_first_task() -> None:
    """Two cache-on tasks on one node: one drain, naming the first (the order the snapshot lists them)."""
    machine = instance("i-30", ALICE_N1)
    node = node_of(machine)
    first = running_task("a", node, ALICE_N1, service_labels=CACHE_LABELS)
    second = running_task("b", node, ALICE_N1, service_labels=CACHE_LABELS)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[first, second, cached_task("p", ALICE_N1)]))
    [drain] = [a for a in result.actions if isinstance(a, Drain)]
    assert "service service-a on it" in drain.reason


def test_a_node_up_without_its_mount_is_labelled_as_its_owners_but_left_drained() -> None:
    """Labelled, it is known as the owner's (and its volume's); drained, no work runs there without the data."""
    [label] = [a for a in _label_unmounted().actions if isinstance(a, LabelNode)]
    assert (label.node_id, label.activate) == ("node-i-03", False)
    assert dict(label.labels) == our_labels(instance("i-03", ALICE_N1, volume_id="vol-3"))


# -- draining what runs without its cache -------------------------------------------------------------------


def _cache_drains(node: Node, machine: Instance | None, *tasks: Task) -> list[str]:
    result = run(snapshot(nodes=[node], instances=[machine] if machine else [], tasks=tasks))
    return [drain.node_id for drain in actions_of(result, Drain)]


def test_cache_work_on_a_machine_without_a_volume_drains_it_only_while_it_is_up_and_active() -> None:
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine)
    work = running_task("t", node, ALICE_N1, service_labels=CACHE_LABELS)
    assert _cache_drains(node, machine, work) == [node.id]
    for other in (node_of(machine, availability="drain"), node_of(machine, availability="pause")):
        assert _cache_drains(other, machine, work) == []
    # Down, it runs nothing: no drain (the down clock deals with it).
    assert _cache_drains(node_of(machine, state="down"), machine, work) == []


@pytest.mark.parametrize(
    "task",
    [
        pytest.param(cached_task("t", ALICE_N1), id="not-placed"),
        pytest.param(running_task("t", node_of(instance("i-01", ALICE_N1)), ALICE_N1), id="cache-off"),
        pytest.param(
            running_task("t", node_of(instance("i-01")), ALICE_N1, service_labels=CACHE_LABELS, state="complete"),
            id="finished",
        ),
        pytest.param(
            dataclasses.replace(
                running_task("t", node_of(instance("i-01")), ALICE_N1, service_labels=CACHE_LABELS),
                global_service=True,
            ),
            id="global-service",
        ),
    ],
)
def test_only_active_placed_cache_work_of_a_service_drains_a_machine_without_a_volume(task: Task) -> None:
    machine = instance("i-01", ALICE_N1)
    assert _cache_drains(node_of(machine), machine, task) == []


def test_cache_work_on_a_machine_with_its_volume_mounted_does_not_drain_it() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    node = node_of(machine)
    assert _cache_drains(node, machine, running_task("t", node, ALICE_N1, service_labels=CACHE_LABELS)) == []


def test_cache_work_on_a_node_not_labelled_yet_or_whose_instance_is_gone_drains_nothing() -> None:
    machine = instance("i-01", ALICE_N1)
    joining = node_of(machine, labelled=False, availability="active")
    work = running_task("t", joining, ALICE_N1, service_labels=CACHE_LABELS)
    assert _cache_drains(joining, machine, work) == []
    assert _cache_drains(node_of(machine), None, work) == []


def test_a_node_missing_its_mount_is_drained_only_once_labelled_up_and_active() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    assert _cache_drains(node_of(machine, mounted=False), machine) == ["node-i-01"]
    joining = node_of(machine, labelled=False, mounted=False, availability="active")
    assert _cache_drains(joining, machine) == []
    assert _cache_drains(node_of(machine, mounted=False, state="down"), machine) == []
    assert _cache_drains(node_of(machine, mounted=False, availability="drain"), machine) == []


def test_every_node_without_its_cache_is_drained_and_nodes_without_cache_work_are_passed_over() -> None:
    unmounted = [instance(f"i-0{n}", ALICE_N1, volume_id=f"vol-{n}") for n in (1, 2)]
    plain, needy = instance("i-03", ALICE_N1), instance("i-04", ALICE_N1)
    nodes = [node_of(m, mounted=False) for m in unmounted] + [node_of(plain), node_of(needy)]
    work = running_task("t", nodes[3], ALICE_N1, service_labels=CACHE_LABELS)
    result = run(snapshot(nodes=nodes, instances=[*unmounted, plain, needy], tasks=[work]))
    assert [drain.node_id for drain in actions_of(result, Drain)] == ["node-i-01", "node-i-02", "node-i-04"]
