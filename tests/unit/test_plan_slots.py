"""Where pending work may go without a launch (plan/slots.py): one slot per active node, drained node of ours,
machine on its way, warm machine or returning node; none where no work may go; and what each slot tells a task."""

from __future__ import annotations

from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.slots import Slot, find_slots, slot_reason
from warmswarm_autoscaling.snapshot import Instance, Node
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    Resources,
    format_timestamp,
)

from .factories import (
    ALICE_N1,
    BOB_N1,
    GIB,
    MAX_START_S,
    NOW,
    T3_MEDIUM,
    buffer_machine,
    foreign_node,
    instance,
    make_policy,
    node_of,
    running_task,
    snapshot,
    warm_machine,
)

POLICY = make_policy()
HOT_TAGS = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}


def slots_of(
    *, nodes: tuple[Node, ...] = (), instances: tuple[Instance, ...] = (), down_since: dict[str, float] | None = None
) -> list[Slot]:
    return find_slots(Cluster.of(snapshot(nodes=nodes, instances=instances, down_since=down_since), POLICY))


def test_an_active_node_of_ours_is_its_owners_room_less_what_runs_there() -> None:
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine)
    busy = running_task("t-run", node, ALICE_N1, cpus=0.5, memory_gib=1.0)
    cluster = Cluster.of(snapshot(nodes=[node], instances=[machine], tasks=[busy]), POLICY)

    [slot] = find_slots(cluster)

    assert (slot.owner, slot.node, slot.instance) == (ALICE_N1, node, machine)
    assert slot.room == T3_MEDIUM.resources.minus(Resources(0.5, GIB))
    assert (slot.drained, slot.returning, slot.resume, slot.mounting) == (False, False, False, False)
    assert slot_reason(slot) == f"fits on node {node.hostname}; waiting for the swarm scheduler"


def test_a_machine_on_its_way_is_room_for_its_owner_before_its_node_joins() -> None:
    booting = instance("i-02", BOB_N1, state="pending", volume_id="vol-2")

    [slot] = slots_of(instances=(booting,))

    assert (slot.owner, slot.node, slot.has_volume) == (BOB_N1, None, True)
    assert slot_reason(slot) == "waiting for instance i-02 (t3.medium) to join the swarm"


def test_a_drained_node_of_ours_is_brought_back_but_one_ops_drained_is_not_ours_to_use() -> None:
    machine = instance("i-01", ALICE_N1)
    ours = node_of(machine, availability="drain")
    theirs = foreign_node("n-ops", availability="drain", labels=ALICE_N1.labels())

    [slot] = slots_of(nodes=(ours, theirs), instances=(machine,))

    assert slot.node == ours
    assert slot.drained
    assert slot_reason(slot) == f"node {ours.hostname} of {ALICE_N1} is brought back from drain"


def test_no_slot_where_no_work_may_go() -> None:
    going = instance("i-going", ALICE_N1, state="shutting-down")
    unmounted = instance("i-unmounted", ALICE_N1, volume_id="vol-9")
    nobodys = buffer_machine("i-buffer", state="running")

    slots = slots_of(
        nodes=(node_of(going), node_of(unmounted, mounted=False), node_of(nobodys, labelled=False)),
        instances=(going, unmounted, nobodys),
    )

    # Its machine is going; its boot did not mount the owner's volume; a buffer machine is nobody's room.
    assert slots == []


def test_a_warm_machine_is_one_resume_slot_however_many_nodes_it_left_behind() -> None:
    machine = warm_machine()
    first, second = node_of(machine, state="down"), node_of(machine, node_id="node-again", state="down")

    [slot] = slots_of(nodes=(first, second), instances=(machine,))

    assert (slot.owner, slot.resume, slot.returning) == (ALICE_N1, True, True)
    assert slot_reason(slot).startswith("resuming your machine i-01 (stopped, kept warm for")


def test_a_node_down_while_its_machine_runs_is_waited_for_until_max_start_s() -> None:
    machine = instance("i-01", ALICE_N1)
    down = node_of(machine, state="down")

    [waited] = slots_of(nodes=(down,), instances=(machine,), down_since={down.id: NOW - MAX_START_S + 1})
    given_up = slots_of(nodes=(down,), instances=(machine,), down_since={down.id: NOW - MAX_START_S})

    assert (waited.returning, waited.resume) == (True, False)
    assert "waiting for it to come back" in slot_reason(waited)
    assert given_up == []


def test_a_warm_machines_second_registration_does_not_hide_the_nodes_after_it() -> None:
    machine = warm_machine()
    first, second = node_of(machine, state="down"), node_of(machine, node_id="node-again", state="down")
    bobs = instance("i-02", BOB_N1)

    slots = slots_of(nodes=(first, second, node_of(bobs)), instances=(machine, bobs))

    assert [slot.owner for slot in slots] == [ALICE_N1, BOB_N1]


def test_a_node_whose_machine_is_gone_does_not_hide_the_nodes_after_it() -> None:
    going = instance("i-going", ALICE_N1, state="shutting-down")
    bobs = instance("i-02", BOB_N1)

    [slot] = slots_of(nodes=(node_of(going), node_of(bobs)), instances=(going, bobs))

    assert slot.owner == BOB_N1


def test_a_foreign_node_naming_our_stopped_machine_is_room_by_its_labels_like_any_foreign_node() -> None:
    """Only a node of ours stands for our stopped machine; one whose daemon merely names it is someone else's."""
    machine = warm_machine()
    claimant = foreign_node("n-other", labels=BOB_N1.labels(), engine_instance_id=machine.id)

    [slot] = slots_of(nodes=(claimant,), instances=(machine,))

    assert (slot.owner, slot.node, slot.resume) == (BOB_N1, claimant, False)


def test_a_claimed_hot_machine_tells_its_owner_which_machine_and_what_it_waits_for() -> None:
    claimed = instance("i-h1", ALICE_N1, tags={**HOT_TAGS}, volume_id="vol-1")
    slot = Slot(ALICE_N1, T3_MEDIUM.resources, instance=claimed, has_volume=True, mounting=True)

    said = slot_reason(slot)

    assert said.startswith("machine i-h1 (t3.medium in eu-west-1a) of the hot buffer")
    assert "your cache volume vol-1 is attached" in said
    assert said.endswith("it takes your work once its node says the volume is mounted")


def test_a_claimed_machine_awaiting_its_mount_does_not_hide_the_nodes_after_it() -> None:
    tags = {**HOT_TAGS, INSTANCE_CLAIMED_AT_TAG: format_timestamp(NOW - 10)}
    claimed = instance("i-h1", ALICE_N1, tags=tags, volume_id="vol-1")
    bobs = instance("i-02", BOB_N1)

    slots = slots_of(nodes=(node_of(claimed, labelled=False, mounted=False), node_of(bobs)), instances=(claimed, bobs))

    assert [(slot.owner, slot.mounting) for slot in slots] == [(ALICE_N1, True), (BOB_N1, False)]
