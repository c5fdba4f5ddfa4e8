"""EBS cache volumes (plan/volumes.py): which volume a launch carries and so where it goes, why an owner waits
for one, attaching and unsticking, release, the janitor, odd tags, a clock ahead of AWS's, an operator's
early expiry. Each is checked through plan() and, for its rules' reasons, called directly."""

from __future__ import annotations

import dataclasses

import pytest
from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    ExpireVolume,
    LabelNode,
    Launch,
    ReleaseVolume,
    RenewVolume,
    SetVolumeTtl,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.clock import DeadlineClock
from warmswarm_autoscaling.plan.volumes import (
    CACHE_DEVICE,
    Refused,
    choose_volume,
    deletable,
    expire_now,
    volume_actions,
)
from warmswarm_autoscaling.snapshot import Instance, Snapshot, Volume
from warmswarm_models import (
    NODE_LABEL_VOLUME_ID,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_TTL_S,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_PINNED_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    Owner,
    format_timestamp,
)
from warmswarm_models.cache import DEFAULT_CACHE_TTL_S, MAX_CACHE_TTL_S

from .factories import (
    ALICE_N1,
    ALICE_N2,
    BOB,
    BOB_N1,
    CACHE_ON,
    CLUSTER,
    INSTANCE_TYPES,
    NOW,
    VOL,
    ZONE_A,
    ZONE_B,
    VolumeTagging,
    actions_of,
    attachment,
    cached_task,
    instance,
    instance_from_launch,
    labels_of,
    make_policy,
    next_snapshot,
    node_of,
    one_of,
    only,
    pending_task,
    removed_tags,
    run,
    running_task,
    set_tags,
    snapshot,
    volume,
    volume_from_create,
    volume_tagging,
    waiting_for,
)

OTHER_VOL = "vol-0b2"
HOUR = 3600.0

# NOW as format_timestamp writes it, and one hour (CACHE_ON's TTL) later.
NOW_TEXT = "2023-11-14T22:13:20Z"
NOW_PLUS_HOUR_TEXT = "2023-11-14T23:13:20Z"

_VOLUME_ACTIONS = (CreateVolume, AttachVolume, DetachVolume, ReleaseVolume, RenewVolume, SetVolumeTtl, DeleteVolume)


def _volume_actions(result: Plan) -> list[object]:
    return [a for a in result.actions if isinstance(a, _VOLUME_ACTIONS)]


def _deleted(result: Plan) -> set[str]:
    return {a.volume_id for a in actions_of(result, DeleteVolume)}


def _expiry_cleared(result: Plan, volume_id: str) -> bool:
    return any(
        t.volume_id == volume_id
        and {VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG} <= set(removed_tags(t))
        and VOLUME_EXPIRES_AT_TAG not in set_tags(t)
        for t in volume_tagging(result)
    )


def _no_capacity_in(zone: str) -> dict[tuple[str, str], float]:
    return {(t, zone): NOW + 300 for t in INSTANCE_TYPES}


def volumes_plan(instances: list[Instance], volumes: list[Volume], **policy: float) -> Plan:
    return run(snapshot(instances=instances, volumes=volumes), make_policy(**policy))


POLICY = make_policy()


def actions_for(v: Volume, *, clock_untrusted: bool = False) -> list[Action]:
    return volume_actions([v], {}, set(), {}, POLICY, DeadlineClock(NOW, NOW), clock_untrusted=clock_untrusted)


# -- which volume a launch carries, and so where it goes ---------------------------------------------------


def test_cached_task_launches_in_the_zone_of_its_owners_volume_and_names_it() -> None:
    # Zone A is first in the policy and as empty as B: without the volume the launch would go there.
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol]))
    launch = only(result, Launch)
    assert launch.availability_zone == ZONE_B
    assert launch.volume_id == VOL
    assert launch.owner == ALICE_N1
    assert launch.task_ids == ("t1",)
    assert VOL in launch.reason
    assert actions_of(result, CreateVolume) == []
    assert waiting_for(result, "t1").starting


def test_same_task_without_the_cache_launches_in_the_emptier_zone() -> None:
    """The control for the test above: the zone really is the volume's doing."""
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE_N1)], volumes=[vol])), Launch)
    assert launch.availability_zone == ZONE_A
    assert launch.volume_id is None


def test_cached_task_follows_its_volume_even_when_a_cheaper_offering_is_free_elsewhere() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    # Zone A holds three of our machines; zone B none, but the cheapest type is out of capacity there.
    others = [instance(f"i-0{n}", BOB_N1, zone=ZONE_A) for n in range(3)]
    snap = snapshot(
        tasks=[cached_task("t1", ALICE_N1)],
        instances=others,
        volumes=[vol],
        unavailable={("t3.medium", ZONE_B): NOW + 300},
    )
    launch = only(run(snap), Launch)
    assert (launch.instance_type, launch.availability_zone, launch.volume_id) == ("m5.large", ZONE_B, VOL)


def test_cached_task_goes_to_the_volumes_zone_even_when_that_zone_is_busier() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_A)
    others = [instance(f"i-0{n}", BOB_N1, zone=ZONE_A) for n in range(3)]
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=others, volumes=[vol])), Launch)
    assert (launch.availability_zone, launch.volume_id) == (ZONE_A, VOL)


def test_cached_tasks_of_one_owner_share_the_machine_that_carries_the_volume() -> None:
    tasks = [cached_task("t1", ALICE_N1, cpus=0.5), cached_task("t2", ALICE_N1, cpus=0.5)]
    result = run(snapshot(tasks=tasks, volumes=[volume(VOL, ALICE_N1)]))
    launch = only(result, Launch)
    assert launch.task_ids == ("t1", "t2")
    assert launch.volume_id == VOL


def test_cached_tasks_that_do_not_fit_one_machine_never_get_two_machines_with_the_volume() -> None:
    # Each needs 1.5 CPU: the cheapest fit for one (t3.medium, 1.9 after overhead) cannot take both,
    # and a second machine cannot carry the same volume.
    tasks = [cached_task("t1", ALICE_N1, cpus=1.5), cached_task("t2", ALICE_N1, cpus=1.5)]
    result = run(snapshot(tasks=tasks, volumes=[volume(VOL, ALICE_N1)]))
    launch = only(result, Launch)
    assert launch.volume_id == VOL
    assert len(launch.task_ids) == 1
    assert actions_of(result, CreateVolume) == []
    left = next(w for w in result.waiting if w.task_id not in launch.task_ids)
    assert not left.unschedulable


def test_available_volume_is_preferred_to_one_still_creating() -> None:
    vols = [
        volume(OTHER_VOL, ALICE_N1, zone=ZONE_A, state="creating", created_at=NOW - 10),
        volume(VOL, ALICE_N1, zone=ZONE_B, state="available", created_at=NOW - 86_400),
    ]
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=vols)), Launch)
    assert (launch.volume_id, launch.availability_zone) == (VOL, ZONE_B)


