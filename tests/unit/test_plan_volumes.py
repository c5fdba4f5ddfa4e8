"""The EBS cache: which volume a launch carries and where, creating, attaching, releasing, and the janitor."""

from __future__ import annotations

import dataclasses

import pytest
from warmswarm_autoscaling.actions import (
    Activate,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    LabelNode,
    Launch,
    TagVolume,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.volumes import CACHE_DEVICE
from warmswarm_autoscaling.snapshot import Volume
from warmswarm_models import (
    NODE_LABEL_VOLUME_ID,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    Owner,
)
from warmswarm_models.cache import DEFAULT_CACHE_TTL_S

from .factories import (
    ALICE_N1,
    ALICE_N2,
    BOB_N1,
    CACHE_ON,
    INSTANCE_TYPES,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    attachment,
    cached_task,
    instance,
    instance_from_launch,
    make_policy,
    next_snapshot,
    node_of,
    only,
    pending_task,
    run,
    running_task,
    snapshot,
    volume,
    volume_from_create,
    waiting_for,
)

VOL = "vol-0a1"
OTHER_VOL = "vol-0b2"
HOUR = 3600.0
# NOW as format_timestamp writes it, and one hour (CACHE_ON's TTL) later.
NOW_TEXT = "2023-11-14T22:13:20Z"
NOW_PLUS_HOUR_TEXT = "2023-11-14T23:13:20Z"

_VOLUME_ACTIONS = (CreateVolume, AttachVolume, DetachVolume, TagVolume, DeleteVolume)


def _volume_actions(result: Plan) -> list[object]:
    return [a for a in result.actions if isinstance(a, _VOLUME_ACTIONS)]


def _deleted(result: Plan) -> set[str]:
    return {a.volume_id for a in actions_of(result, DeleteVolume)}


def _expiry_cleared(result: Plan, volume_id: str) -> bool:
    return any(
        t.volume_id == volume_id
        and {VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG} <= set(t.remove_keys)
        and VOLUME_EXPIRES_AT_TAG not in t.set_tags
        for t in actions_of(result, TagVolume)
    )


# A cached task and its owner's available volume: launch where the volume is, with it.


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


# Attaching the volume to the machine launched for it.


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


def test_node_that_joins_with_the_volume_is_labelled_with_its_id() -> None:
    booted = instance("i-0a1", ALICE_N1, zone=ZONE_B, volume_id=VOL)
    vol = volume(VOL, ALICE_N1, zone=ZONE_B, state="in-use", attached_to=[attachment("i-0a1")])
    joined = node_of(booted, labelled=False)
    result = run(snapshot(nodes=[joined], instances=[booted], volumes=[vol], tasks=[cached_task("t1", ALICE_N1)]))
    label = only(result, LabelNode)
    assert label.node_id == joined.id
    assert label.labels[NODE_LABEL_VOLUME_ID] == VOL
    assert label.labels["node_id"] == "n1"


def test_node_of_a_machine_without_a_volume_carries_no_volume_label() -> None:
    booted = instance("i-0a1", ALICE_N1)
    result = run(snapshot(nodes=[node_of(booted, labelled=False)], instances=[booted]))
    assert NODE_LABEL_VOLUME_ID not in only(result, LabelNode).labels


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


# No volume yet: create one, launch with it next cycle.


def test_cached_task_of_an_owner_without_a_volume_creates_one_and_launches_nothing_yet() -> None:
    cache = CachePolicy(enabled=True, ttl_s=7200, size_gib=50, volume_type="io1")
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=cache)]))
    create = only(result, CreateVolume)
    assert create.owner == ALICE_N1
    assert (create.size_gib, create.volume_type, create.ttl_s) == (50, "io1", 7200)
    assert create.availability_zone == ZONE_A
    assert create.client_token
    assert actions_of(result, Launch) == []
    waiting = waiting_for(result, "t1")
    assert waiting.starting
    assert not waiting.unschedulable
    assert ZONE_A in waiting.reason


