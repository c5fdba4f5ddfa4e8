"""The hot buffer (plan/buffer.py): running, joined, drained machines nobody owns, claimed by a session that then gets
its volume attached while the machine runs and its work once the node says the volume is mounted."""

from __future__ import annotations

import dataclasses
from typing import Final

from warmswarm_autoscaling.actions import ClaimBufferMachine, LabelNode, Launch, LaunchBatch, Start, Stop, Terminate
from warmswarm_autoscaling.snapshot import Carried, Instance, Node, Repeated
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    INSTANCE_VOLUME_TAG,
    format_timestamp,
)

from .factories import (
    ALICE_N1,
    BOB,
    NOBODY,
    NOW,
    ZONE_A,
    actions_of,
    attachment,
    buffer_machine,
    cached_task,
    instance,
    labels_of,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    volume,
    waiting_for,
)

HOT: Final = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), hot_attach_s=120.0)
HOT_TAGS: Final = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}


def hot_machine(instance_id: str = "i-h1", *, state: str = "running", instance_type: str = "t3.medium") -> Instance:
    """A machine launched for the hot buffer, nobody's."""
    return instance(instance_id, state=state, instance_type=instance_type, tags=HOT_TAGS)


def joined(machine: Instance, **node: object) -> Node:
    """Its node as it joined: ready, drained, unlabelled."""
    return node_of(machine, labelled=False, **node)  # type: ignore[arg-type]


def hot_claimed(*, claimed_at: float = NOW - 5, volume_id: str | None = "vol-1") -> Instance:
    """The hot machine after Alice's claim's CreateTags (as apply writes them)."""
    tags = {**HOT_TAGS, **ALICE_N1.labels(), INSTANCE_CLAIMED_AT_TAG: format_timestamp(claimed_at)}
    if volume_id is not None:
        tags[INSTANCE_VOLUME_TAG] = volume_id
    return instance("i-h1", tags=tags)


def test_an_empty_hot_buffer_launches_an_anonymous_machine_that_pulls_the_images_and_is_never_stopped() -> None:
    launch = only(run(snapshot(), HOT), Launch)
    assert (launch.purpose, launch.owner, launch.instance_type, launch.task_ids) == (
        "hot_buffer",
        NOBODY,
        "t3.medium",
        (),
    )
    assert launch.reason.startswith("the hot buffer keeps 1 running t3.medium in eu-west-1a and has 0")
    machine = hot_machine()
    kept = run(snapshot(nodes=[joined(machine)], instances=[machine]), HOT)
    assert kept.actions == ()  # joined: it waits, running, for a claim (a warm buffer's machine would be stopped)


def test_a_hot_buffer_machine_counts_against_max_instances_not_the_stopped_budget() -> None:
    full = make_policy(hot_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,), max_instances=1)
    assert [a.purpose for a in actions_of(run(snapshot(), full), Launch)] == ["hot_buffer"]
    no_stopped = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=0)
    assert [a.purpose for a in actions_of(run(snapshot(), no_stopped), Launch)] == ["hot_buffer"]


def test_a_first_session_claims_a_hot_machine_before_a_warm_one_and_nothing_is_started() -> None:
    hot, warm = hot_machine(), buffer_machine("i-b1")
    policy = make_policy(hot_buffer={"t3.medium": 1}, warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    nodes = [joined(hot), joined(warm, state="down")]
    owned = volume("vol-1", ALICE_N1, zone=ZONE_A)
    result = run(snapshot(nodes=nodes, instances=[hot, warm], volumes=[owned], tasks=[cached_task("t1")]), policy)
    claim = only(result, ClaimBufferMachine)
    assert (claim.instance_id, claim.hot, claim.volume_id, claim.warm_until, claim.claimed_at) == (
        "i-h1",
        True,
        "vol-1",
        None,
        NOW,
    )
    assert claim.reason == (
        "1 pending task(s) of user_id=alice,project_id=p1,node_id=n1 claim hot buffer machine i-h1 (t3.medium in"
        " eu-west-1a), with cache volume vol-1: it is theirs from now on, attached while it runs; its node takes"
        " their work once it says the volume is mounted"
    )
    assert actions_of(result, Start) == []
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []
    assert waiting_for(result, "t1").reason.startswith("starting hot: machine i-h1 (t3.medium in eu-west-1a)")


def test_a_hot_machine_is_offered_only_joined_drained_unlabelled_and_without_an_attachment() -> None:
    machine = hot_machine()
    task = pending_task("t1", BOB)
    not_joined = run(snapshot(instances=[machine], tasks=[task]), HOT)
    active = run(snapshot(nodes=[joined(machine, availability="active")], instances=[machine], tasks=[task]), HOT)
    holding = volume("vol-9", ALICE_N1, attached_to=[attachment("i-h1")])
    attached = run(snapshot(nodes=[joined(machine)], instances=[machine], volumes=[holding], tasks=[task]), HOT)
    for result in (not_joined, active, attached):
        assert actions_of(result, ClaimBufferMachine) == []
        assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]


