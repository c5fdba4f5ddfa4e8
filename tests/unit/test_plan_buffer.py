"""The warm buffer: stopped anonymous machines per type and zone, each claimed for good by one owner's first session."""

from __future__ import annotations

from warmswarm_autoscaling.actions import (
    AttachVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    Start,
    Stop,
    TagInstance,
    Terminate,
)
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import (
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    format_timestamp,
    parse_timestamp,
)

from .factories import (
    ALICE_N1,
    BOB,
    NOW,
    ZONE_A,
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

BUFFERED = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
ZONE_B = "us-east-1b"


def buffer_machine(instance_id: str = "i-b1", *, state: str = "stopped", zone: str = ZONE_A) -> Instance:
    return instance(instance_id, state=state, zone=zone, tags={INSTANCE_BUFFER_TAG: "true"})


def claimed(machine: Instance, owner_tags: dict[str, str]) -> Instance:
    """The buffer machine after its claim's CreateTags (as apply writes them)."""
    return instance(
        machine.id,
        state=machine.state,
        zone=machine.availability_zone,
        tags={**machine.tags, **owner_tags},
    )


def test_an_empty_buffer_launches_one_anonymous_machine_per_type_and_zone() -> None:
    result = run(snapshot(), BUFFERED)
    launch = only(result, Launch)
    assert launch.buffer
    assert launch.owner.is_nobody
    assert (launch.instance_type, launch.availability_zone, launch.task_ids) == ("t3.medium", ZONE_A, ())


def test_a_full_buffer_launches_nothing_and_a_cycle_that_launches_for_an_owner_adds_nothing() -> None:
    assert run(snapshot(instances=[buffer_machine()]), BUFFERED).actions == ()
    busy = run(snapshot(tasks=[pending_task("t1", BOB, cpus=1.5, memory_gib=6)]), BUFFERED)
    assert [(launch.owner, launch.buffer) for launch in actions_of(busy, Launch)] == [(BOB, False)]


def test_the_buffer_respects_max_stopped_instances() -> None:
    stopped_warm = instance("i-w", BOB, state="stopped", tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 60)})
    full = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=1)
    assert actions_of(run(snapshot(instances=[stopped_warm]), full), Launch) == []


def test_a_buffer_machine_that_joined_is_stopped_unlabelled_and_takes_no_work() -> None:
    booted = buffer_machine(state="running")
    node = node_of(booted, labelled=False)
    result = run(snapshot(nodes=[node], instances=[booted], tasks=[pending_task("t1")]), BUFFERED)
    stop = only(result, Stop)
    assert (stop.instance_id, stop.warm_until) == ("i-b1", None)
    assert actions_of(result, LabelNode) == []
    assert "buffer" not in waiting_for(result, "t1").reason


def test_a_stopped_buffer_machine_is_kept_past_max_start_s_and_shows_as_buffer() -> None:
    kept = buffer_machine()
    node = node_of(kept, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[kept], stopped_since={"i-b1": NOW - 10_000}), BUFFERED)
    assert result.actions == ()
    assert tier_of(kept) == ("buffer", None)


def test_an_owners_first_session_claims_a_buffer_machine_instead_of_a_launch() -> None:
    kept = buffer_machine()
    node = node_of(kept, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[kept], tasks=[pending_task("t1", BOB)]), BUFFERED)
    tag = only(result, TagInstance)
    assert tag.instance_id == "i-b1"
    assert tag.tags["user_id"] == "bob"
    assert parse_timestamp(tag.tags[INSTANCE_WARM_UNTIL_TAG]) == NOW + BUFFERED.max_start_s
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []
    assert "starting from the buffer" in waiting_for(result, "t1").reason


def test_a_claimed_buffer_machine_is_started_for_its_owner_then_labelled_for_them_when_it_joins() -> None:
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    node = node_of(machine, labelled=False, state="down")
    task = pending_task("t1", BOB)
    started = run(snapshot(nodes=[node], instances=[machine], tasks=[task]), BUFFERED)
    assert only(started, Start).instance_id == "i-b1"
    assert [launch.buffer for launch in actions_of(started, Launch)] == [True]  # only the buffer's refill
    running = claimed(buffer_machine(state="running"), dict(machine.tags))
    joined = run(snapshot(nodes=[node_of(running, labelled=False)], instances=[running], tasks=[task]), BUFFERED)
    label = only(joined, LabelNode)
    assert label.labels["user_id"] == "bob"
    assert label.activate