def test_of_two_available_volumes_the_newest_is_used() -> None:
    vols = [
        volume(OTHER_VOL, ALICE_N1, zone=ZONE_A, created_at=NOW - 7 * 86_400),
        volume(VOL, ALICE_N1, zone=ZONE_B, created_at=NOW - 86_400),
    ]
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=vols)), Launch)
    assert (launch.volume_id, launch.availability_zone) == (VOL, ZONE_B)


def test_machine_that_never_joined_is_replaced_in_its_volumes_zone_with_the_same_volume() -> None:
    late = instance("i-late", ALICE_N1, zone=ZONE_B, volume_id=VOL, launched_at=NOW - 700)  # > max_start_s
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=[late], volumes=[volume(VOL, zone=ZONE_B)]))
    assert only(result, Terminate).instance_id == "i-late"
    launch = only(result, Launch)
    assert (launch.volume_id, launch.availability_zone) == (VOL, ZONE_B)
    # Its offering is avoided: the next type in the same zone, not the same type elsewhere.
    assert launch.instance_type != late.instance_type
    assert actions_of(result, CreateVolume) == []
    assert _deleted(result) == set()


@pytest.mark.parametrize("availability", ["active", "drain"])
def test_owner_returning_to_their_idle_node_reuses_it_with_the_volume_still_attached(availability: str) -> None:
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL, launched_at=NOW - 7200)
    node = node_of(booted, availability=availability)
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, state="in-use", attached_to=[attachment("i-0a1")])
    snap = snapshot(
        nodes=[node],
        instances=[booted],
        volumes=[vol],
        tasks=[cached_task("t1", ALICE_N1)],
        idle_since={node.id: NOW - 3600},  # long past idle_grace_s
    )
    result = run(snap)
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert actions_of(result, Drain) == []
    assert actions_of(result, Terminate) == []
    assert _volume_actions(result) == []
    assert node.hostname in waiting_for(result, "t1").reason
    assert [a.node_id for a in actions_of(result, Activate)] == ([node.id] if availability == "drain" else [])


def test_owner_returning_after_their_node_was_terminated_gets_the_volume_on_a_new_machine() -> None:
    """The control: once the node is gone the owner does launch, with the same volume."""
    gone = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL, state="shutting-down")
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, released_at=NOW - 60, expires_at=NOW + 3540)
    result = run(snapshot(instances=[gone], volumes=[vol], tasks=[cached_task("t1", ALICE_N1)]))
    assert only(result, Launch).volume_id == VOL


def test_a_volume_in_a_zone_that_is_not_configured_makes_only_its_owner_wait() -> None:
    elsewhere = volume("vol-1", ALICE_N1, zone="eu-west-1c")
    alice = cached_task("t-alice", ALICE_N1)
    bob = pending_task("t-bob", BOB)

    result = run(snapshot(tasks=[alice, bob], volumes=[elsewhere]))

    reason = waiting_for(result, "t-alice").reason
    assert "eu-west-1c" in reason
    assert "AUTOSCALING_AVAILABILITY_ZONES" in reason
    assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]


# -- one volume per owner, and only for cache work ---------------------------------------------------------


@pytest.mark.parametrize(
    "existing",
    [
        volume(VOL, ALICE_N1, state="creating"),
        volume(VOL, ALICE_N1, state="available"),
        volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-gone", state="detaching")]),
        volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-gone", state="attached")]),
    ],
    ids=["creating", "available", "detaching", "attached-to-a-gone-instance"],
)
def test_owner_who_has_a_volume_never_gets_a_second(existing: Volume) -> None:
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[existing]))
    assert actions_of(result, CreateVolume) == []


def test_owner_whose_volume_is_reserved_by_a_machine_on_its_way_gets_no_second_volume() -> None:
    booting = instance("i-0a1", ALICE_N1, state="pending", volume_id=VOL)
    tasks = [cached_task("t1", ALICE_N1), cached_task("t2", ALICE_N1, cpus=1.5)]  # t2 does not fit next to t1
    result = run(snapshot(tasks=tasks, instances=[booting], volumes=[volume(VOL, ALICE_N1)]))
    assert actions_of(result, CreateVolume) == []
    assert actions_of(result, Launch) == []
    assert VOL in waiting_for(result, "t1").reason


@pytest.mark.parametrize("state", ["error", "deleting"])
def test_volume_that_is_lost_does_not_stop_the_owner_getting_a_new_one(state: str) -> None:
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[volume(VOL, ALICE_N1, state=state)]))
    create = only(result, CreateVolume)
    assert create.owner == ALICE_N1
    # The machine for it goes in the same plan, with the new volume (never the lost one).
    launch = only(result, Launch)
    assert launch.volume_id is None
    assert launch.volume_token == create.client_token


def test_whole_return_from_no_volume_to_a_labelled_node_creates_one_volume_and_launches_once() -> None:
    task = cached_task("t1", ALICE_N1)
    cycles = [run(snapshot(tasks=[task]))]
    create = only(cycles[0], CreateVolume)
    # The launch in the same plan: apply creates the volume first and gives the launch its id.
    launch = dataclasses.replace(only(cycles[0], Launch), volume_id=VOL)
    assert only(cycles[0], Launch).volume_token == create.client_token

    made = volume_from_create(create, VOL, created_at=NOW + 1)

    def vol(state: str, *attached_to: str) -> Volume:
        return dataclasses.replace(made, state=state, attachments=tuple(attachment(i) for i in attached_to))

    pending = instance_from_launch(launch, "i-0a1", launched_at=NOW + 1, state="pending")
    running = instance_from_launch(launch, "i-0a1", launched_at=NOW + 1, state="running")
    worlds = [
        ([], pending, vol("creating")),
        ([], pending, vol("creating")),
        ([], pending, vol("available")),
        ([], running, vol("available")),  # attach here
        ([], running, vol("in-use", "i-0a1")),
        ([node_of(running, labelled=False)], running, vol("in-use", "i-0a1")),  # label here
        ([node_of(running, labelled=True, availability="drain")], running, vol("in-use", "i-0a1")),
    ]
    for step, (nodes, inst, v) in enumerate(worlds, start=2):
        cycles.append(
            run(
                next_snapshot(cycles[-1], now=NOW + 30 * step, nodes=nodes, tasks=[task], instances=[inst], volumes=[v])
            )
        )
    assert sum(len(actions_of(c, CreateVolume)) for c in cycles) == 1
    assert sum(len(actions_of(c, Launch)) for c in cycles) == 1
    attaches = [(i, a) for i, c in enumerate(cycles) for a in actions_of(c, AttachVolume)]
    assert [(i, a.volume_id, a.instance_id) for i, a in attaches] == [(4, VOL, "i-0a1")]
    assert labels_of(only(cycles[6], LabelNode))[NODE_LABEL_VOLUME_ID] == VOL
    assert only(cycles[7], Activate).node_id == "node-i-0a1"
    # Nothing released, expired or deleted along the way.
    assert all(not volume_tagging(c) and not actions_of(c, DeleteVolume) for c in cycles)