def test_volume_is_created_in_the_zone_of_the_cheapest_fitting_offering() -> None:
    snap = snapshot(tasks=[cached_task("t1", ALICE_N1)], unavailable={("t3.medium", ZONE_A): NOW + 300})
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_volume_is_created_in_the_zone_with_fewer_of_our_machines() -> None:
    others = [instance("i-01", BOB_N1, zone=ZONE_A)]
    snap = snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=others)
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_volume_is_created_where_the_task_fits_a_type() -> None:
    # Only the GPU type fits; it has no capacity in zone A.
    snap = snapshot(
        tasks=[cached_task("t1", ALICE_N1, cpus=2.0, gpus=1)], unavailable={("g4dn.xlarge", ZONE_A): NOW + 300}
    )
    assert only(run(snap), CreateVolume).availability_zone == ZONE_B


def test_no_volume_is_created_when_no_offering_has_capacity() -> None:
    unavailable = {(t, z): NOW + 300 for t in INSTANCE_TYPES for z in (ZONE_A, ZONE_B)}
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], unavailable=unavailable))
    assert result.actions == ()
    assert "capacity" in waiting_for(result, "t1").reason


def test_no_volume_is_created_when_no_machine_may_be_launched() -> None:
    full = [instance(f"i-0{n}", BOB_N1) for n in range(2)]
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1)], instances=full), make_policy(max_instances=2))
    assert actions_of(result, CreateVolume) == []
    assert "max_instances" in waiting_for(result, "t1").reason


def test_two_cached_tasks_of_one_owner_create_one_volume() -> None:
    tasks = [cached_task("t1", ALICE_N1), cached_task("t2", ALICE_N1)]
    result = run(snapshot(tasks=tasks))
    assert only(result, CreateVolume).owner == ALICE_N1
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t1").starting
    assert waiting_for(result, "t2").starting


def test_cached_tasks_of_two_owners_create_one_volume_each() -> None:
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1), cached_task("t2", BOB_N1)]))
    assert sorted(str(c.owner) for c in actions_of(result, CreateVolume)) == [str(ALICE_N1), str(BOB_N1)]


def test_next_cycle_launches_in_the_zone_of_the_volume_being_created() -> None:
    task = cached_task("t1", ALICE_N1)
    first = run(snapshot(tasks=[task], unavailable={("t3.medium", ZONE_A): NOW + 300}))
    create = only(first, CreateVolume)
    creating = volume_from_create(create, VOL, state="creating", created_at=NOW + 1)
    second = run(next_snapshot(first, now=NOW + 30, tasks=[task], volumes=[creating]))
    launch = only(second, Launch)
    assert (launch.availability_zone, launch.volume_id) == (create.availability_zone, VOL)
    assert launch.availability_zone == ZONE_B
    assert actions_of(second, CreateVolume) == []


