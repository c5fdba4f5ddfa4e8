"""The warm tier: an idle owner's machine is stopped, not terminated; resumed for its owner; expired to cold."""

from __future__ import annotations

from dataclasses import replace

from warmswarm_autoscaling.actions import Activate, Launch, LaunchBatch, RemoveNode, Start, Stop, Terminate
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, CachePolicy, format_timestamp

from .factories import (
    ALICE_N1,
    BOB,
    CACHE_ON,
    NOW,
    actions_of,
    cached_task,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    volume,
    waiting_for,
)

GRACE_S = 300.0  # the default policy's idle_grace_s
WARM_S = 3600
WARM_TAGS = {INSTANCE_WARM_TTL_TAG: str(WARM_S)}


def warm_machine(state: str = "stopped", until: float = NOW + 1800) -> Instance:
    """Alice's machine as we stop it for the warm tier: tagged with its warm-until, its cache volume attached."""
    tags = {**WARM_TAGS, INSTANCE_WARM_UNTIL_TAG: format_timestamp(until)}
    return instance("i-01", ALICE_N1, state=state, tags=tags, volume_id="vol-1")


def test_drained_idle_machine_with_a_warm_tier_is_stopped_until_now_plus_its_warm_ttl() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    stop = only(result, Stop)
    assert (stop.instance_id, stop.warm_until) == ("i-01", NOW + WARM_S)
    assert actions_of(result, Terminate) == []
    assert "kept warm" in stop.reason
    assert format_timestamp(NOW + WARM_S) in stop.reason


def test_before_its_grace_ends_a_warm_tier_machine_is_neither_stopped_nor_terminated() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S + 1}))
    assert actions_of(result, Stop) == []
    assert actions_of(result, Terminate) == []


def test_without_a_warm_tier_the_idle_machine_is_terminated_as_before() -> None:
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    assert only(result, Terminate).cause == "idle"
    assert actions_of(result, Stop) == []


def test_past_max_stopped_instances_an_idle_machine_is_terminated_and_says_why() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    other = instance("i-02", BOB, state="stopped", tags=WARM_TAGS)
    world = snapshot(nodes=[node], instances=[machine, other], idle_since={node.id: NOW - GRACE_S})
    full = run(world, make_policy(max_stopped_instances=1))
    assert only(full, Terminate).instance_id == "i-01"
    assert "max_stopped_instances=1" in only(full, Terminate).reason
    assert only(run(world, make_policy(max_stopped_instances=2)), Stop).instance_id == "i-01"


def test_two_idle_machines_and_room_for_one_more_stopped_one_stop_one_terminates() -> None:
    first = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    second = instance("i-02", BOB, tags=WARM_TAGS)
    nodes = [node_of(first, availability="drain"), node_of(second, availability="drain")]
    idle = {n.id: NOW - GRACE_S for n in nodes}
    result = run(
        snapshot(nodes=nodes, instances=[first, second], idle_since=idle), make_policy(max_stopped_instances=1)
    )
    assert len(actions_of(result, Stop)) == 1
    assert len(actions_of(result, Terminate)) == 1


def test_a_warm_machine_keeps_its_down_node_and_its_volume_and_wakes_the_loop_when_it_expires() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - 10_000}))
    assert result.actions == ()  # no RemoveNode, no Terminate, no volume released
    assert result.deadline == NOW + 1800
    assert node.id not in result.down_since  # its down clock starts when it runs again


def test_a_warm_machine_past_its_warm_until_is_terminated_and_its_node_removed_after() -> None:
    machine = warm_machine(until=NOW)
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine]))
    terminate = only(result, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "warm_expired")
    assert "vol-1" in terminate.reason
    gone = replace(machine, state="shutting-down")
    assert only(run(snapshot(nodes=[node], instances=[gone])), RemoveNode).node_id == node.id


def test_owners_pending_work_starts_the_warm_machine_and_launches_nothing() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert only(result, Start).instance_id == "i-01"
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []
    assert "resuming your machine i-01" in waiting_for(result, "t1").reason


def test_a_stopping_warm_machine_is_waited_for_then_started_once_stopped() -> None:
    machine = warm_machine(state="stopping")
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert actions_of(result, Start) == []
    assert actions_of(result, Launch) == []
    assert "resuming your machine" in waiting_for(result, "t1").reason


def test_a_started_machine_whose_node_is_still_down_is_waited_for_not_replaced() -> None:
    machine = warm_machine(state="pending")
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert actions_of(result, Start) == []
    assert actions_of(result, Launch) == []
    assert result.down_since == {node.id: NOW}  # the start timeout runs from now on


def test_back_in_the_swarm_the_resumed_node_is_activated_for_its_owner() -> None:
    machine = warm_machine(state="running")
    node = node_of(machine, availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert only(result, Activate).node_id == node.id
    assert actions_of(result, Launch) == []


def test_another_owners_work_never_takes_a_warm_machine() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", BOB)]))
    assert actions_of(result, Start) == []
    assert only(result, LaunchBatch).launches[0].owner == BOB


def test_a_warm_machine_whose_start_failed_is_terminated_and_not_started_again() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    world = replace(snapshot(nodes=[node], instances=[machine], tasks=[task]), failed_starts=frozenset({"i-01"}))
    result = run(world)
    assert actions_of(result, Start) == []
    terminate = only(result, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "start_failed")


def test_resuming_counts_against_max_instances() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    busy = instance("i-02", BOB)
    world = snapshot(nodes=[node, node_of(busy)], instances=[machine, busy], tasks=[cached_task("t1", ALICE_N1)])
    assert actions_of(run(world, make_policy(max_instances=1)), Start) == []
    assert only(run(world, make_policy(max_instances=2)), Start).instance_id == "i-01"


def test_a_machine_stopped_by_someone_else_is_not_resumed_and_goes_after_max_start_s() -> None:
    stray = instance("i-01", ALICE_N1, state="stopped", tags=WARM_TAGS)  # no warm-until: not stopped by us
    node = node_of(stray, state="down", availability="drain")
    task = pending_task("t1", ALICE_N1)
    first = run(snapshot(nodes=[node], instances=[stray], tasks=[task]))
    assert actions_of(first, Start) == []
    assert first.stopped_since == {"i-01": NOW}
    late = run(snapshot(nodes=[node], instances=[stray], stopped_since={"i-01": NOW - 600}))
    assert only(late, Terminate).cause == "stopped"


def test_launch_for_an_owner_with_a_warm_tier_carries_it_and_is_not_batched() -> None:
    warm = CachePolicy(warm_ttl_s=WARM_S)
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=warm.to_labels())]))
    assert only(result, Launch).warm_ttl_s == WARM_S
    assert actions_of(result, LaunchBatch) == []


def test_launch_with_the_cache_carries_the_warm_tier_of_the_same_policy() -> None:
    policy = replace(CACHE_ON, warm_ttl_s=WARM_S)
    owned = volume("vol-1", ALICE_N1, state="available")
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=policy)], volumes=[owned]))
    launch = only(result, Launch)
    assert (launch.volume_id, launch.warm_ttl_s) == ("vol-1", WARM_S)


def test_tiers_as_the_status_shows_them() -> None:
    assert tier_of(instance("i-01", ALICE_N1)) == ("hot", None)
    assert tier_of(instance("i-01", ALICE_N1, state="pending")) == ("hot", None)
    assert tier_of(warm_machine()) == ("warm", NOW + 1800)
    assert tier_of(instance("i-01", ALICE_N1, state="stopped")) == ("cold", None)
    assert tier_of(instance("i-01", ALICE_N1, state="shutting-down")) == ("cold", None)
