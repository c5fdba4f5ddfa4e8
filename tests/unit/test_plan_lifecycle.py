"""Our nodes from join to removal (plan/lifecycle.py): which node is labelled, tagged, drained, terminated or
removed, and which is left alone; what keeps a node; what each step and each notice says."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import (
    Action,
    BindMachine,
    ClaimBufferMachine,
    Drain,
    LabelNode,
    Launch,
    RemoveNode,
    Stop,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.lifecycle import TAGS_PER_CYCLE
from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.snapshot import Carried, Instance, Node, Repeated, Task
from warmswarm_models import (
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_WARM_TTL_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    CachePolicy,
    Owner,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BACKOFF_S,
    BOB,
    CACHE_ON,
    CLASS_POLICY,
    GRACE_S,
    INSTANCE_TYPES,
    MAX_START_S,
    NOBODY,
    NOW,
    VOL,
    ZONE_A,
    ZONE_B,
    actions_of,
    attachment,
    cached_task,
    class_machine,
    foreign_node,
    instance,
    instance_tagging,
    labels_of,
    make_policy,
    names,
    next_snapshot,
    node_of,
    only,
    our_labels,
    pending_task,
    run,
    running_task,
    set_tags,
    snapshot,
    student,
    volume,
)


def batch_machine(
    instance_id: str,
    batch: str = "b1",
    *,
    state: str = "running",
    instance_type: str = "t3.medium",
    zone: str = ZONE_A,
) -> Instance:
    """A machine launched in batch `batch`, no owner's yet (running, unless `state` says otherwise)."""
    return instance(
        instance_id, NOBODY, state=state, instance_type=instance_type, zone=zone, tags={INSTANCE_BATCH_TAG: batch}
    )


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


def idle_past_grace(*nodes: Node) -> dict[str, float]:
    return {node.id: NOW - GRACE_S for node in nodes}


def steps_on(result: Plan) -> list[tuple[str, str]]:
    """Every lifecycle step of the plan as (kind, the node or instance it acts on)."""
    kinds = (LabelNode, BindMachine, ClaimBufferMachine, Drain, Terminate, RemoveNode)
    found: list[tuple[str, str]] = []
    for action in result.actions:
        if isinstance(action, kinds):
            found.append((action.kind, ",".join(sorted(names(action)))))
    return found


CACHE_LABELS = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3").to_labels()


def _label_unmounted() -> Plan:
    machine = instance("i-03", ALICE_N1, volume_id="vol-3")
    return run(snapshot(nodes=[node_of(machine, labelled=False, mounted=False)], instances=[machine]))


# -- labelling what joined ---------------------------------------------------------------------------------


def test_new_node_is_labelled_with_its_owner_and_its_machine() -> None:
    owner = Owner(user_id="42", project_id="7", node_id="3")
    new_i = instance("i-0new", owner, instance_type="m5.large", zone=ZONE_B)
    node = node_of(new_i, labelled=False)
    assert node.availability == "drain"  # as our nodes join
    label = only(run(snapshot(nodes=[node], instances=[new_i])), LabelNode)
    assert label.node_id == node.id
    assert labels_of(label) == {
        "user_id": "42",
        "project_id": "7",
        "node_id": "3",
        NODE_LABEL_INSTANCE_ID: "i-0new",
        NODE_LABEL_INSTANCE_TYPE: "m5.large",
        NODE_LABEL_AVAILABILITY_ZONE: ZONE_B,
    }


def test_new_unowned_node_gets_only_the_machine_labels() -> None:
    new_i = instance("i-0new", NOBODY)
    label = only(run(snapshot(nodes=[node_of(new_i, labelled=False)], instances=[new_i])), LabelNode)
    assert set(labels_of(label)) == {NODE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_TYPE, NODE_LABEL_AVAILABILITY_ZONE}