def test_a_claimed_hot_machine_takes_no_work_nor_labels_until_its_node_says_the_volume_is_mounted() -> None:
    machine = hot_claimed()
    owned = volume("vol-1", ALICE_N1, attached_to=[attachment("i-h1", attached_at=NOW - 4)])
    waiting = run(
        snapshot(
            nodes=[joined(machine, mounted=False)], instances=[machine], volumes=[owned], tasks=[cached_task("t1")]
        ),
        HOT,
    )
    assert actions_of(waiting, LabelNode) == []
    assert actions_of(waiting, Terminate) == []
    assert [launch.owner for launch in actions_of(waiting, Launch)] == [NOBODY]  # the refill only
    assert "attached to it while it runs" in waiting_for(waiting, "t1").reason
    # The node says the volume is mounted (its engine label): labelled for Alice and activated in one update.
    mounted = run(
        snapshot(nodes=[joined(machine)], instances=[machine], volumes=[owned], tasks=[cached_task("t1")]), HOT
    )
    label = only(mounted, LabelNode)
    assert labels_of(label)["user_id"] == "alice"
    assert actions_of(mounted, Terminate) == []


def test_a_claimed_hot_machine_that_never_says_mounted_is_terminated_at_hot_attach_s_and_the_volume_kept() -> None:
    machine = hot_claimed(claimed_at=NOW - HOT.hot_attach_s)
    owned = volume("vol-1", ALICE_N1, attached_to=[attachment("i-h1")])
    result = run(
        snapshot(
            nodes=[joined(machine, mounted=False)], instances=[machine], volumes=[owned], tasks=[cached_task("t1")]
        ),
        HOT,
    )
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-h1", "volume_missing")]
    assert actions_of(result, LabelNode) == []


def test_a_cache_off_session_on_a_hot_claim_is_labelled_at_once() -> None:
    machine = instance("i-h1", BOB, tags={**HOT_TAGS, INSTANCE_CLAIMED_AT_TAG: format_timestamp(NOW - 5)})
    result = run(snapshot(nodes=[joined(machine)], instances=[machine], tasks=[pending_task("t1", BOB)]), HOT)
    assert labels_of(only(result, LabelNode))["user_id"] == "bob"


def test_an_unclaimed_hot_machine_that_failed_its_mount_is_terminated_once_not_also_as_surplus() -> None:
    """A hot machine nobody claimed that names a volume its node never mounted (a hand edit, a half claim) goes as
    volume_missing; it is no claimable machine, so the surplus does not terminate it a second time (the totality
    property found the double terminate on main)."""
    tags = {**HOT_TAGS, INSTANCE_VOLUME_TAG: "vol-0", INSTANCE_CLAIMED_AT_TAG: format_timestamp(NOW - 30)}
    odd = instance("i-1", tags=tags, volume_id="vol-0", launched_at=NOW)
    result = run(snapshot(nodes=[joined(odd, mounted=False)], instances=[odd]), make_policy())
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-1", "volume_missing")]


def test_a_hot_buffer_beyond_its_settings_terminates_its_joined_surplus_and_stops_nothing() -> None:
    machines = [hot_machine("i-h1"), hot_machine("i-h2")]
    result = run(snapshot(nodes=[joined(m) for m in machines], instances=machines), HOT)
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-h2", "buffer_surplus")]
    assert actions_of(result, Stop) == []


def test_a_volume_that_backs_off_claims_no_hot_machine_either() -> None:
    """Issue 32: the back-off holds on every path to a machine; a claim would attach the volume to one more machine
    whose boot does not find it."""
    machine = hot_machine()
    kept = volume("vol-1", ALICE_N1, zone=ZONE_A)
    missing = Repeated(frozenset({"i-01"}), frozenset({("t3.medium", ZONE_A)}), NOW - 10, NOW + 50)
    world = snapshot(nodes=[joined(machine)], instances=[machine], volumes=[kept], tasks=[cached_task("t1")])

    result = run(dataclasses.replace(world, carried=Carried(volume_backoffs={"vol-1": missing})), HOT)

    assert actions_of(result, ClaimBufferMachine) == []
    assert waiting_for(result, "t1").until == NOW + 50
    assert actions_of(run(world, HOT), ClaimBufferMachine) != []  # without the back-off it claims
