"""Which of our nodes plan() labels, tags, drains, terminates or removes, and which it leaves alone."""

from __future__ import annotations

import dataclasses

import pytest
from warmswarm_autoscaling.actions import Drain, LabelNode, RemoveNode, Stop, TagInstance, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.snapshot import Instance, Node, Task
from warmswarm_models import (
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_WARM_TTL_TAG,
    NODE_LABEL_INSTANCE_ID,
    CachePolicy,
    Owner,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    INSTANCE_TYPES,
    NOBODY,
    NOW,
    actions_of,
    instance,
    names,
    node_of,
    our_labels,
    pending_task,
    run,
    running_task,
    snapshot,
)

GRACE_S = 300.0  # the default policy's idle_grace_s
MAX_START_S = 600.0  # the default policy's max_start_s
CACHE_LABELS = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3").to_labels()


def batch_machine(instance_id: str, *, state: str = "running") -> Instance:
    return instance(instance_id, NOBODY, state=state, tags={INSTANCE_BATCH_TAG: "b1"})


def buffer_machine(instance_id: str, owner_tags: dict[str, str] | None = None) -> Instance:
    """A warm buffer machine, running; claimed when `owner_tags` are given (as the claim's CreateTags writes)."""
    return instance(instance_id, tags={INSTANCE_BUFFER_TAG: "true", **(owner_tags or {})})


def labelled_by_hand(of: Instance, labels: dict[str, str], *, state: str = "ready") -> Node:
    """The node of `of`, carrying labels someone wrote (we write ours with the instance id, all at once)."""
    return read_node(
        id=f"node-{of.id}",
        hostname=f"host-{of.id}",
        state=state,
        availability="drain",
        role="worker",
        resources=INSTANCE_TYPES[of.instance_type].resources,
        labels=labels,
        engine_labels={ENGINE_LABEL_INSTANCE_ID: of.id},
        addr=of.private_ip,
    )


def badly_owned_task(task_id: str, node: Node) -> Task:
    """Work whose owner constraints cannot be read, running on `node`."""
    return read_task(
        id=task_id,
        service_id=f"svc-{task_id}",
        service_name=f"service-{task_id}",
        state="running",
        desired_state="running",
        reservations=INSTANCE_TYPES["t3.medium"].resources.minus(INSTANCE_TYPES["t3.medium"].resources),
        constraints=["node.labels.user_id==bad id!"],
        node_id=node.id,
        err="",
        service_labels={},
        global_service=False,
    )


def idle_past_grace(*nodes: Node) -> dict[str, float]:
    return {node.id: NOW - GRACE_S for node in nodes}


def steps_on(result: Plan) -> list[tuple[str, str]]:
    """Every lifecycle step of the plan as (kind, the node or instance it acts on)."""
    kinds = (LabelNode, TagInstance, Drain, Terminate, RemoveNode)
    found: list[tuple[str, str]] = []
    for action in result.actions:
        if isinstance(action, kinds):
            found.append((action.kind, ",".join(sorted(names(action)))))
    return found


# -- labelling what joined ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["shutting-down", "stopping", "terminated"])
def test_a_joined_node_whose_instance_is_going_is_not_labelled(state: str) -> None:
    going = instance("i-01", ALICE, state=state)
    result = run(snapshot(nodes=[node_of(going, labelled=False)], instances=[going]))
    assert actions_of(result, LabelNode) == []
    assert result.notices == ()


def test_a_joined_batch_machine_is_labelled_for_the_owner_whose_work_took_it() -> None:
    machine = batch_machine("i-01")
    result = run(
        snapshot(nodes=[node_of(machine, labelled=False)], instances=[machine], tasks=[pending_task("t", BOB)])
    )
    [label] = actions_of(result, LabelNode)
    assert dict(label.labels) == our_labels(machine, BOB)
    assert label.activate is True