@pytest.mark.parametrize("other", [BOB_N1, ALICE_N2, Owner(user_id="alice", project_id="p2", node_id="n1")], ids=str)
def test_volume_of_another_owner_is_never_used(other: Owner) -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    result = run(snapshot(tasks=[cached_task("t1", other)], volumes=[vol]))
    assert all(a.volume_id != VOL for a in actions_of(result, Launch))
    assert only(result, CreateVolume).owner == other
    assert VOL not in {a.volume_id for a in actions_of(result, AttachVolume)}


@pytest.mark.parametrize(
    "labels",
    [
        {},
        CachePolicy(enabled=False).to_labels(),
        {SERVICE_LABEL_CACHE_ENABLED: "false", SERVICE_LABEL_CACHE_TTL_S: "9"},
    ],
    ids=["no-labels", "disabled", "disabled-with-terms"],
)
def test_cache_off_task_never_gets_a_volume(labels: dict[str, str]) -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=labels)], volumes=[vol]))
    launch = only(result, Launch)
    assert launch.volume_id is None
    assert launch.availability_zone == ZONE_A
    assert actions_of(result, CreateVolume) == []


def test_cache_off_task_never_creates_a_volume() -> None:
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=CachePolicy().to_labels())]))
    assert only(result, Launch).volume_id is None
    assert actions_of(result, CreateVolume) == []


def test_malformed_cache_labels_do_not_touch_the_owners_volume() -> None:
    labels = {**CACHE_ON.to_labels(), SERVICE_LABEL_CACHE_TTL_S: "abc"}
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3000)
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=labels)], volumes=[vol]))
    assert result.actions == ()


# -- why an owner waits for their volume -------------------------------------------------------------------


def test_a_volume_in_use_by_a_live_machine_makes_its_owner_wait_for_it() -> None:
    held = volume("vol-a", state="in-use", attached_to=[attachment("i-live")])
    live = {"i-live": instance("i-live", ALICE_N1)}

    choice = choose_volume(ALICE_N1, [held], live, set(), {})

    assert choice.volume is None
    assert not choice.create
    assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is still attached to i-live"


def test_a_volume_still_on_a_machine_that_is_gone_is_waited_for_as_detaching() -> None:
    held = volume("vol-a", state="in-use", attached_to=[attachment("i-gone")])

    choice = choose_volume(ALICE_N1, [held], {}, set(), {})

    assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is still detaching from i-gone"


def test_a_volume_in_a_passing_state_is_waited_for_by_name() -> None:
    for state in ("in-use", "modifying"):
        choice = choose_volume(ALICE_N1, [volume("vol-a", state=state)], {}, set(), {})
        assert choice.wait_reason == f"cache volume vol-a of {ALICE_N1} is {state}"
        assert not choice.create


def test_only_a_volume_that_is_gone_for_good_is_replaced() -> None:
    for state in ("deleting", "deleted", "error"):
        choice = choose_volume(ALICE_N1, [volume("vol-a", state=state)], {}, set(), {})
        assert choice.create, state
        assert choice.wait_reason == ""


def test_a_volume_reserved_by_a_machine_on_its_way_is_waited_for() -> None:
    choice = choose_volume(ALICE_N1, [volume("vol-a")], {}, {"vol-a"}, {})

    assert choice.wait_reason == "cache volume vol-a is reserved for a machine on its way"


@pytest.mark.parametrize("machine", [None, "shutting-down", "terminated"])
def test_volume_still_detaching_from_a_gone_machine_makes_its_owner_wait(machine: str | None) -> None:
    instances = [] if machine is None else [instance("i-old", ALICE_N1, state=machine, volume_id=VOL)]
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-old", state="detaching")])
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=instances, volumes=[vol]))
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert _deleted(result) == set()
    waiting = waiting_for(result, "t1")
    assert not waiting.unschedulable
    assert VOL in waiting.reason
    assert "detaching" in waiting.reason
    assert "i-old" in waiting.reason


def test_owner_gets_the_volume_once_it_has_detached() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, state="available")
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol])), Launch)
    assert launch.volume_id == VOL


def test_no_capacity_in_the_volumes_zone_waits_instead_of_launching_elsewhere() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol], unavailable=_no_capacity_in(ZONE_B)))
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert _deleted(result) == set()
    waiting = waiting_for(result, "t1")
    assert not waiting.unschedulable
    assert ZONE_B in waiting.reason
    assert VOL in waiting.reason


def test_capacity_back_in_the_volumes_zone_launches_there() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    unavailable = {k: NOW - 1 for k in _no_capacity_in(ZONE_B)}  # the backoff has passed
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol], unavailable=unavailable)), Launch)
    assert (launch.availability_zone, launch.volume_id) == (ZONE_B, VOL)


# -- attaching what a machine waits for --------------------------------------------------------------------


def _launched_for_volume() -> tuple[Launch, Volume]:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol])), Launch)
    return launch, vol


def test_machine_launched_for_a_volume_gets_it_attached_once_running() -> None:
    launch, vol = _launched_for_volume()
    booted = instance_from_launch(launch, "i-0a1", launched_at=NOW + 1, state="running")
    result = run(snapshot(now=NOW + 60, tasks=[cached_task("t1", ALICE_N1)], instances=[booted], volumes=[vol]))
    attach = only(result, AttachVolume)
    assert (attach.volume_id, attach.instance_id, attach.device) == (VOL, "i-0a1", "/dev/sdf")
    assert CACHE_DEVICE == "/dev/sdf"
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []


def test_machine_launched_for_a_volume_is_not_attached_while_pending() -> None:
    launch, vol = _launched_for_volume()
    booting = instance_from_launch(launch, "i-0a1", launched_at=NOW + 1, state="pending")
    result = run(snapshot(now=NOW + 10, tasks=[cached_task("t1", ALICE_N1)], instances=[booting], volumes=[vol]))
    assert actions_of(result, AttachVolume) == []
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert "i-0a1" in waiting_for(result, "t1").reason


@pytest.mark.parametrize("state", ["attaching", "attached"])
def test_volume_already_attached_to_its_machine_is_not_attached_again(state: str) -> None:
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL)
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, state="in-use", attached_to=[attachment("i-0a1", state=state)])
    result = run(snapshot(instances=[booted], volumes=[vol]))
    assert actions_of(result, AttachVolume) == []


def test_running_machine_that_does_not_name_the_volume_does_not_get_it() -> None:
    # Same owner, but launched without the cache (say, before the cache was turned on).
    plain = instance("i-0a1", ALICE_N1, zone=ZONE_A)
    result = run(snapshot(instances=[plain], volumes=[volume(VOL, ALICE_N1, zone=ZONE_A)]))
    assert actions_of(result, AttachVolume) == []


