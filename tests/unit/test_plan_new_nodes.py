"""A machine's start: the new node is labelled for its owner, a machine that never joins is given up on,
and an offering out of capacity is skipped for a while."""

from __future__ import annotations

from warmswarm_autoscaling.actions import Drain, LabelNode, Launch, Terminate
from warmswarm_models import (
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    Owner,
)

from .factories import (
    ALICE,
    BOB,
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    instance,
    next_snapshot,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    waiting_for,
)

MAX_START_S = 600.0  # the default policy's
BACKOFF_S = 600.0


def test_new_node_is_labelled_with_its_owner_and_its_machine() -> None:
    owner = Owner(user_id="42", project_id="7", node_id="3")
    new_i = instance("i-0new", owner, instance_type="m5.large", zone=ZONE_B)
    node = node_of(new_i, labelled=False)
    assert node.availability == "drain"  # as our nodes join
    label = only(run(snapshot(nodes=[node], instances=[new_i])), LabelNode)
    assert label.node_id == node.id
    assert label.labels == {
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
    assert set(label.labels) == {NODE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_TYPE, NODE_LABEL_AVAILABILITY_ZONE}


def test_new_node_is_matched_to_its_instance_by_engine_instance_id_not_hostname() -> None:
    alice_i = instance("i-0aaa", ALICE)
    bob_i = instance("i-0bbb", BOB)
    # Hostnames that point the wrong way: only the daemon's engine label says which machine it is.
    alice_node = node_of(alice_i, node_id="n-a", labelled=False, hostname="i-0bbb")
    bob_node = node_of(bob_i, node_id="n-b", labelled=False, hostname="i-0aaa")
    labels = {
        a.node_id: a.labels
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


def test_unlabelled_node_is_not_drained_or_terminated_however_long_it_idles() -> None:
    alice_i = instance("i-01", ALICE, launched_at=NOW - 10_000)
    node = node_of(alice_i, labelled=False)
    result = run(snapshot(nodes=[node], instances=[alice_i], idle_since={node.id: NOW - 10_000}))
    assert [type(a) for a in result.actions] == [LabelNode]


def test_instance_whose_owner_tags_were_edited_into_bad_ids_is_not_labelled_and_does_not_break_the_plan() -> None:
    odd_i = instance("i-01", tags={"user_id": "not a valid id"})
    node = node_of(odd_i, labelled=False)
    result = run(snapshot(nodes=[node], instances=[odd_i], tasks=[pending_task("t1", ALICE)]))
    assert actions_of(result, LabelNode) == []
    assert only(result, Launch).owner == ALICE


def test_instance_that_has_not_joined_within_max_start_s_is_terminated_and_its_offering_avoided() -> None:
    late = instance("i-0late", ALICE, instance_type="m5.large", zone=ZONE_B, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(instances=[late]))
    assert only(result, Terminate).instance_id == "i-0late"
    assert "max_start_s=600" in only(result, Terminate).reason
    assert result.unavailable_offerings == {("m5.large", ZONE_B): NOW + BACKOFF_S}


def test_instance_still_within_max_start_s_is_left_to_start() -> None:
    starting = instance("i-0st", ALICE, state="pending", launched_at=NOW - MAX_START_S)
    result = run(snapshot(instances=[starting]))
    assert result.actions == ()
    assert result.unavailable_offerings == {}


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


def test_task_of_an_instance_that_did_not_join_gets_a_launch_elsewhere_in_the_same_cycle() -> None:
    late = instance("i-0late", ALICE, zone=ZONE_A, launched_at=NOW - MAX_START_S - 1)
    result = run(snapshot(instances=[late], tasks=[pending_task("t1", ALICE)]))
    assert only(result, Terminate).instance_id == "i-0late"
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_B)
    assert "i-0late" not in waiting_for(result, "t1").reason


def test_unavailable_offering_is_skipped_for_the_next_zone() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable={("t3.medium", ZONE_A): NOW + 1}))
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_B)
    assert result.unavailable_offerings == {("t3.medium", ZONE_A): NOW + 1}


def test_type_unavailable_in_every_zone_is_skipped_for_the_next_cheapest_that_fits() -> None:
    unavailable = {("t3.medium", ZONE_A): NOW + 1, ("t3.medium", ZONE_B): NOW + 1}
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable=unavailable)), Launch)
    assert (launch.instance_type, launch.availability_zone) == ("m5.large", ZONE_A)


def test_expired_unavailable_marks_are_dropped_and_the_offering_is_tried_again() -> None:
    unavailable = {("t3.medium", ZONE_A): NOW, ("m5.large", ZONE_B): NOW - 100}
    result = run(snapshot(tasks=[pending_task("t1", ALICE)], unavailable=unavailable))
    launch = only(result, Launch)
    assert (launch.instance_type, launch.availability_zone) == ("t3.medium", ZONE_A)
    assert result.unavailable_offerings == {}


def test_offering_given_up_on_is_avoided_in_later_cycles_until_the_backoff_ends() -> None:
    task = pending_task("t1", ALICE)
    late = instance("i-0late", ALICE, zone=ZONE_A, launched_at=NOW - MAX_START_S - 1)
    first = run(snapshot(instances=[late], tasks=[task]))
    assert only(first, Launch).availability_zone == ZONE_B
    # Next cycle: the late instance is going, the launch in zone B was not made (say, no capacity there either).
    gone = instance("i-0late", ALICE, zone=ZONE_A, state="shutting-down", launched_at=NOW - MAX_START_S - 1)
    during = run(
        next_snapshot(
            first,
            now=NOW + 30,
            tasks=[task],
            instances=[gone],
        )
    )
    assert only(during, Launch).availability_zone == ZONE_B
    assert during.unavailable_offerings == {("t3.medium", ZONE_A): NOW + BACKOFF_S}
    after = run(next_snapshot(during, now=NOW + BACKOFF_S, tasks=[task], instances=[]))
    assert only(after, Launch).availability_zone == ZONE_A
    assert after.unavailable_offerings == {}


def test_idle_node_of_a_late_cycle_is_still_drained() -> None:
    # The start timeout and the idle lifecycle are independent: both act in one cycle.
    idle_i = instance("i-0idle", BOB)
    late = instance("i-0late", ALICE, launched_at=NOW - MAX_START_S - 1)
    node = node_of(idle_i)
    result = run(snapshot(nodes=[node], instances=[idle_i, late], idle_since={node.id: NOW - 1000}))
    assert only(result, Drain).node_id == node.id
    assert only(result, Terminate).instance_id == "i-0late"