@pytest.mark.parametrize(("owner", "labelled"), [(ALICE, ["node-i-01"]), (BOB, [])], ids=["same-owner", "another"])
def test_hand_written_owner_labels_stop_our_labelling_only_when_they_name_another_owner(
    owner: Owner, labelled: list[str]
) -> None:
    """Labels naming the owner it was launched for conflict with nothing; another owner's are reported."""
    alice_i = instance("i-01", ALICE)
    result = run(snapshot(nodes=[labelled_by_hand(alice_i, owner.labels())], instances=[alice_i]))
    assert [label.node_id for label in actions_of(result, LabelNode)] == labelled
    assert len(result.notices) == (0 if labelled else 1)


@pytest.mark.parametrize(
    "machine",
    [
        pytest.param(instance("i-01", ALICE, state="stopping"), id="instance-going"),
        pytest.param(instance("i-01", tags={"user_id": "bad id!"}), id="instance-owner-unreadable"),
        pytest.param(batch_machine("i-01"), id="batch-machine-not-yet-bound"),
        pytest.param(buffer_machine("i-01"), id="buffer-machine-unclaimed"),
    ],
)
def test_hand_written_labels_are_reported_only_on_a_running_machine_of_a_known_owner(machine: Instance) -> None:
    """A machine nobody owns yet takes its owner when bound or claimed; a going one or unreadable one is moot."""
    result = run(snapshot(nodes=[labelled_by_hand(machine, BOB.labels())], instances=[machine]))
    assert result.notices == ()
    assert actions_of(result, LabelNode) == []


def test_only_nodes_we_have_not_labelled_that_carry_another_owners_labels_are_reported() -> None:
    machines = [instance(f"i-0{n}", ALICE) for n in (1, 2, 3)]
    nodes = [
        labelled_by_hand(machines[0], {**BOB.labels(), NODE_LABEL_INSTANCE_ID: "i-01"}),  # we labelled it
        labelled_by_hand(machines[1], ALICE.labels()),
        labelled_by_hand(machines[2], BOB.labels()),
    ]
    notices = run(snapshot(nodes=nodes, instances=machines)).notices
    assert [notice.split(" carries")[0] for notice in notices] == ["node host-i-03"]


# -- tagging the machines of a batch -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("machine", "labels"),
    [
        pytest.param(batch_machine("i-01", state="stopping"), BOB.labels(), id="instance-going"),
        pytest.param(instance("i-01", ALICE), BOB.labels(), id="launched-for-its-owner"),
        pytest.param(batch_machine("i-01"), {"user_id": "bad id!"}, id="owner-labels-unreadable"),
        pytest.param(batch_machine("i-01"), {}, id="labelled-for-nobody"),
        pytest.param(batch_machine("i-01"), {NODE_LABEL_INSTANCE_ID: "i-99", **BOB.labels()}, id="for-another"),
    ],
)
def test_only_a_running_batch_machine_labelled_for_an_owner_gets_owner_tags(
    machine: Instance, labels: dict[str, str]
) -> None:
    labels = {NODE_LABEL_INSTANCE_ID: "i-01", **labels}
    node = labelled_by_hand(machine, labels)
    assert actions_of(run(snapshot(nodes=[node], instances=[machine])), TagInstance) == []


def test_a_batch_machine_whose_node_is_gone_or_not_labelled_by_us_gets_no_tags() -> None:
    """Gone: our labels outlive the instance, nothing is there to tag. Not labelled by us: not bound yet."""
    machine = batch_machine("i-01")
    gone = node_of(machine, owner=BOB, state="down")
    assert actions_of(run(snapshot(nodes=[gone], instances=[])), TagInstance) == []
    by_hand = labelled_by_hand(machine, BOB.labels())
    assert actions_of(run(snapshot(nodes=[by_hand], instances=[machine])), TagInstance) == []


def test_a_machine_shown_by_two_nodes_is_tagged_once() -> None:
    machine = batch_machine("i-01")
    stale = node_of(machine, node_id="old", owner=BOB, state="down")
    fresh = node_of(machine, node_id="new", owner=BOB)
    other = batch_machine("i-02")
    result = run(snapshot(nodes=[stale, fresh, node_of(other, owner=ALICE)], instances=[machine, other]))
    assert [tag.instance_id for tag in actions_of(result, TagInstance)] == ["i-01", "i-02"]