def test_machine_whose_volume_is_still_creating_gets_it_once_available() -> None:
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL)
    creating = run(snapshot(instances=[booted], volumes=[volume(VOL, ALICE_N1, zone=ZONE_B, state="creating")]))
    assert actions_of(creating, AttachVolume) == []
    ready = run(snapshot(instances=[booted], volumes=[volume(VOL, ALICE_N1, zone=ZONE_B, state="available")]))
    assert only(ready, AttachVolume).instance_id == "i-0a1"


def test_volume_is_never_attached_across_zones() -> None:
    # A machine somehow in another zone than its volume: AWS would refuse the attach.
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_A, volume_id=VOL)
    result = run(snapshot(instances=[booted], volumes=[volume(VOL, ALICE_N1, zone=ZONE_B)]))
    assert actions_of(result, AttachVolume) == []


def test_machine_on_its_way_with_another_owners_volume_is_not_attached_to_it() -> None:
    # Same user, other node: its machine names a volume that is alice/n1's (a tag edited by hand).
    intruder = instance("i-0a1", ALICE_N2, zone=ZONE_A, volume_id=VOL)
    result = run(snapshot(instances=[intruder], volumes=[volume(VOL, ALICE_N1, zone=ZONE_A)]))
    assert actions_of(result, AttachVolume) == [], "a machine tagged for another owner must not get the volume"


def test_a_running_machine_gets_its_owners_volume_attached_and_the_reason_says_so() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")

    result = volumes_plan([machine], [volume("vol-a")])

    assert actions_of(result, AttachVolume) == [
        AttachVolume("vol-a", "i-1", "/dev/sdf", "i-1 runs and waits for its owner's cache volume vol-a")
    ]


def test_a_volume_is_attached_only_when_everything_about_it_is_right() -> None:
    """Each case breaks one condition of an attach: attaching then would fail in AWS, or give one owner's data
    to another's machine."""
    cases = [
        ("machine pending", instance("i-1", ALICE_N1, state="pending", volume_id="vol-a"), volume("vol-a")),
        ("volume creating", instance("i-1", ALICE_N1, volume_id="vol-a"), volume("vol-a", state="creating")),
        ("other zone", instance("i-1", ALICE_N1, zone=ZONE_B, volume_id="vol-a"), volume("vol-a")),
        ("other owner", instance("i-1", BOB_N1, volume_id="vol-a"), volume("vol-a")),
        (
            "an attachment still listed",
            instance("i-1", ALICE_N1, volume_id="vol-a"),
            volume("vol-a", attached_to=[attachment("i-0", state="detaching")]),
        ),
        ("no such volume", instance("i-1", ALICE_N1, volume_id="vol-x"), volume("vol-a")),
    ]
    for name, machine, vol in cases:
        assert actions_of(volumes_plan([machine], [vol]), AttachVolume) == [], name

    detached = volume("vol-a", attached_to=[attachment("i-0", state="detached")])
    assert len(actions_of(volumes_plan([instance("i-1", ALICE_N1, volume_id="vol-a")], [detached]), AttachVolume)) == 1


def test_of_two_machines_naming_one_volume_the_first_launched_gets_it() -> None:
    older = instance("i-2", ALICE_N1, launched_at=NOW - 300, volume_id="vol-a")
    newer = instance("i-1", ALICE_N1, launched_at=NOW - 60, volume_id="vol-a")
    same_time = instance("i-0", ALICE_N1, launched_at=NOW - 300, volume_id="vol-a")

    assert [a.instance_id for a in actions_of(volumes_plan([newer, older], [volume("vol-a")]), AttachVolume)] == ["i-2"]
    # Launched at the same second: the lower id, so every replica decides alike.
    tied = volumes_plan([older, same_time], [volume("vol-a")])
    assert [a.instance_id for a in actions_of(tied, AttachVolume)] == ["i-0"]


def test_a_machine_naming_a_volume_that_is_gone_does_not_keep_the_others_from_theirs() -> None:
    lost = instance("i-1", ALICE_N1, launched_at=NOW - 300, volume_id="vol-gone")
    waiting = instance("i-2", BOB_N1, launched_at=NOW - 60, volume_id="vol-b")
    taken = instance("i-3", BOB_N1, launched_at=NOW - 30, volume_id="vol-b")  # a duplicate: the first one wins
    later = instance("i-4", ALICE_N1, launched_at=NOW - 10, volume_id="vol-a")

    result = volumes_plan([lost, waiting, taken, later], [volume("vol-b", BOB_N1), volume("vol-a")])

    assert [(a.volume_id, a.instance_id) for a in actions_of(result, AttachVolume)] == [
        ("vol-b", "i-2"),
        ("vol-a", "i-4"),
    ]


def test_one_cycle_never_attaches_one_volume_twice() -> None:
    # Two machines that both name the volume (a duplicate, or an edited tag): one attach, to the first.
    shared = volume("vol-1", ALICE_N1)
    first = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 60)
    second = instance("i-02", ALICE_N1, volume_id="vol-1", launched_at=NOW - 30)

    result = run(snapshot(instances=[second, first], volumes=[shared]))

    attach = only(result, AttachVolume)
    assert (attach.volume_id, attach.instance_id) == ("vol-1", "i-01")