def test_new_node_is_matched_to_its_instance_by_engine_instance_id_not_hostname() -> None:
    alice_i = instance("i-0aaa", ALICE)
    bob_i = instance("i-0bbb", BOB)
    # Hostnames that point the wrong way: only the daemon's engine label says which machine it is.
    alice_node = node_of(alice_i, node_id="n-a", labelled=False, hostname="i-0bbb")
    bob_node = node_of(bob_i, node_id="n-b", labelled=False, hostname="i-0aaa")
    labels = {
        a.node_id: labels_of(a)
        for a in actions_of(run(snapshot(nodes=[bob_node, alice_node], instances=[alice_i, bob_i])), LabelNode)
    }
    assert labels["n-a"]["user_id"] == "alice"
    assert labels["n-a"][NODE_LABEL_INSTANCE_ID] == "i-0aaa"
    assert labels["n-b"]["user_id"] == "bob"
    assert labels["n-b"][NODE_LABEL_INSTANCE_ID] == "i-0bbb"


def test_labelled_node_is_not_labelled_again() -> None:
    alice_i = instance("i-01", ALICE)
    assert actions_of(run(snapshot(nodes=[node_of(alice_i)], instances=[alice_i])), LabelNode) == []


def test_node_is_labelled_only_once_it_is_ready() -> None:
    alice_i = instance("i-01", ALICE)
    result = run(snapshot(nodes=[node_of(alice_i, labelled=False, state="unknown")], instances=[alice_i]))
    assert actions_of(result, LabelNode) == []


def test_instance_whose_owner_tags_were_edited_into_bad_ids_is_not_labelled_and_does_not_break_the_plan() -> None:
    odd_i = instance("i-01", tags={"user_id": "not a valid id"})
    node = node_of(odd_i, labelled=False)
    result = run(snapshot(nodes=[node], instances=[odd_i], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, LabelNode) == []
    assert only(result, Launch).owner == ALICE


@pytest.mark.parametrize("state", ["shutting-down", "stopping", "terminated"])
def test_a_joined_node_whose_instance_is_going_is_not_labelled(state: str) -> None:
    going = instance("i-01", ALICE, state=state)
    result = run(snapshot(nodes=[node_of(going, labelled=False)], instances=[going]))
    assert actions_of(result, LabelNode) == []
    assert result.notices == ()


def test_node_that_joins_with_the_volume_is_labelled_with_its_id() -> None:
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL)
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, state="in-use", attached_to=[attachment("i-0a1")])
    joined = node_of(booted, labelled=False)
    result = run(snapshot(nodes=[joined], instances=[booted], volumes=[vol], tasks=[cached_task("t1", ALICE_N1)]))
    label = only(result, LabelNode)
    assert label.node_id == joined.id
    assert labels_of(label)[NODE_LABEL_VOLUME_ID] == VOL
    assert labels_of(label)["node_id"] == "n1"


def test_node_of_a_machine_without_a_volume_carries_no_volume_label() -> None:
    booted = instance("i-0a1", ALICE_N1)
    result = run(snapshot(nodes=[node_of(booted, labelled=False)], instances=[booted]))
    assert NODE_LABEL_VOLUME_ID not in labels_of(only(result, LabelNode))


def test_a_joined_node_with_its_mount_is_labelled_and_nothing_else() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")

    result = run(snapshot(nodes=[node_of(machine, labelled=False)], instances=[machine]))

    assert only(result, LabelNode).volume_id == "vol-1"
    assert actions_of(result, Terminate) == []