def test_whole_return_from_no_volume_to_a_labelled_node_creates_one_volume_and_launches_once() -> None:
    task = cached_task("t1", ALICE_N1)
    cycles = [run(snapshot(tasks=[task]))]
    create = only(cycles[0], CreateVolume)

    made = volume_from_create(create, VOL, created_at=NOW + 1)

    def vol(state: str, *attached_to: str) -> Volume:
        return dataclasses.replace(made, state=state, attachments=tuple(attachment(i) for i in attached_to))

    cycles.append(run(next_snapshot(cycles[-1], now=NOW + 30, tasks=[task], volumes=[vol("creating")])))
    launch = only(cycles[-1], Launch)
    pending = instance_from_launch(launch, "i-0a1", launched_at=NOW + 31, state="pending")
    running = instance_from_launch(launch, "i-0a1", launched_at=NOW + 31, state="running")
    worlds = [
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
    assert only(cycles[6], LabelNode).labels[NODE_LABEL_VOLUME_ID] == VOL
    assert only(cycles[7], Activate).node_id == "node-i-0a1"
    # Nothing released, expired or deleted along the way.
    assert all(not actions_of(c, TagVolume) and not actions_of(c, DeleteVolume) for c in cycles)


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
    assert only(result, CreateVolume).owner == ALICE_N1
    assert actions_of(result, Launch) == []


def test_create_volume_client_token_differs_per_owner_and_cluster() -> None:
    def token(owner: Owner, cluster: str = "test") -> str:
        return only(
            run(snapshot(tasks=[cached_task("t1", owner)]), make_policy(cluster=cluster)), CreateVolume
        ).client_token

    assert len({token(ALICE_N1), token(ALICE_N2), token(BOB_N1), token(ALICE_N1, "prod")}) == 4


# Another owner's volume, and tasks without the cache.


@pytest.mark.parametrize("other", [BOB_N1, ALICE_N2, Owner(user_id="alice", project_id="p2", node_id="n1")], ids=str)
def test_volume_of_another_owner_is_never_used(other: Owner) -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    result = run(snapshot(tasks=[cached_task("t1", other)], volumes=[vol]))
    assert all(a.volume_id != VOL for a in actions_of(result, Launch))
    assert only(result, CreateVolume).owner == other
    assert VOL not in {a.volume_id for a in actions_of(result, AttachVolume)}


def test_machine_on_its_way_with_another_owners_volume_is_not_attached_to_it() -> None:
    # Same user, other node: its machine names a volume that is alice/n1's (a tag edited by hand).
    intruder = instance("i-0a1", ALICE_N2, zone=ZONE_A, volume_id=VOL)
    result = run(snapshot(instances=[intruder], volumes=[volume(VOL, ALICE_N1, zone=ZONE_A)]))
    assert actions_of(result, AttachVolume) == [], "a machine tagged for another owner must not get the volume"


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


def test_larger_cache_off_task_of_a_cache_owner_does_not_take_their_work_to_a_machine_without_the_volume() -> None:
    # Largest first: the cache-off task opens the owner's machine, and the cached one joins it.
    tasks = [pending_task("t1", ALICE_N1, cpus=1.5), cached_task("t2", ALICE_N1, cpus=0.2)]
    result = run(snapshot(tasks=tasks, volumes=[volume(VOL, ALICE_N1, zone=ZONE_B)]))
    launch = only(result, Launch)
    assert launch.task_ids == ("t1", "t2")
    assert (launch.volume_id, launch.availability_zone) == (VOL, ZONE_B)


def test_larger_cache_off_task_of_a_cache_owner_without_a_volume_waits_for_it_to_be_created() -> None:
    tasks = [pending_task("t1", ALICE_N1, cpus=1.5), cached_task("t2", ALICE_N1, cpus=0.2)]
    result = run(snapshot(tasks=tasks))
    assert only(result, CreateVolume).owner == ALICE_N1
    assert actions_of(result, Launch) == []
    assert waiting_for(result, "t2").starting


# The cache turned on while the owner's machine (launched without a volume) still runs.


def test_cached_task_is_not_matched_to_its_owners_machine_without_a_volume() -> None:
    plain = instance("i-plain", ALICE_N1)
    result = run(snapshot(nodes=[node_of(plain)], instances=[plain], tasks=[cached_task("t1", ALICE_N1)]))
    assert only(result, CreateVolume).owner == ALICE_N1, "a machine with the volume is on its way instead"
    assert not waiting_for(result, "t1").reason.startswith("fits on node")


def test_cached_task_does_not_bring_back_its_owners_drained_machine_without_a_volume() -> None:
    plain = instance("i-plain", ALICE_N1)
    drained = node_of(plain, availability="drain")
    result = run(
        snapshot(
            nodes=[drained], instances=[plain], tasks=[cached_task("t1", ALICE_N1)], volumes=[volume(VOL, ALICE_N1)]
        )
    )
    assert actions_of(result, Activate) == []
    assert only(result, Launch).volume_id == VOL


def test_cached_task_is_matched_to_its_owners_machine_with_the_volume() -> None:
    carrying = instance("i-vol", ALICE_N1, volume_id=VOL)
    result = run(snapshot(nodes=[node_of(carrying)], instances=[carrying], tasks=[cached_task("t1", ALICE_N1)]))
    assert actions_of(result, Launch) == []
    assert actions_of(result, CreateVolume) == []
    assert waiting_for(result, "t1").reason.startswith("fits on node")


def test_node_without_a_volume_running_a_cached_task_is_drained_so_the_task_moves() -> None:
    plain = instance("i-plain", ALICE_N1)
    node = node_of(plain)
    task = running_task("t1", node, ALICE_N1, service_labels=CACHE_ON.to_labels())
    result = run(snapshot(nodes=[node], instances=[plain], tasks=[task]))
    drain = only(result, Drain)
    assert drain.node_id == node.id
    assert "has no cache volume" in drain.reason
    assert "service-t1" in drain.reason


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


# The cache needs one owner and readable labels.


@pytest.mark.parametrize(
    "owner",
    [
        Owner(project_id="p1", node_id="n1"),
        Owner(user_id="alice", node_id="n1"),
        Owner(user_id="alice", project_id="p1"),
        Owner(user_id="alice"),
        Owner(),
    ],
    ids=str,
)
def test_cached_task_not_pinned_to_all_three_owner_ids_is_unschedulable(owner: Owner) -> None:
    result = run(snapshot(tasks=[cached_task("t1", owner)]))
    assert result.actions == ()
    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    missing = [key for key in ("user_id", "project_id", "node_id") if getattr(owner, key) is None]
    assert all(f"node.labels.{key}" in waiting.reason for key in missing)
    assert "cache" in waiting.reason


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (SERVICE_LABEL_CACHE_TTL_S, "abc"),
        (SERVICE_LABEL_CACHE_SIZE_GIB, "0"),
        (SERVICE_LABEL_CACHE_VOLUME_TYPE, "gp9"),
        (SERVICE_LABEL_CACHE_ENABLED, "yes"),
    ],
)
def test_malformed_cache_labels_make_the_task_unschedulable_naming_the_label(key: str, value: str) -> None:
    labels = {**CACHE_ON.to_labels(), key: value}
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=labels)]))
    assert result.actions == ()
    waiting = waiting_for(result, "t1")
    assert waiting.unschedulable
    assert key in waiting.reason
    assert value in waiting.reason
    assert "service-t1" in waiting.reason