def test_a_volume_read_as_available_while_an_attachment_is_still_listed_is_not_attached_again() -> None:
    """DescribeVolumes between two states: attaching it to a second machine would be a second attachment."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1", zone=ZONE_A)
    between = volume("vol-1", ALICE_N1, attached_to=[attachment("i-09", state="attaching", attached_at=NOW)])
    settled = volume("vol-1", ALICE_N1)

    assert actions_of(run(snapshot(instances=[machine], volumes=[between])), AttachVolume) == []
    [attach] = actions_of(run(snapshot(instances=[machine], volumes=[settled])), AttachVolume)
    assert (attach.volume_id, attach.instance_id) == ("vol-1", "i-01")


# -- an attach stuck in attaching --------------------------------------------------------------------------


@pytest.mark.parametrize("stuck_s", [121.0, 600.0])
def test_attach_stuck_longer_than_the_timeout_is_force_detached(stuck_s: float) -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 300)
    stuck = attachment("i-0a1", state="attaching", attached_at=NOW - stuck_s)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[stuck])
    result = run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=120.0))
    detach = only(result, DetachVolume)
    assert (detach.volume_id, detach.instance_id, detach.force) == (VOL, "i-0a1", True)
    assert "attach_timeout_s=120" in detach.reason
    assert actions_of(result, AttachVolume) == []


@pytest.mark.parametrize("stuck_s", [0.0, 60.0, 119.0])
def test_attach_in_progress_shorter_than_the_timeout_is_left_alone(stuck_s: float) -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 300)
    vol = volume(
        VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", state="attaching", attached_at=NOW - stuck_s)]
    )
    result = run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=120.0))
    assert _volume_actions(result) == []


def test_an_attach_stuck_for_exactly_the_timeout_is_left_one_more_cycle() -> None:
    """The rule is 'longer than attach_timeout_s': at the second itself, nothing; a second later, a detach."""
    booted = instance("i-0a1", ALICE_N1, volume_id="vol-1", launched_at=NOW - 300)

    def stuck_for(stuck_s: float) -> list[DetachVolume]:
        stuck = attachment("i-0a1", state="attaching", attached_at=NOW - stuck_s)
        vol = volume("vol-1", ALICE_N1, state="in-use", attached_to=[stuck])
        result = run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=120.0))
        assert actions_of(result, AttachVolume) == []
        return actions_of(result, DetachVolume)

    assert stuck_for(120.0) == []
    assert [d.volume_id for d in stuck_for(121.0)] == ["vol-1"]


def test_attach_timeout_comes_from_the_policy() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 300)
    vol = volume(
        VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", state="attaching", attached_at=NOW - 60)]
    )
    assert only(run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=30.0)), DetachVolume)


def test_an_attach_stuck_past_the_timeout_is_forced_off_and_the_reason_says_how_long() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")
    stuck = volume("vol-a", state="in-use", attached_to=[attachment("i-1", state="attaching", attached_at=NOW - 125)])

    result = volumes_plan([machine], [stuck], attach_timeout_s=120.5)
    in_time = volumes_plan([machine], [stuck], attach_timeout_s=125.0)

    assert actions_of(result, DetachVolume) == [
        DetachVolume(
            "vol-a",
            "i-1",
            True,
            "attach of vol-a to i-1 stuck in attaching for 125 s (attach_timeout_s=120.5); detaching to attach again",
        )
    ]
    assert actions_of(in_time, DetachVolume) == []


def test_an_attach_to_another_machine_is_not_this_machines_to_unstick() -> None:
    machine = instance("i-1", ALICE_N1, volume_id="vol-a")
    elsewhere = volume(
        "vol-a", state="in-use", attached_to=[attachment("i-9", state="attaching", attached_at=NOW - 999)]
    )

    assert actions_of(volumes_plan([machine], [elsewhere]), DetachVolume) == []


def test_long_attached_volume_is_not_detached() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 86_400)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", attached_at=NOW - 86_000)])
    assert actions_of(run(snapshot(instances=[booted], volumes=[vol])), DetachVolume) == []


def test_running_task_on_the_volumes_node_keeps_everything_as_it_is() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 7200)
    node = node_of(booted)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", attached_at=NOW - 7000)])
    work = running_task("t1", node, ALICE_N1, service_labels=CACHE_ON.to_labels())
    result = run(snapshot(nodes=[node], instances=[booted], volumes=[vol], tasks=[work]))
    assert result.actions == ()


# -- release: the machine is gone, the volume is kept for its TTL ------------------------------------------


def test_volume_left_by_a_terminated_machine_is_tagged_released_with_its_expiry() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=3600)]))
    tag = one_of(volume_tagging(result))
    assert tag.volume_id == VOL
    assert dict(set_tags(tag)) == {VOLUME_RELEASED_AT_TAG: NOW_TEXT, VOLUME_EXPIRES_AT_TAG: NOW_PLUS_HOUR_TEXT}
    assert removed_tags(tag) == ()
    assert actions_of(result, DeleteVolume) == []


def test_a_newly_released_volume_is_tagged_with_its_release_and_expiry() -> None:
    (tag,) = actions_for(volume("vol-a", ttl_s=600))

    assert tag == ReleaseVolume("vol-a", NOW, NOW + 600, None, "vol-a was released; kept 600 s for its owner")
    assert set_tags(tag) == {
        VOLUME_RELEASED_AT_TAG: format_timestamp(NOW),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 600),
    }


def test_released_volume_expires_after_its_own_ttl_tag() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=7 * 86_400)]))
    assert set_tags(one_of(volume_tagging(result)))[VOLUME_EXPIRES_AT_TAG] == "2023-11-21T22:13:20Z"


@pytest.mark.parametrize("ttl_tag", [None, "", "abc", "-5"])
def test_released_volume_without_a_readable_ttl_tag_is_kept_for_the_default_ttl(ttl_tag: str | None) -> None:
    tags = {} if ttl_tag is None else {VOLUME_TTL_TAG: ttl_tag}
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=None, tags=tags)]))
    assert DEFAULT_CACHE_TTL_S == 86_400
    assert set_tags(one_of(volume_tagging(result)))[VOLUME_EXPIRES_AT_TAG] == "2023-11-15T22:13:20Z"


def test_volume_with_zero_ttl_expires_at_release() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=0)]))
    tag = one_of(volume_tagging(result))
    assert set_tags(tag)[VOLUME_EXPIRES_AT_TAG] == set_tags(tag)[VOLUME_RELEASED_AT_TAG] == NOW_TEXT
    # Deleted next cycle, not in the same one that marks it (the mark is written first).
    assert actions_of(result, DeleteVolume) == []


def test_release_is_tagged_once_the_terminated_machine_has_let_go() -> None:
    # Cycle 1: the machine is shutting down and the volume still detaching. Cycle 2: available.
    gone = instance("i-0a1", ALICE_N1, state="shutting-down", volume_id=VOL)
    detaching = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", state="detaching")])
    first = run(snapshot(instances=[gone], volumes=[detaching]))
    assert _volume_actions(first) == []
    second = run(snapshot(now=NOW + 30, volumes=[volume(VOL, ALICE_N1)]))
    assert set_tags(one_of(volume_tagging(second)))[VOLUME_RELEASED_AT_TAG] == "2023-11-14T22:13:50Z"


def test_released_volume_is_not_tagged_again_before_it_expires() -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW - 60 + HOUR)
    assert run(snapshot(volumes=[vol])).actions == ()


def test_an_available_volume_still_listing_an_attachment_is_not_released() -> None:
    between = volume("vol-a", attached_to=[attachment("i-1", state="detaching")])

    assert actions_for(between) == []


# -- the janitor -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("expired_s_ago", [0.0, 1.0, 86_400.0])
def test_janitor_deletes_an_available_volume_whose_expiry_has_passed(expired_s_ago: float) -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - HOUR - expired_s_ago, expires_at=NOW - expired_s_ago)
    result = run(snapshot(volumes=[vol]))
    delete = only(result, DeleteVolume)
    assert delete.volume_id == VOL
    assert "expired" in delete.reason
    assert volume_tagging(result) == []


def test_an_expired_volume_is_deleted_saying_when_it_expired() -> None:
    (delete,) = actions_for(volume("vol-a", released_at=NOW - 700, expires_at=NOW - 100))

    assert delete == DeleteVolume(
        "vol-a", f"vol-a was not claimed by its owner before it expired at {format_timestamp(NOW - 100)}"
    )
    assert actions_for(volume("vol-a", released_at=NOW - 700, expires_at=NOW - 100), clock_untrusted=True) == []


def test_janitor_keeps_an_unexpired_volume() -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - HOUR + 1, expires_at=NOW + 1)
    assert run(snapshot(volumes=[vol])).actions == ()


@pytest.mark.parametrize(
    "volume_state",
    [
        ("in-use", "attached"),
        ("in-use", "attaching"),
        ("in-use", "detaching"),
        ("creating", None),
        ("deleting", None),
        ("error", None),
    ],
    ids=lambda s: "-".join(x for x in s if x),
)
def test_janitor_never_deletes_a_volume_that_is_not_available(volume_state: tuple[str, str | None]) -> None:
    state, attach_state = volume_state
    attached = [attachment("i-0a1", state=attach_state)] if attach_state else []
    # No live machine names it (that alone would keep it): only its state protects it.
    vol = volume(VOL, ALICE_N1, state=state, attached_to=attached, released_at=NOW - 2 * HOUR, expires_at=NOW - HOUR)
    assert _deleted(run(snapshot(volumes=[vol]))) == set()


def test_janitor_tags_an_available_volume_missing_its_expiry_instead_of_deleting_it() -> None:
    # Released long ago by its own account, but the expiry was never written (or was removed by hand).
    vol = volume(VOL, ALICE_N1, released_at=NOW - 30 * 86_400)
    result = run(snapshot(volumes=[vol]))
    assert _deleted(result) == set()
    assert set_tags(one_of(volume_tagging(result)))[VOLUME_EXPIRES_AT_TAG] == NOW_PLUS_HOUR_TEXT


@pytest.mark.parametrize("expiry", ["", "soon", "1699990000", "2023-11-14 22:13:20", "2023-11-14T22:13:20+00:00"])
def test_janitor_never_deletes_a_volume_whose_expiry_it_cannot_read(expiry: str) -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - 30 * 86_400, expires_at=expiry)
    assert _deleted(run(snapshot(volumes=[vol]))) == set()


@pytest.mark.parametrize("machine_state", ["pending", "running"])
def test_janitor_never_deletes_a_volume_a_live_machine_was_launched_for(machine_state: str) -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - 2 * HOUR, expires_at=NOW - HOUR)
    booting = instance("i-0a1", ALICE_N1, state=machine_state, volume_id=VOL, launched_at=NOW - 10)
    result = run(snapshot(instances=[booting], volumes=[vol]))
    assert _deleted(result) == set()
    assert _expiry_cleared(result, VOL)


def test_janitor_deletes_an_expired_volume_whose_machine_is_gone() -> None:
    """The control for the test above: a machine that is no longer live reserves nothing."""
    vol = volume(VOL, ALICE_N1, released_at=NOW - 2 * HOUR, expires_at=NOW - HOUR)
    gone = instance("i-0a1", ALICE_N1, state="shutting-down", volume_id=VOL)
    assert _deleted(run(snapshot(instances=[gone], volumes=[vol]))) == {VOL}


def test_owner_returning_exactly_when_the_volume_expires_launches_with_it_instead_of_deleting_it() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, released_at=NOW - HOUR, expires_at=NOW)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol]))
    assert only(result, Launch).volume_id == VOL
    assert _deleted(result) == set()
    assert actions_of(result, CreateVolume) == []
    assert _expiry_cleared(result, VOL)


def test_janitor_deletes_only_the_expired_volume_among_several() -> None:
    vols = [
        volume(VOL, ALICE_N1, released_at=NOW - 2 * HOUR, expires_at=NOW - HOUR),
        volume(OTHER_VOL, BOB_N1, released_at=NOW - 60, expires_at=NOW + HOUR),
        volume("vol-0c3", ALICE_N2, state="in-use", attached_to=[attachment("i-0c3")]),
    ]
    live = instance("i-0c3", ALICE_N2, volume_id="vol-0c3")
    assert _deleted(run(snapshot(instances=[live], volumes=vols))) == {VOL}


def test_expired_volume_of_an_owner_waiting_for_capacity_in_its_zone_is_not_deleted() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, released_at=NOW - HOUR, expires_at=NOW - 1)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol], unavailable=_no_capacity_in(ZONE_B)))
    assert actions_of(result, Launch) == []
    assert _deleted(result) == set(), "the owner is back: their data must not be deleted while they wait"
    assert VOL in waiting_for(result, "t1").reason


def test_expired_volume_of_an_owner_waiting_for_the_instance_limit_is_not_deleted() -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - HOUR, expires_at=NOW - 1)
    full = [instance(f"i-0{n}", BOB_N1) for n in range(2)]
    result = run(
        snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=full, volumes=[vol]), make_policy(max_instances=2)
    )
    assert actions_of(result, Launch) == []
    assert _deleted(result) == set()


def test_what_keeps_a_volume_from_the_janitor_is_said() -> None:
    assert deletable(volume("vol-a", state="in-use", attached_to=[attachment("i-1")]), NOW) == (
        "vol-a is in-use and attached to i-1"
    )
    assert deletable(volume("vol-a", state="creating"), NOW) == "vol-a is creating"
    assert deletable(volume("vol-a", attached_to=[attachment("i-1")], expires_at=NOW - 1), NOW) == (
        "vol-a is available and attached to i-1"
    )
    assert deletable(volume("vol-a", expires_at=NOW - 1), NOW) is None


# -- odd tags keep nothing forever -------------------------------------------------------------------------


YEAR_S = 365 * 86_400


def _release_tags(result_actions: list[VolumeTagging]) -> dict[str, str]:
    (tag,) = [t for t in result_actions if VOLUME_EXPIRES_AT_TAG in set_tags(t)]
    return dict(set_tags(tag))


def test_an_unreadable_expiry_is_treated_as_absent_and_rewritten() -> None:
    odd = volume("vol-1", released_at=NOW - 60, expires_at="next tuesday", ttl_s=3600)

    result = run(snapshot(volumes=[odd]))

    assert _release_tags(volume_tagging(result)) == {
        VOLUME_RELEASED_AT_TAG: format_timestamp(NOW),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 3600),
    }
    assert actions_of(result, DeleteVolume) == []


def test_an_absurdly_far_expiry_is_treated_as_absent_and_rewritten() -> None:
    far = volume("vol-1", released_at=NOW - 60, expires_at=NOW + 50 * YEAR_S, ttl_s=3600)

    result = run(snapshot(volumes=[far]))

    assert _release_tags(volume_tagging(result))[VOLUME_EXPIRES_AT_TAG] == format_timestamp(NOW + 3600)


def test_an_expiry_beyond_any_ttl_is_written_again_and_one_just_within_is_kept() -> None:
    beyond = volume("vol-a", released_at=NOW, expires_at=NOW + MAX_CACHE_TTL_S + 1)
    within = volume("vol-b", released_at=NOW, expires_at=NOW + MAX_CACHE_TTL_S)

    assert [type(a) for a in actions_for(beyond)] == [ReleaseVolume]
    assert actions_for(within) == []


def test_an_unreadable_ttl_is_treated_as_absent_and_rewritten_with_the_release() -> None:
    odd_ttl = volume("vol-1", ttl_s=None, tags={VOLUME_TTL_TAG: "forever"})

    result = run(snapshot(volumes=[odd_ttl]))

    assert _release_tags(volume_tagging(result)) == {
        VOLUME_RELEASED_AT_TAG: format_timestamp(NOW),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + DEFAULT_CACHE_TTL_S),
        VOLUME_TTL_TAG: str(DEFAULT_CACHE_TTL_S),
    }


def test_a_pinned_volume_is_never_deleted_however_expired() -> None:
    pinned = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600, tags={VOLUME_PINNED_TAG: "true"})

    result = run(snapshot(volumes=[pinned]))

    assert actions_of(result, DeleteVolume) == []


def test_an_unpinned_expired_volume_is_still_deleted() -> None:
    unpinned = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600, tags={VOLUME_PINNED_TAG: "false"})

    assert only(run(snapshot(volumes=[unpinned])), DeleteVolume).volume_id == "vol-1"


# -- a returning owner: the expiry cleared, the TTL updated ------------------------------------------------


def test_returning_owner_clears_the_expiry_of_their_attached_volume() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL)
    vol = volume(
        VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")], released_at=NOW - 60, expires_at=NOW + 3540
    )
    result = run(snapshot(instances=[booted], volumes=[vol]))
    tag = one_of(volume_tagging(result))
    assert tag.volume_id == VOL
    assert set(removed_tags(tag)) == {VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG}
    assert dict(set_tags(tag)) == {}


def test_returning_owner_clears_the_expiry_of_a_volume_reserved_for_their_machine() -> None:
    booting = instance("i-0a1", ALICE_N1, state="pending", volume_id=VOL)
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)
    result = run(snapshot(instances=[booting], volumes=[vol], tasks=[cached_task("t1", ALICE_N1)]))
    assert _expiry_cleared(result, VOL)
    assert actions_of(result, DeleteVolume) == []


def test_returning_owner_launching_with_their_volume_clears_its_expiry() -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol]))
    assert only(result, Launch).volume_id == VOL
    assert _expiry_cleared(result, VOL)


def test_an_owner_back_clears_the_release_tags_even_when_only_one_was_readable() -> None:
    for tags in ({VOLUME_RELEASED_AT_TAG: format_timestamp(NOW - 60)}, {VOLUME_EXPIRES_AT_TAG: "not a time"}):
        back = volume("vol-a", state="in-use", attached_to=[attachment("i-1")], tags=tags)
        (clear,) = actions_for(back)
        assert clear == RenewVolume("vol-a", "its owner is back: vol-a no longer expires")
        assert removed_tags(clear) == (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG)


def test_volume_in_use_without_expiry_tags_is_not_retagged() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")])
    assert run(snapshot(instances=[booted], volumes=[vol])).actions == ()


def test_a_volume_in_use_without_release_tags_is_left_alone() -> None:
    assert actions_for(volume("vol-a", state="in-use", attached_to=[attachment("i-1")])) == []


def test_returning_owner_with_a_longer_ttl_updates_the_volumes_ttl_tag() -> None:
    vol = volume(VOL, ALICE_N1, ttl_s=3600)
    longer = CachePolicy(enabled=True, ttl_s=7200, size_gib=20)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=longer)], volumes=[vol]))
    assert only(result, Launch).volume_id == VOL
    assert any(set_tags(t).get(VOLUME_TTL_TAG) == "7200" for t in volume_tagging(result))


def test_an_owner_whose_policy_changed_gets_the_new_ttl_tagged() -> None:
    kept = volume("vol-a", ttl_s=600, state="in-use", attached_to=[attachment("i-1")])

    actions = list(
        volume_actions(
            [kept],
            {},
            set(),
            {"vol-a": CachePolicy(enabled=True, ttl_s=7200)},
            POLICY,
            DeadlineClock(NOW, NOW),
            clock_untrusted=False,
        )
    )

    assert actions == [SetVolumeTtl("vol-a", 7200, "the owner's cache policy now keeps it 7200 s after release")]


# -- a clock ahead of AWS's deletes nothing ----------------------------------------------------------------


def expired(volume_id: str = "vol-a") -> Volume:
    return volume(volume_id, released_at=NOW - 7200, expires_at=NOW - 3600)


def test_a_clock_ahead_of_aws_deletes_nothing_and_the_notice_says_by_how_much_and_what_to_check() -> None:
    ahead = dataclasses.replace(snapshot(volumes=[expired()]), aws_now=NOW - 90.4)

    result = run(ahead, make_policy(max_clock_skew_s=30.5))

    assert actions_of(result, DeleteVolume) == []
    assert list(result.notices) == [
        "this replica's clock is 90 s ahead of AWS's (the Date of its last answer), more than max_clock_skew_s=30.5:"
        " no deadline is written (no volume released, no machine kept warm or claimed from the buffer) and no cache"
        " volume deleted until the clocks agree (check NTP on this machine)"
    ]


def test_the_janitor_refuses_to_delete_while_this_clock_is_ahead_of_aws_and_says_so() -> None:
    expired = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600)
    ahead = dataclasses.replace(snapshot(volumes=[expired]), aws_now=NOW - 600)

    result = run(ahead, make_policy(max_clock_skew_s=60.0))

    assert actions_of(result, DeleteVolume) == []
    assert any("600 s ahead of AWS" in notice for notice in result.notices), result.notices


def test_a_clock_exactly_at_the_skew_bound_or_unknown_still_deletes() -> None:
    for aws_now in (NOW - 30.0, None, NOW + 30.0):
        snap = dataclasses.replace(snapshot(volumes=[expired()]), aws_now=aws_now)
        result = run(snap, make_policy(max_clock_skew_s=30.0))
        assert [d.volume_id for d in actions_of(result, DeleteVolume)] == ["vol-a"], aws_now
        assert result.notices == (), aws_now


def test_the_janitor_deletes_when_the_clocks_agree_within_the_bound() -> None:
    expired = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600)
    close: Snapshot = dataclasses.replace(snapshot(volumes=[expired]), aws_now=NOW - 5)

    assert only(run(close, make_policy(max_clock_skew_s=60.0)), DeleteVolume).volume_id == "vol-1"


def test_a_clock_behind_or_ahead_of_aws_writes_no_release_and_deletes_nothing() -> None:
    """Behind, a release written now would date the expiry in the past for the next leader, whose clock is right:
    it would delete the volume seconds after its release. Ahead, the expiry read now passes early. Either way the
    volume is left as it is (unreleased: kept, never lost) until the clocks agree, and the notice says which way."""
    fresh = volume("vol-b")
    for skew_s, direction in ((600.0, "behind"), (-600.0, "ahead of")):
        snap = dataclasses.replace(snapshot(volumes=[expired(), fresh]), aws_now=NOW + skew_s)

        result = run(snap, make_policy(max_clock_skew_s=60.0))

        assert volume_tagging(result) == [], direction
        assert actions_of(result, DeleteVolume) == [], direction
        assert [n for n in result.notices if f"600 s {direction} AWS's" in n] == list(result.notices), direction
        assert len(result.notices) == 1


# -- an operator's early expiry ----------------------------------------------------------------------------


def test_an_operators_expiry_tags_the_volume_to_expire_now() -> None:
    decided = expire_now("vol-a", CLUSTER, [volume("vol-a")], [], NOW, clock_skew="")

    assert decided == ExpireVolume("vol-a", NOW, "an operator asked for vol-a to expire now")
    assert set_tags(decided) == {VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW)}


def test_an_operators_expiry_tags_only_the_volume_asked_for() -> None:
    decided = expire_now("vol-b", CLUSTER, [volume("vol-a"), volume("vol-b", zone=ZONE_A)], [], NOW, clock_skew="")

    assert decided == ExpireVolume("vol-b", NOW, "an operator asked for vol-b to expire now")


def test_an_operators_expiry_of_a_volume_in_use_says_when_it_can() -> None:
    decided = expire_now("vol-a", CLUSTER, [volume("vol-a", attached_to=[attachment("i-1")])], [], NOW, clock_skew="")

    assert decided == Refused(
        "volume vol-a is attached to i-1: it is in use by its owner's machine; it can expire once that machine is gone"
        " and the volume is available"
    )


def test_an_operators_expiry_of_a_volume_a_starting_machine_waits_for_is_refused() -> None:
    starting = instance("i-new", ALICE_N1, state="pending", volume_id="vol-a")
    other = instance("i-other", ALICE_N1, state="running", volume_id="vol-b")
    gone = instance("i-gone", ALICE_N1, state="shutting-down", volume_id="vol-a")

    refused = expire_now("vol-a", CLUSTER, [volume("vol-a")], [other, starting], NOW, clock_skew="")
    allowed = expire_now("vol-a", CLUSTER, [volume("vol-a")], [other, gone], NOW, clock_skew="")

    assert refused == Refused(
        "volume vol-a is reserved for instance i-new, which is starting for its owner and will attach it"
    )
    assert isinstance(allowed, ExpireVolume)


def test_an_operators_expiry_is_refused_with_the_reason_and_missing_only_when_there_is_no_such_volume() -> None:
    """The API answers 404 for `missing` and 409 for the rest: the flag and each reason are what the operator gets."""
    available = volume("vol-a")
    cases = [
        ("vol-x", [available], Refused(f"no cache volume vol-x in cluster {CLUSTER!r}", missing=True)),
        ("vol-x", [], Refused(f"no cache volume vol-x in cluster {CLUSTER!r}", missing=True)),
        (
            "vol-c",
            [available, volume("vol-c", state="creating")],
            Refused("volume vol-c is creating; only an available volume can expire"),
        ),
        (
            "vol-e",
            [volume("vol-e", state="error")],
            Refused("volume vol-e is error; only an available volume can expire"),
        ),
    ]
    for volume_id, volumes, refused in cases:
        decided = expire_now(volume_id, CLUSTER, volumes, [], NOW, clock_skew="")
        assert decided == refused, volume_id
        assert isinstance(decided, Refused)
        assert decided.missing is refused.missing


# -- volumes the janitor leaves alone this cycle -----------------------------------------------------------


def test_a_volume_a_machine_with_its_disks_names_is_never_released_and_one_gone_for_good_is() -> None:
    """A stopped machine may be started again and mount its volume: releasing it would let it expire under
    the machine. A machine shutting down or terminated will never mount it again."""
    for state, released in [
        ("pending", False),
        ("running", False),
        ("stopping", False),
        ("stopped", False),
        ("shutting-down", True),
        ("terminated", True),
    ]:
        machine = instance("i-1", ALICE_N1, state=state, launched_at=NOW - 60, volume_id="vol-a")
        result = run(snapshot(instances=[machine], volumes=[volume("vol-a")]))
        releases = [t for t in volume_tagging(result) if VOLUME_RELEASED_AT_TAG in set_tags(t)]
        assert bool(releases) is released, state


def test_an_expired_volume_that_a_late_machine_still_names_is_not_deleted_while_that_machine_lives() -> None:
    expired = volume("vol-1", ALICE_N1, released_at=NOW - 7200, expires_at=NOW - 3600)
    late = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 10_000)  # never joined: terminated now
    stopped = instance("i-02", ALICE_N1, volume_id="vol-1", state="stopped")

    for machine in (late, stopped):
        result = run(snapshot(instances=[machine], volumes=[expired]))
        assert actions_of(result, DeleteVolume) == [], machine.state

    gone = instance("i-01", ALICE_N1, volume_id="vol-1", state="shutting-down")
    assert [d.volume_id for d in actions_of(run(snapshot(instances=[gone], volumes=[expired])), DeleteVolume)] == [
        "vol-1"
    ]


def test_an_expired_volume_whose_returning_owner_cannot_launch_yet_is_neither_deleted_nor_retagged() -> None:
    """The owner is back: their data must wait for a launch (here for capacity in the volume's zone)."""
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)
    full = {(name, ZONE_A): NOW + 300 for name in ("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge")}

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[expired], unavailable=full))

    assert actions_of(result, DeleteVolume) == []
    assert actions_of(result, Launch) == []
    assert [set_tags(t) for t in volume_tagging(result)] == [{}]  # only its release tags cleared