def test_a_joined_node_without_its_mount_is_terminated_at_once_and_its_volume_avoids_that_offering() -> None:
    """Its boot waited for the device in vain: kept, it would sit drained, count as idle, and be replaced by the
    same launch with the same volume, which fails the same way, forever (issue 19, behaviour 7)."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    joined = node_of(machine, labelled=False, mounted=False)

    kept = volume("vol-1", ALICE_N1)
    result = run(snapshot(nodes=[joined], instances=[machine], volumes=[kept], idle_since={joined.id: NOW - 3600}))

    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-01", "volume_missing")]
    assert actions_of(result, LabelNode) == []
    assert actions_of(result, Drain) == []
    assert result.carried.volume_backoffs == {
        "vol-1": Repeated(frozenset({"i-01"}), frozenset({("t3.medium", ZONE_A)}), NOW, NOW + BACKOFF_S)
    }
    assert joined.id not in result.carried.idle_since  # never counted idle
    # Seen again next cycle (its terminate not through yet), it is the same failure, counted once.
    again = next_snapshot(result, now=NOW + 5, nodes=[joined], instances=[machine], volumes=[kept])
    assert run(again).carried.volume_backoffs == result.carried.volume_backoffs


def test_each_machine_a_missing_volume_costs_doubles_its_back_off_and_a_mount_forgets_it() -> None:
    """Issue 32: a failure that repeats the same way backs off, growing (16x at most)."""
    before = Repeated(frozenset({"i-00"}), frozenset({("m5.large", ZONE_A)}), NOW - 700, NOW - 100)
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    failed = node_of(machine, labelled=False, mounted=False)

    result = run(
        snapshot(
            nodes=[failed],
            instances=[machine],
            volumes=[volume("vol-1", ALICE_N1)],
            carried=Carried(volume_backoffs={"vol-1": before}),
        )
    )

    assert result.carried.volume_backoffs["vol-1"] == Repeated(
        frozenset({"i-00", "i-01"}), frozenset({("m5.large", ZONE_A), ("t3.medium", ZONE_A)}), NOW, NOW + 2 * BACKOFF_S
    )
    mounted = node_of(machine)
    seen = run(
        snapshot(nodes=[mounted], instances=[machine], volumes=[volume("vol-1", ALICE_N1)], carried=result.carried)
    )
    assert seen.carried.volume_backoffs == {}


def test_a_rebooted_node_up_without_its_mount_is_terminated_not_drained_and_not_idle() -> None:
    """Labelled and active from before, this boot did not mount the volume: its work would run without the data."""
    machine = instance("i-03", ALICE_N1, volume_id="vol-3")
    rebooted = node_of(machine, mounted=False)

    result = run(snapshot(nodes=[rebooted], instances=[machine], tasks=[running_task("t", rebooted, ALICE_N1)]))

    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-03", "volume_missing")]
    assert actions_of(result, Drain) == []


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


# -- a batch's machines, labelled for the owner whose work took them ---------------------------------------


def test_a_joined_batch_machine_is_labelled_for_the_owner_whose_work_took_it() -> None:
    machine = batch_machine("i-01")
    result = run(
        snapshot(nodes=[node_of(machine, labelled=False)], instances=[machine], tasks=[pending_task("t", BOB)])
    )
    [label] = actions_of(result, LabelNode)
    assert dict(labels_of(label)) == our_labels(machine, BOB)


def test_each_machine_that_joins_is_labelled_for_one_student_and_no_two_share_one() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(4)]
    machines = [class_machine(f"i-{n:02d}", state="running") for n in range(4)]
    joined = [node_of(m, labelled=False) for m in machines]

    result = run(snapshot(tasks=tasks, instances=machines, nodes=joined, now=NOW + 20), CLASS_POLICY)

    labels = actions_of(result, LabelNode)
    owners = [Owner.from_labels(labels_of(label)) for label in labels]
    assert sorted(str(o) for o in owners) == sorted(str(student(n)) for n in range(4))
    assert actions_of(result, Launch) == []


# -- owner labels someone else wrote -----------------------------------------------------------------------


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


def test_a_node_someone_labelled_for_another_owner_is_neither_relabelled_nor_given_work() -> None:
    """Relabelling would evict alice's work and hand the node (and the cache its boot mounted) to bob on a guess."""
    bobs_machine = instance("i-01", BOB)
    joined = node_of(bobs_machine, labelled=False)
    hand_labelled = read_node(
        id=joined.id,
        hostname=joined.hostname,
        state="ready",
        availability="active",
        role="worker",
        resources=joined.resources,
        labels={"user_id": "alice"},  # an operator's `docker node update --label-add`, no instance id of ours
        engine_labels={ENGINE_LABEL_INSTANCE_ID: bobs_machine.id},
        addr=joined.addr,
    )
    bobs_task = pending_task("t-bob", BOB)

    result = run(snapshot(nodes=[hand_labelled], instances=[bobs_machine], tasks=[bobs_task]))

    assert actions_of(result, LabelNode) == []
    assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]  # bob gets a machine of his own
    assert any(joined.hostname in n and "owner labels for user_id=alice" in n for n in result.notices)


# -- tagging the machines of a batch -----------------------------------------------------------------------