def test_malformed_cache_labels_do_not_touch_the_owners_volume() -> None:
    labels = {**CACHE_ON.to_labels(), SERVICE_LABEL_CACHE_TTL_S: "abc"}
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3000)
    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1, service_labels=labels)], volumes=[vol]))
    assert result.actions == ()


# Release: the machine is gone, the volume is kept for its TTL.


def test_volume_left_by_a_terminated_machine_is_tagged_released_with_its_expiry() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=3600)]))
    tag = only(result, TagVolume)
    assert tag.volume_id == VOL
    assert dict(tag.set_tags) == {VOLUME_RELEASED_AT_TAG: NOW_TEXT, VOLUME_EXPIRES_AT_TAG: NOW_PLUS_HOUR_TEXT}
    assert tag.remove_keys == ()
    assert actions_of(result, DeleteVolume) == []


def test_released_volume_expires_after_its_own_ttl_tag() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=7 * 86_400)]))
    assert only(result, TagVolume).set_tags[VOLUME_EXPIRES_AT_TAG] == "2023-11-21T22:13:20Z"


@pytest.mark.parametrize("ttl_tag", [None, "", "abc", "-5"])
def test_released_volume_without_a_readable_ttl_tag_is_kept_for_the_default_ttl(ttl_tag: str | None) -> None:
    tags = {} if ttl_tag is None else {VOLUME_TTL_TAG: ttl_tag}
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=None, tags=tags)]))
    assert DEFAULT_CACHE_TTL_S == 86_400
    assert only(result, TagVolume).set_tags[VOLUME_EXPIRES_AT_TAG] == "2023-11-15T22:13:20Z"


def test_volume_with_zero_ttl_expires_at_release() -> None:
    result = run(snapshot(volumes=[volume(VOL, ALICE_N1, ttl_s=0)]))
    tag = only(result, TagVolume)
    assert tag.set_tags[VOLUME_EXPIRES_AT_TAG] == tag.set_tags[VOLUME_RELEASED_AT_TAG] == NOW_TEXT
    # Deleted next cycle, not in the same one that marks it (the mark is written first).
    assert actions_of(result, DeleteVolume) == []


def test_release_is_tagged_once_the_terminated_machine_has_let_go() -> None:
    # Cycle 1: the machine is shutting down and the volume still detaching. Cycle 2: available.
    gone = instance("i-0a1", ALICE_N1, state="shutting-down", volume_id=VOL)
    detaching = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", state="detaching")])
    first = run(snapshot(instances=[gone], volumes=[detaching]))
    assert _volume_actions(first) == []
    second = run(snapshot(now=NOW + 30, volumes=[volume(VOL, ALICE_N1)]))
    assert only(second, TagVolume).set_tags[VOLUME_RELEASED_AT_TAG] == "2023-11-14T22:13:50Z"