def test_five_bound_machines_a_cycle_get_their_owners_tags_in_node_order() -> None:
    own, nobodys = instance("i-10", ALICE), batch_machine("i-11")
    machines = [batch_machine(f"i-0{n}") for n in range(6)]
    nodes = [node_of(own), node_of(nobodys)] + [node_of(m, owner=BOB) for m in machines]
    tags = actions_of(run(snapshot(nodes=nodes, instances=[own, nobodys, *machines])), TagInstance)
    assert [tag.instance_id for tag in tags] == [f"i-0{n}" for n in range(5)]
    assert all(dict(tag.tags) == BOB.labels() for tag in tags)


# -- what keeps a node: the owner's work ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "kept"),
    [(ALICE, True), (ALICE_N1, True), (NOBODY, False), (BOB, False), (None, False)],
    ids=["owner-by-user", "owner-exactly", "unowned", "another-owner", "unreadable-owner"],
)
def test_only_the_owners_work_keeps_an_owners_node(owner: object, kept: bool) -> None:
    """Work that fits the owner's labels is theirs (a task pinned by user only fits the user's nodes)."""
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine)
    task = badly_owned_task("t", node) if owner is None else running_task("t", node, owner)  # type: ignore[arg-type]
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task], idle_since=idle_past_grace(node)))
    assert steps_on(result) == ([] if kept else [("drain", node.id)])
    assert len(result.notices) == (0 if kept else 1)


def test_any_work_keeps_a_node_whose_owner_labels_cannot_be_read() -> None:
    """Nobody can say whose the node is, so no work on it is someone else's."""
    machine = instance("i-01", ALICE)
    node = labelled_by_hand(machine, {NODE_LABEL_INSTANCE_ID: "i-01", "user_id": "bad id!"})
    node = dataclasses.replace(node, availability="active")
    work = running_task("t", node, BOB)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[work], idle_since=idle_past_grace(node)))
    assert steps_on(result) == []
    assert result.notices == ()


# -- a batch machine nobody took ----------------------------------------------------------------------------


def test_an_unneeded_batch_machine_goes_at_the_end_of_its_grace_not_before() -> None:
    machine = batch_machine("i-01")
    node = node_of(machine, labelled=False)
    at_grace = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    assert steps_on(at_grace) == [("terminate", "i-01")]
    before = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S + 1}))
    assert steps_on(before) == []
    assert before.idle_since == {node.id: NOW - GRACE_S + 1}


def test_an_unneeded_batch_machine_starts_its_idle_clock_when_it_joins() -> None:
    machine = batch_machine("i-01")
    node = node_of(machine, labelled=False)
    assert run(snapshot(nodes=[node], instances=[machine])).idle_since == {node.id: NOW}


def test_a_batch_machine_already_going_is_not_terminated_again_nor_timed() -> None:
    machine = batch_machine("i-01", state="shutting-down")
    node = node_of(machine, labelled=False)
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - 10 * GRACE_S}))
    assert steps_on(result) == []
    assert result.idle_since == {}


def test_an_owners_joined_node_is_labelled_not_terminated_however_long_it_waited() -> None:
    """Only a batch machine nobody took is unneeded; an owner's machine joined for its owner's work."""
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i, labelled=False)
    result = run(snapshot(nodes=[node], instances=[alice_i], idle_since=idle_past_grace(node)))
    assert steps_on(result) == [("label_node", node.id)]


def test_a_batch_machine_taken_this_cycle_is_labelled_not_terminated() -> None:
    machine = batch_machine("i-01")
    node = node_of(machine, labelled=False)
    snap = snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t", BOB)], idle_since=idle_past_grace(node))
    result = run(snap)
    assert steps_on(result) == [("label_node", node.id)]
    assert result.idle_since == {}


# -- a node that is down -------------------------------------------------------------------------------------


def test_a_down_node_goes_at_max_start_s_not_before() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine, state="down")
    before = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - MAX_START_S + 1}))
    assert steps_on(before) == []
    assert before.down_since == {node.id: NOW - MAX_START_S + 1}
    at = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - MAX_START_S}))
    assert steps_on(at) == [("terminate", "i-01")]