def test_a_labelled_machine_of_a_batch_gets_its_owners_tags() -> None:
    machine = class_machine("i-01", state="running")
    labelled = node_of(machine, labelled=True, owner=student(7))

    result = run(snapshot(instances=[machine], nodes=[labelled]), CLASS_POLICY)

    [tag] = instance_tagging(result)
    assert (tag.instance_id, Owner.from_labels(set_tags(tag))) == ("i-01", student(7))


def test_owner_tags_go_on_a_few_machines_a_cycle_not_on_the_whole_class_at_once() -> None:
    machines = [class_machine(f"i-{n:02d}", state="running") for n in range(12)]
    nodes = [node_of(m, labelled=True, owner=student(n)) for n, m in enumerate(machines)]

    result = run(snapshot(instances=machines, nodes=nodes), CLASS_POLICY)

    assert len(instance_tagging(result)) == TAGS_PER_CYCLE


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
    assert instance_tagging(run(snapshot(nodes=[node], instances=[machine]))) == []


def test_a_batch_machine_whose_node_is_gone_or_not_labelled_by_us_gets_no_tags() -> None:
    """Gone: our labels outlive the instance, nothing is there to tag. Not labelled by us: not bound yet."""
    machine = batch_machine("i-01")
    gone = node_of(machine, owner=BOB, state="down")
    assert instance_tagging(run(snapshot(nodes=[gone], instances=[]))) == []
    by_hand = labelled_by_hand(machine, BOB.labels())
    assert instance_tagging(run(snapshot(nodes=[by_hand], instances=[machine]))) == []


def test_a_machine_shown_by_two_nodes_is_tagged_once() -> None:
    machine = batch_machine("i-01")
    stale = node_of(machine, node_id="old", owner=BOB, state="down")
    fresh = node_of(machine, node_id="new", owner=BOB)
    other = batch_machine("i-02")
    result = run(snapshot(nodes=[stale, fresh, node_of(other, owner=ALICE)], instances=[machine, other]))
    assert [tag.instance_id for tag in instance_tagging(result)] == ["i-01", "i-02"]


def test_five_bound_machines_a_cycle_get_their_owners_tags_in_node_order() -> None:
    own, nobodys = instance("i-10", ALICE), batch_machine("i-11")
    machines = [batch_machine(f"i-0{n}") for n in range(6)]
    nodes = [node_of(own), node_of(nobodys)] + [node_of(m, owner=BOB) for m in machines]
    tags = instance_tagging(run(snapshot(nodes=nodes, instances=[own, nobodys, *machines])))
    assert [tag.instance_id for tag in tags] == [f"i-0{n}" for n in range(5)]
    assert all(dict(set_tags(tag)) == BOB.labels() for tag in tags)


# -- what keeps a node: its owner's work -------------------------------------------------------------------


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


@pytest.mark.parametrize("state", ["assigned", "preparing", "starting", "running"])
def test_node_with_an_active_task_is_never_drained(state: str) -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)
    task = running_task("t1", node, ALICE, state=state)
    result = run(snapshot(nodes=[node], instances=[alice_i], tasks=[task], idle_since={node.id: NOW - 10_000}))
    assert result.actions == ()
    assert node.id not in result.carried.idle_since  # busy: the idle clock starts over


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
    assert node.id not in result.carried.idle_since


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


def test_work_this_plan_sends_to_a_drained_node_keeps_it() -> None:
    machine = instance("i-01", ALICE)
    drained = node_of(machine, availability="drain")
    snap = snapshot(
        nodes=[drained], instances=[machine], tasks=[pending_task("t", ALICE)], idle_since=idle_past_grace(drained)
    )
    assert actions_of(run(snap), Terminate) == []


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


# -- an idle node: drained, then terminated ----------------------------------------------------------------


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


def test_idle_node_is_drained_then_terminated_then_removed_carrying_idle_since_between_cycles() -> None:
    alice_i = instance("i-01", ALICE)
    node = node_of(alice_i)

    first = run(snapshot(nodes=[node], instances=[alice_i], now=NOW))
    assert first.actions == ()
    assert first.carried.idle_since == {node.id: NOW}

    before_grace = run(next_snapshot(first, now=NOW + GRACE_S - 1, nodes=[node], instances=[alice_i]))
    assert before_grace.actions == ()
    assert before_grace.carried.idle_since == {node.id: NOW}

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
    assert result.carried.idle_since == {"node-i-01": NOW + 10_000}