def test_released_volume_is_not_tagged_again_before_it_expires() -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - 60, expires_at=NOW - 60 + HOUR)
    assert run(snapshot(volumes=[vol])).actions == ()


# The janitor.


@pytest.mark.parametrize("expired_s_ago", [0.0, 1.0, 86_400.0])
def test_janitor_deletes_an_available_volume_whose_expiry_has_passed(expired_s_ago: float) -> None:
    vol = volume(VOL, ALICE_N1, released_at=NOW - HOUR - expired_s_ago, expires_at=NOW - expired_s_ago)
    result = run(snapshot(volumes=[vol]))
    delete = only(result, DeleteVolume)
    assert delete.volume_id == VOL
    assert "expired" in delete.reason
    assert actions_of(result, TagVolume) == []


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
    assert only(result, TagVolume).set_tags[VOLUME_EXPIRES_AT_TAG] == NOW_PLUS_HOUR_TEXT


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


# A returning owner clears the expiry.


def test_returning_owner_clears_the_expiry_of_their_attached_volume() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL)
    vol = volume(
        VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")], released_at=NOW - 60, expires_at=NOW + 3540
    )
    result = run(snapshot(instances=[booted], volumes=[vol]))
    tag = only(result, TagVolume)
    assert tag.volume_id == VOL
    assert set(tag.remove_keys) == {VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG}
    assert dict(tag.set_tags) == {}


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


def test_volume_in_use_without_expiry_tags_is_not_retagged() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")])
    assert run(snapshot(instances=[booted], volumes=[vol])).actions == ()


def test_returning_owner_with_a_longer_ttl_updates_the_volumes_ttl_tag() -> None:
    vol = volume(VOL, ALICE_N1, ttl_s=3600)
    longer = CachePolicy(enabled=True, ttl_s=7200, size_gib=20)
    result = run(snapshot(tasks=[cached_task("t1", ALICE_N1, cache=longer)], volumes=[vol]))
    assert only(result, Launch).volume_id == VOL
    assert any(t.set_tags.get(VOLUME_TTL_TAG) == "7200" for t in actions_of(result, TagVolume))


# The owner comes back while their idle node still runs.


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


def test_idle_node_with_a_volume_is_drained_and_terminated_when_its_owner_stays_away() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 7200)
    vol = volume(VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1")])
    active = node_of(booted)
    drained = node_of(booted, availability="drain")
    idle = {active.id: NOW - 3600}
    assert only(run(snapshot(nodes=[active], instances=[booted], volumes=[vol], idle_since=idle)), Drain)
    assert only(run(snapshot(nodes=[drained], instances=[booted], volumes=[vol], idle_since=idle)), Terminate)


# No capacity in the volume's zone.


def _no_capacity_in(zone: str) -> dict[tuple[str, str], float]:
    return {(t, zone): NOW + 300 for t in INSTANCE_TYPES}


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


def test_capacity_back_in_the_volumes_zone_launches_there() -> None:
    vol = volume(VOL, ALICE_N1, zone=ZONE_B)
    unavailable = {k: NOW - 1 for k in _no_capacity_in(ZONE_B)}  # the backoff has passed
    launch = only(run(snapshot(tasks=[cached_task("t1", ALICE_N1)], volumes=[vol], unavailable=unavailable)), Launch)
    assert (launch.availability_zone, launch.volume_id) == (ZONE_B, VOL)


# A volume still detaching from a machine that is gone.


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


# An attach stuck in "attaching".


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


def test_attach_timeout_comes_from_the_policy() -> None:
    booted = instance("i-0a1", ALICE_N1, volume_id=VOL, launched_at=NOW - 300)
    vol = volume(
        VOL, ALICE_N1, state="in-use", attached_to=[attachment("i-0a1", state="attaching", attached_at=NOW - 60)]
    )
    assert only(run(snapshot(instances=[booted], volumes=[vol]), make_policy(attach_timeout_s=30.0)), DetachVolume)


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