def test_a_down_node_of_a_stopped_machine_is_kept_with_its_labels_and_no_down_clock() -> None:
    stopped = instance("i-01", ALICE, state="stopped")
    node = node_of(stopped, state="down")
    result = run(snapshot(nodes=[node], instances=[stopped], down_since={node.id: NOW - 10 * MAX_START_S}))
    assert actions_of(result, RemoveNode) == []
    assert result.down_since == {}


# -- an idle node ---------------------------------------------------------------------------------------------


def test_a_ready_node_whose_instance_is_going_is_left_alone_and_not_timed() -> None:
    going = instance("i-01", ALICE, state="shutting-down")
    node = node_of(going)
    result = run(snapshot(nodes=[node], instances=[going], idle_since=idle_past_grace(node)))
    assert steps_on(result) == []
    assert result.idle_since == {}


def test_work_this_plan_sends_to_a_drained_node_keeps_it() -> None:
    machine = instance("i-01", ALICE)
    drained = node_of(machine, availability="drain")
    snap = snapshot(
        nodes=[drained], instances=[machine], tasks=[pending_task("t", ALICE)], idle_since=idle_past_grace(drained)
    )
    assert actions_of(run(snap), Terminate) == []


def test_work_on_a_node_we_did_not_create_does_not_disturb_our_idle_nodes() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine)
    elsewhere = dataclasses.replace(node, id="manager-1", engine_instance_id=None)
    snap = snapshot(
        nodes=[node, elsewhere],
        instances=[machine],
        tasks=[running_task("t", elsewhere, BOB)],
        idle_since=idle_past_grace(node),
    )
    assert steps_on(run(snap)) == [("drain", node.id)]


def test_a_drained_idle_machine_of_an_owner_with_a_warm_tier_is_stopped_not_terminated() -> None:
    warm = instance("i-01", ALICE, tags={INSTANCE_WARM_TTL_TAG: "3600"})
    drained = node_of(warm, availability="drain")
    result = run(snapshot(nodes=[drained], instances=[warm], idle_since=idle_past_grace(drained)))
    assert [(stop.instance_id, stop.warm_until) for stop in actions_of(result, Stop)] == [("i-01", NOW + 3600)]
    assert actions_of(result, Terminate) == []


# -- several nodes in one cycle: the case of one never stops the plan for the next ---------------------------


def test_nodes_that_may_not_be_labelled_yet_do_not_stop_the_labelling_of_the_next() -> None:
    joining, buffered, unneeded, alice_i = (
        instance("i-01", ALICE),
        buffer_machine("i-02"),
        batch_machine("i-03"),
        instance("i-04", ALICE),
    )
    nodes = [node_of(joining, labelled=False, state="down")]
    nodes += [node_of(m, labelled=False) for m in (buffered, unneeded, alice_i)]
    result = run(snapshot(nodes=nodes, instances=[joining, buffered, unneeded, alice_i]))
    assert [label.node_id for label in actions_of(result, LabelNode)] == ["node-i-04"]


def test_each_node_is_kept_by_its_own_work_whatever_work_is_listed_before() -> None:
    machines = [instance(f"i-0{n}", ALICE) for n in (1, 2, 3)]
    finished_on, stray_on, busy = nodes = [node_of(m) for m in machines]
    tasks = [
        running_task("done", finished_on, ALICE, state="complete", desired_state="shutdown"),
        running_task("stray", stray_on),
        running_task("own", busy, ALICE),
    ]
    result = run(snapshot(nodes=nodes, instances=machines, tasks=tasks, idle_since=idle_past_grace(*nodes)))
    assert [drain.node_id for drain in actions_of(result, Drain)] == ["node-i-01", "node-i-02"]


def test_only_active_work_of_a_service_that_is_not_the_owners_is_reported_as_foreign() -> None:
    """A global service's task follows every node, and a finished one runs nowhere: neither is reported."""
    machine = instance("i-01", ALICE)
    node = node_of(machine)
    tasks = [
        running_task("own", node, ALICE),
        running_task("done", node, state="complete", desired_state="shutdown"),
        dataclasses.replace(running_task("agent", node), global_service=True),
        running_task("stray", node),
    ]
    notices = run(snapshot(nodes=[node], instances=[machine], tasks=tasks)).notices
    assert [notice.split(" of service")[0] for notice in notices] == ["task stray"]