def test_a_started_claimed_machine_launched_long_ago_is_waited_for_not_late_nor_replaced() -> None:
    # Its launch was long before max_start_s ago (it waited in the buffer); its node is down until it rejoins.
    old = {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)}
    machine = instance("i-b1", state="running", launched_at=NOW - 7200, tags={INSTANCE_BUFFER_TAG: "true", **old})
    node = node_of(machine, labelled=False, state="down")
    task = pending_task("t1", BOB)
    first = run(snapshot(nodes=[node], instances=[machine], tasks=[task]), BUFFERED)
    assert actions_of(first, Terminate) == []
    assert [launch.buffer for launch in actions_of(first, Launch)] == [True]  # the refill only, nothing for bob
    assert first.down_since == {node.id: NOW}
    # Down for max_start_s: it goes as any machine that does not come back, and the work launches anew.
    late = run(snapshot(nodes=[node], instances=[machine], tasks=[task], down_since={node.id: NOW - 600}), BUFFERED)
    assert only(late, Terminate).cause == "node_down"


def test_a_claimed_machine_never_returns_to_the_buffer_nor_goes_to_another_owner() -> None:
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE_N1)]), BUFFERED)
    assert actions_of(result, TagInstance) == []
    assert actions_of(result, Start) == []
    assert tier_of(machine)[0] == "warm"
    # The buffer counts it no longer: a new buffer machine is launched beside it (the owner's launch first).
    assert any(launch.owner == ALICE_N1 for launch in actions_of(result, Launch))


def test_a_cache_owner_claims_only_a_machine_in_its_volumes_zone_and_names_the_volume() -> None:
    in_a, in_b = buffer_machine("i-ba"), buffer_machine("i-bb", zone=ZONE_B)
    policy = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A, ZONE_B))
    owned = volume("vol-1", ALICE_N1, zone=ZONE_B, state="available")
    nodes = [node_of(in_a, labelled=False, state="down"), node_of(in_b, labelled=False, state="down")]
    world = snapshot(nodes=nodes, instances=[in_a, in_b], tasks=[cached_task("t1", ALICE_N1)], volumes=[owned])
    result = run(world, policy)
    tag = only(result, TagInstance)
    assert tag.instance_id == "i-bb"
    assert tag.tags[INSTANCE_VOLUME_TAG] == "vol-1"
    attach = only(result, AttachVolume)  # to the stopped machine, so that its boot finds the device
    assert (attach.volume_id, attach.instance_id) == ("vol-1", "i-bb")


def test_a_cache_owner_without_a_volume_creates_it_before_any_claim() -> None:
    kept = buffer_machine()
    world = snapshot(nodes=[node_of(kept, labelled=False, state="down")], instances=[kept], tasks=[cached_task("t1")])
    result = run(world, BUFFERED)
    assert actions_of(result, TagInstance) == []
    assert "creating its cache volume" in waiting_for(result, "t1").reason


def test_work_larger_than_the_buffered_type_launches_cold() -> None:
    kept = buffer_machine()
    large = pending_task("t1", BOB, cpus=1.5, memory_gib=6)
    result = run(
        snapshot(nodes=[node_of(kept, labelled=False, state="down")], instances=[kept], tasks=[large]), BUFFERED
    )
    assert actions_of(result, TagInstance) == []
    assert only(result, LaunchBatch).launches[0].owner == BOB


def test_the_refill_after_a_claim_is_a_new_call_not_a_replay_of_the_claimed_machines_launch() -> None:
    first = only(run(snapshot(), BUFFERED), Launch)
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    refill = [launch for launch in actions_of(run(snapshot(instances=[machine]), BUFFERED), Launch) if launch.buffer]
    assert len(refill) == 1
    assert refill[0].client_token != first.client_token


def test_surplus_buffer_machines_are_terminated_when_the_buffer_shrinks() -> None:
    kept = buffer_machine()
    result = run(snapshot(instances=[kept]), make_policy(warm_buffer={}))
    terminate = only(result, Terminate)
    assert terminate.instance_id == "i-b1"
    assert "never ran anyone's work" in terminate.reason