def test_idle_grace_comes_from_the_policy() -> None:
    alice_i = instance("i-01", ALICE)
    snap = snapshot(nodes=[node_of(alice_i)], instances=[alice_i], idle_since={"node-i-01": NOW - 60})
    assert actions_of(run(snap, make_policy(idle_grace_s=60.0)), Drain) != []
    assert actions_of(run(snap, make_policy(idle_grace_s=61.0)), Drain) == []


def test_unlabelled_node_is_not_drained_or_terminated_however_long_it_idles() -> None:
    alice_i = instance("i-01", ALICE, launched_at=NOW - 10_000)
    node = node_of(alice_i, labelled=False)
    result = run(snapshot(nodes=[node], instances=[alice_i], idle_since={node.id: NOW - 10_000}))
    assert [type(a) for a in result.actions] == [LabelNode]


def test_a_ready_node_whose_instance_is_going_is_left_alone_and_not_timed() -> None:
    going = instance("i-01", ALICE, state="shutting-down")
    node = node_of(going)
    result = run(snapshot(nodes=[node], instances=[going], idle_since=idle_past_grace(node)))
    assert steps_on(result) == []
    assert result.carried.idle_since == {}


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
    assert all(n.id not in result.carried.idle_since for n in nodes)
    # The plan did act (on our node and for the tasks), so the check above is not vacuous.
    assert result.actions


def test_a_drained_idle_machine_of_an_owner_with_a_warm_tier_is_stopped_not_terminated() -> None:
    warm = instance("i-01", ALICE, tags={INSTANCE_WARM_TTL_TAG: "3600"})
    drained = node_of(warm, availability="drain")
    result = run(snapshot(nodes=[drained], instances=[warm], idle_since=idle_past_grace(drained)))
    assert [(stop.instance_id, stop.warm_until) for stop in actions_of(result, Stop)] == [("i-01", NOW + 3600)]
    assert actions_of(result, Terminate) == []


def test_idle_node_with_a_volume_is_drained_and_terminated_when_its_owner_stays_away() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 7200)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")])
    active = node_of(booted)
    drained = node_of(booted, availability="drain")
    idle = {active.id: NOW - 3600}
    assert only(run(snapshot(nodes=[active], instances=[booted], volumes=[vol], idle_since=idle)), Drain)
    assert only(run(snapshot(nodes=[drained], instances=[booted], volumes=[vol], idle_since=idle)), Terminate)


def test_idle_node_of_a_late_cycle_is_still_drained() -> None:
    # The start timeout and the idle lifecycle are independent: both act in one cycle.
    idle_i = instance("i-0idle", BOB)
    late = instance("i-0late", ALICE, launched_at=NOW - MAX_START_S - 1)
    node = node_of(idle_i)
    result = run(snapshot(nodes=[node], instances=[idle_i, late], idle_since={node.id: NOW - 1000}))
    assert only(result, Drain).node_id == node.id
    assert only(result, Terminate).instance_id == "i-0late"


# -- a batch machine nobody took ---------------------------------------------------------------------------


def test_a_machine_nobody_needs_stays_unlabelled_and_goes_after_the_idle_grace() -> None:
    machine = class_machine("i-01", state="running", launched_at=NOW - 1000)
    joined = node_of(machine, labelled=False)
    policy = make_policy(idle_grace_s=300.0)

    first = run(snapshot(instances=[machine], nodes=[joined], now=NOW), policy)
    later = run(next_snapshot(first, now=NOW + 301, instances=[machine], nodes=[joined]), policy)

    assert actions_of(first, LabelNode) == []
    assert actions_of(first, Terminate) == []
    [terminate] = actions_of(later, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "idle")


def test_an_unneeded_batch_machine_goes_at_the_end_of_its_grace_not_before() -> None:
    machine = batch_machine("i-01")
    node = node_of(machine, labelled=False)
    at_grace = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    assert steps_on(at_grace) == [("terminate", "i-01")]
    before = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S + 1}))
    assert steps_on(before) == []
    assert before.carried.idle_since == {node.id: NOW - GRACE_S + 1}