def test_an_owner_without_cache_work_does_not_hold_their_expired_volume() -> None:
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)

    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1)], volumes=[expired]))

    assert [d.volume_id for d in actions_of(result, DeleteVolume)] == ["vol-a"]
    assert only(result, Launch).volume_id is None


# -- trust under faults (issue 19) -------------------------------------------------------------------------


def test_an_owner_whose_volume_did_not_appear_on_its_machine_is_told_so_not_that_it_is_on_its_way() -> None:
    """Behaviour 7: the machine is terminated this plan; the owner's task says what happened."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1")
    joined = node_of(machine, labelled=False, mounted=False)
    attached = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-01")])

    result = run(snapshot(nodes=[joined], instances=[machine], volumes=[attached], tasks=[cached_task("t1")]))

    assert waiting_for(result, "t1").reason == (
        "cache volume vol-1 of user_id=alice,project_id=p1,node_id=n1 did not appear on machine i-01 (t3.medium in"
        " eu-west-1a) within its boot's wait: that machine is terminated, and the volume goes to a new one, of another"
        " type where one fits, once it is detached"
    )


def test_an_operators_expiry_is_refused_while_this_clock_disagrees_with_aws() -> None:
    """An expiry is a deadline (behaviour 1)."""
    skew = "this replica's clock is 600 s behind AWS's"

    decided = expire_now("vol-a", CLUSTER, [volume("vol-a")], [], NOW, clock_skew=skew)

    assert decided == Refused(f"volume vol-a does not expire now: {skew}")