def test_an_unneeded_batch_machine_starts_its_idle_clock_when_it_joins() -> None:
    machine = batch_machine("i-01")
    node = node_of(machine, labelled=False)
    assert run(snapshot(nodes=[node], instances=[machine])).carried.idle_since == {node.id: NOW}


def test_a_batch_machine_already_going_is_not_terminated_again_nor_timed() -> None:
    machine = batch_machine("i-01", state="shutting-down")
    node = node_of(machine, labelled=False)
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - 10 * GRACE_S}))
    assert steps_on(result) == []
    assert result.carried.idle_since == {}


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
    assert result.carried.idle_since == {}


# -- a machine that never joins ----------------------------------------------------------------------------


def test_instance_that_has_not_joined_within_max_start_s_is_terminated_and_its_offering_avoided() -> None:
    late = instance("i-0late", ALICE, instance_type="m5.large", zone=ZONE_B, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(instances=[late]))
    assert only(result, Terminate).instance_id == "i-0late"
    assert "max_start_s=600" in only(result, Terminate).reason
    assert result.carried.unavailable_offerings == {("m5.large", ZONE_B): NOW + BACKOFF_S}


def test_instance_still_within_max_start_s_is_left_to_start() -> None:
    starting = instance("i-0st", ALICE, state="pending", launched_at=NOW - MAX_START_S)
    result = run(snapshot(instances=[starting]))
    assert result.actions == ()
    assert result.carried.unavailable_offerings == {}


def test_instance_whose_node_registered_but_never_became_ready_is_terminated_after_max_start_s() -> None:
    late = instance("i-0late", ALICE, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(nodes=[node_of(late, labelled=False, state="down")], instances=[late]))
    assert only(result, Terminate).instance_id == "i-0late"


def test_joined_instance_older_than_max_start_s_is_not_terminated() -> None:
    old = instance("i-0old", ALICE, launched_at=NOW - 100_000)
    node = node_of(old)
    result = run(snapshot(nodes=[node], instances=[old], tasks=[]))
    assert actions_of(result, Terminate) == []
    # Nor when its node is briefly down: it joined once (it carries our labels).
    result = run(snapshot(nodes=[node_of(old, state="down")], instances=[old]))
    assert actions_of(result, Terminate) == []


# -- a node that is down while its machine runs ------------------------------------------------------------


def test_a_down_node_goes_at_max_start_s_not_before() -> None:
    machine = instance("i-01", ALICE)
    node = node_of(machine, state="down")
    before = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - MAX_START_S + 1}))
    assert steps_on(before) == []
    assert before.carried.down_since == {node.id: NOW - MAX_START_S + 1}
    at = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - MAX_START_S}))
    assert steps_on(at) == [("terminate", "i-01")]


def test_a_down_node_of_a_stopped_machine_is_kept_with_its_labels_and_no_down_clock() -> None:
    stopped = instance("i-01", ALICE, state="stopped")
    node = node_of(stopped, state="down")
    result = run(snapshot(nodes=[node], instances=[stopped], down_since={node.id: NOW - 10 * MAX_START_S}))
    assert actions_of(result, RemoveNode) == []
    assert result.carried.down_since == {}


def test_node_down_while_its_instance_runs_is_terminated_after_max_start_s() -> None:
    # The machine lost the swarm (a crashed daemon, a broken network): it runs nothing and costs money.
    lost_i = instance("i-01", ALICE)
    lost = node_of(lost_i, state="down")
    policy = make_policy(max_start_s=600.0)
    first = run(snapshot(nodes=[lost], instances=[lost_i]), policy)
    assert actions_of(first, Terminate) == []
    assert first.carried.down_since == {lost.id: NOW}

    later = run(snapshot(nodes=[lost], instances=[lost_i], down_since={lost.id: NOW - 601}), policy)
    terminate = only(later, Terminate)
    assert terminate.instance_id == lost_i.id
    assert terminate.cause == "node_down"


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


# -- removing what is gone ---------------------------------------------------------------------------------


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


def test_stale_down_node_of_a_machine_that_rejoined_is_removed_not_its_instance() -> None:
    machine = instance("i-01", ALICE)
    stale = node_of(machine, node_id="old", state="down")
    fresh = node_of(machine, node_id="new")
    result = run(
        snapshot(nodes=[stale, fresh], instances=[machine], tasks=[running_task("t1", fresh, ALICE)]),
    )
    assert only(result, RemoveNode).node_id == "old"
    assert actions_of(result, Terminate) == []


def test_a_stale_registration_of_a_machine_that_rejoined_is_removed_saying_so() -> None:
    machine = instance("i-1", ALICE)
    stale = node_of(machine, node_id="node-old", hostname="ip-10-0-0-11", state="down")
    fresh = node_of(machine, node_id="node-new", hostname="ip-10-0-0-11")

    result = run(snapshot(nodes=[stale, fresh], instances=[machine], idle_since={"node-new": NOW}))

    assert [(a.kind, a.target, a.reason) for a in result.actions] == [
        ("remove_node", "node-old", "node ip-10-0-0-11 is down; its machine rejoined as another node")
    ]


# -- draining what runs without its cache ------------------------------------------------------------------


def _cache_drains(node: Node, machine: Instance | None, *tasks: Task) -> list[str]:
    result = run(snapshot(nodes=[node], instances=[machine] if machine else [], tasks=tasks))
    return [drain.node_id for drain in actions_of(result, Drain)]


def test_a_node_up_without_its_cache_mounted_is_terminated_with_the_reason() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    rebooted = node_of(machine, mounted=False)  # labelled and active from before; this boot had no mount

    result = run(snapshot(nodes=[rebooted], instances=[machine], volumes=[volume("vol-1", attached_to=[])]))

    assert actions_of(result, Drain) == []
    assert "joined without its cache volume vol-1 mounted" in only(result, Terminate).reason


def test_node_without_a_volume_running_a_cached_task_is_drained_so_the_task_moves() -> None:
    plain = instance("i-plain", ALICE_N1)
    node = node_of(plain)
    task = running_task("t1", node, ALICE_N1, service_labels=CACHE_ON.to_labels())
    result = run(snapshot(nodes=[node], instances=[plain], tasks=[task]))
    drain = only(result, Drain)
    assert drain.node_id == node.id
    assert "has no cache volume" in drain.reason
    assert "service-t1" in drain.reason
    assert drain.if_still_idle is False, "its work is why it drains: apply does not look for work on it again"


def test_an_idle_drain_asks_apply_to_read_the_nodes_tasks_again_first() -> None:
    """The owner's next session may land on it between the observation and the drain (docs/reliability.md, 28)."""
    idle = instance("i-01", ALICE_N1)
    node = node_of(idle)
    result = run(snapshot(nodes=[node], instances=[idle], idle_since={node.id: NOW - GRACE_S}))
    assert only(result, Drain).if_still_idle is True


@pytest.mark.parametrize("cache_on", [False, True])
def test_node_is_not_drained_for_a_task_it_can_serve(cache_on: bool) -> None:
    carrying = instance("i-vol", ALICE_N1, volume_id=VOL if cache_on else None)
    node = node_of(carrying)
    labels = CACHE_ON.to_labels() if cache_on else CachePolicy().to_labels()
    task = running_task("t1", node, ALICE_N1, service_labels=labels)
    result = run(snapshot(nodes=[node], instances=[carrying], tasks=[task]))
    assert result.actions == ()


def test_already_drained_node_without_a_volume_is_not_drained_again() -> None:
    plain = instance("i-plain", ALICE_N1)
    node = node_of(plain, availability="drain")
    task = running_task("t1", node, ALICE_N1, service_labels=CACHE_ON.to_labels(), desired_state="shutdown")
    result = run(snapshot(nodes=[node], instances=[plain], tasks=[task]))
    assert actions_of(result, Drain) == []


def test_a_cache_task_on_a_node_without_a_volume_is_named_once_by_its_first_task() -> None:
    """Two cache-on tasks on one node: one drain, naming the first (the order the snapshot lists them)."""
    machine = instance("i-30", ALICE_N1)
    node = node_of(machine)
    first = running_task("a", node, ALICE_N1, service_labels=CACHE_LABELS)
    second = running_task("b", node, ALICE_N1, service_labels=CACHE_LABELS)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[first, second, cached_task("p", ALICE_N1)]))
    [drain] = [a for a in result.actions if isinstance(a, Drain)]
    assert "service service-a on it" in drain.reason


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


def test_a_node_missing_its_mount_is_terminated_once_it_is_up_whatever_its_labels_and_never_drained() -> None:
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    for node, terminated in [
        (node_of(machine, mounted=False), ["i-01"]),
        (node_of(machine, labelled=False, mounted=False, availability="active"), ["i-01"]),
        (node_of(machine, mounted=False, availability="drain"), ["i-01"]),
        (node_of(machine, mounted=False, state="down"), []),  # not up: its boot may still mount it
    ]:
        result = run(snapshot(nodes=[node], instances=[machine]))
        assert [t.instance_id for t in actions_of(result, Terminate) if t.cause == "volume_missing"] == terminated
        assert actions_of(result, Drain) == []


def test_every_node_without_its_cache_is_drained_and_nodes_without_cache_work_are_passed_over() -> None:
    unmounted = [instance(f"i-0{n}", ALICE_N1, volume_id=f"vol-{n}") for n in (1, 2)]
    plain, needy = instance("i-03", ALICE_N1), instance("i-04", ALICE_N1)
    nodes = [node_of(m, mounted=False) for m in unmounted] + [node_of(plain), node_of(needy)]
    work = running_task("t", nodes[3], ALICE_N1, service_labels=CACHE_LABELS)
    # A task on no node comes first: it is passed over, not the end of the search.
    tasks = [pending_task("t0", BOB), work]
    result = run(snapshot(nodes=nodes, instances=[*unmounted, plain, needy], tasks=tasks))
    assert [drain.node_id for drain in actions_of(result, Drain)] == ["node-i-04"]
    assert [t.instance_id for t in actions_of(result, Terminate)] == ["i-01", "i-02"]
    # The nodes after the unmounted ones still get their step: the plain one's idle clock starts.
    assert result.carried.idle_since == {"node-i-03": NOW}


# -- what each step and each notice says -------------------------------------------------------------------


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
        Terminate,
        "instance i-03 (t3.medium in eu-west-1a) of user_id=alice,project_id=p1,node_id=n1 joined without its cache"
        " volume vol-3 mounted (the device did not appear within its boot's wait, or could not be mounted):"
        " terminated, the volume is kept, and its next machine waits 600 s and avoids this offering",
    ),
    (
        _tag_bound,
        BindMachine,
        "its node ip-10-0-0-04 was labelled for user_id=bob: the instance carries its owner too",
    ),
    (
        _drain_unmounted,
        Terminate,
        "instance i-05 (t3.medium in eu-west-1a) of user_id=alice,project_id=p1,node_id=n1 joined without its cache"
        " volume vol-5 mounted (the device did not appear within its boot's wait, or could not be mounted):"
        " terminated, the volume is kept, and its next machine waits 600 s and avoids this offering",
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


@pytest.mark.parametrize(
    ("scenario", "notice"),
    NOTICES,
    ids=["impostor", "impostor-without-addresses", "foreign-task", "foreign-task-unnamed", "conflict", "unreadable"],
)
def test_each_notice_tells_the_operator_what_is_wrong_and_what_to_do(scenario: Callable[[], Plan], notice: str) -> None:
    assert list(scenario().notices) == [notice]


# -- foreign work never evicts owners (issue 19, behaviour 3) ----------------------------------------------


def test_foreign_work_asking_for_a_cache_never_drains_an_owners_node_it_lands_on() -> None:
    """A service with cache labels but no owner constraints would drain every node swarm moves it to, evicting one
    owner's sessions after another; only the node owner's own cache work may drain it. It is reported instead."""
    alices = instance("i-01", ALICE_N1)
    node = node_of(alices)
    session = running_task("t-a", node, ALICE_N1)
    foreign = running_task("t-x", node, NOBODY, service_labels=CACHE_LABELS)

    result = run(snapshot(nodes=[node], instances=[alices], tasks=[session, foreign]))

    assert actions_of(result, Drain) == []
    assert [n for n in result.notices if "t-x" in n] != []
