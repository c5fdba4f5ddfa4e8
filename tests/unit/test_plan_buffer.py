"""The warm buffer (plan/buffer.py): stopped anonymous machines per type and zone, each claimed for good by one
owner's first session; what a refill launches, what a claim carries and says, what is stopped, what is surplus."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest
from warmswarm_autoscaling.actions import (
    AttachVolume,
    ClaimBufferMachine,
    CreateVolume,
    DetachVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    Start,
    Stop,
    Terminate,
)
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.snapshot import Instance, Snapshot, Task
from warmswarm_models import (
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    CachePolicy,
    Owner,
    Resources,
    format_timestamp,
    parse_timestamp,
)

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    BUFFERED,
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    attachment,
    buffer_machine,
    cached_task,
    instance,
    instance_tagging,
    labels_of,
    make_policy,
    next_snapshot,
    node_of,
    one_of,
    only,
    pending_task,
    run,
    running_task,
    set_tags,
    snapshot,
    volume,
    volume_from_create,
    waiting_for,
    warm_machine,
)


def claimed(machine: Instance, owner_tags: dict[str, str]) -> Instance:
    """The buffer machine after its claim's CreateTags (as apply writes them)."""
    return instance(
        machine.id,
        state=machine.state,
        zone=machine.availability_zone,
        tags={**machine.tags, **owner_tags},
    )


def stopped_buffer(*machines: Instance, tasks: list[Task], **more: Any) -> Snapshot:
    """Stopped buffer machines (their nodes down since they stopped) and pending work; `more` for snapshot()."""
    nodes = [node_of(m, labelled=False, state="down") for m in machines]
    return snapshot(nodes=nodes, instances=machines, tasks=tasks, **more)


# -- refilling the buffer ----------------------------------------------------------------------------------


# Buffer launch tokens as the released autoscaler issues them (cluster "test"). A leader that sent the
# RunInstances and lost the answer may be replaced by a newer release; the retry returns the machine already
# made only if the token is the same, so the derivation of a buffer launch's token never changes.
EMPTY_BUFFER_LAUNCH = "c31a1f64a37544c70a41fdb8a38f603cb3bcbb9a72639bb440f27365966e04f7"
BESIDE_TWO_CLAIMED_LAUNCH = "a7783676f499ab0a63c14fa3d4116538ceee4490ef56c7e5cfbdc21a90d11e51"


def stopped_warm(instance_id: str) -> Instance:
    return instance(instance_id, BOB, state="stopped", tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 600)})


def test_an_empty_buffer_launches_one_anonymous_machine_per_type_and_zone() -> None:
    result = run(snapshot(), BUFFERED)
    launch = only(result, Launch)
    assert launch.purpose == "buffer"
    assert launch.owner.is_nobody
    assert (launch.instance_type, launch.availability_zone, launch.task_ids) == ("t3.medium", ZONE_A, ())


def test_a_full_buffer_launches_nothing_and_a_cycle_that_launches_for_an_owner_adds_nothing() -> None:
    assert run(stopped_buffer(buffer_machine(), tasks=[]), BUFFERED).actions == ()
    busy = run(snapshot(tasks=[pending_task("t1", BOB, cpus=1.5, memory_gib=6)]), BUFFERED)
    assert [(launch.owner, launch.purpose == "buffer") for launch in actions_of(busy, Launch)] == [(BOB, False)]


def test_the_buffer_respects_max_stopped_instances() -> None:
    stopped_warm = instance("i-w", BOB, state="stopped", tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 60)})
    full = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=1)
    assert actions_of(run(snapshot(instances=[stopped_warm]), full), Launch) == []


def test_a_buffer_launch_reserves_nothing_and_says_how_many_machines_it_keeps_and_has() -> None:
    """A buffer machine is for no task: it must not reserve room; the reason shows ops the buffer's fill."""
    policy = make_policy(warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,))
    launch = only(run(stopped_buffer(buffer_machine(), tasks=[]), policy), Launch)
    assert launch.purpose == "buffer"
    assert launch.demand == Resources()
    assert launch.reason == (
        "the warm buffer keeps 2 stopped t3.medium in eu-west-1a and has 1: a machine pulls the buffer's images"
        " and is stopped for an owner's first session"
    )


def test_buffer_launch_tokens_are_the_released_ones() -> None:
    assert only(run(snapshot(), BUFFERED), Launch).client_token == EMPTY_BUFFER_LAUNCH
    # An owner's machine of the same type in the same zone is no part of the buffer's decisions.
    owners = instance("i-o1", BOB, instance_type="t3.medium", zone=ZONE_A)
    beside = actions_of(run(snapshot(nodes=[node_of(owners)], instances=[owners]), BUFFERED), Launch)
    assert [launch.client_token for launch in beside] == [EMPTY_BUFFER_LAUNCH]
    # Two machines of this part of the buffer were claimed since (still listed): the next is its own call.
    claimed = [buffer_machine("i-b2", owner=BOB), buffer_machine("i-b1", owner=BOB)]
    refill = [
        launch
        for launch in actions_of(run(snapshot(instances=claimed), BUFFERED), Launch)
        if launch.purpose == "buffer"
    ]
    assert [launch.client_token for launch in refill] == [BESIDE_TWO_CLAIMED_LAUNCH]


def test_the_refill_after_a_claim_is_a_new_call_not_a_replay_of_the_claimed_machines_launch() -> None:
    first = only(run(snapshot(), BUFFERED), Launch)
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    refill = [
        launch
        for launch in actions_of(run(snapshot(instances=[machine]), BUFFERED), Launch)
        if launch.purpose == "buffer"
    ]
    assert len(refill) == 1
    assert refill[0].client_token != first.client_token


@pytest.mark.parametrize(
    ("limits", "present", "launched"),
    [
        # One more stopped machine is allowed, whoever's the stopped ones are.
        ({"max_stopped_instances": 2}, [stopped_warm("i-w1")], 1),
        # A booting buffer machine is stopped soon: it counts against max_stopped_instances already.
        ({"max_stopped_instances": 2}, [buffer_machine("i-b1", state="pending")], 1),
        # A buffer machine boots (runs) first: it counts against max_instances with the live ones.
        ({"max_instances": 2}, [instance("i-o1", BOB)], 1),
        ({"max_launches_per_cycle": 2}, [], 2),
    ],
)
def test_the_refill_stays_within_the_limits(limits: dict[str, int], present: list[Instance], launched: int) -> None:
    policy = make_policy(warm_buffer={"t3.medium": 3}, availability_zones=(ZONE_A,), **limits)
    nodes = [node_of(i) for i in present if i.state == "running"]
    launches = actions_of(run(snapshot(nodes=nodes, instances=present), policy), Launch)
    assert [launch.purpose == "buffer" for launch in launches] == [True] * launched


@pytest.mark.parametrize(
    ("buffer", "present", "unavailable", "launched"),
    [
        # A type EC2 does not know (a typo) is passed over; the others are kept.
        ({"c9.large": 1, "t3.medium": 1}, [], {}, [("t3.medium", ZONE_A)]),
        # No capacity for the type in one zone just now: the other zone still gets its machine.
        ({"t3.medium": 1}, [], {("t3.medium", ZONE_A): NOW + 300}, [("t3.medium", ZONE_B)]),
        # Each type and zone is counted apart: a t3.medium in a zone is no m5.large there.
        ({"m5.large": 1, "t3.medium": 1}, [buffer_machine("i-b1")], {}, [("m5.large", ZONE_A)]),
    ],
)
def test_what_the_refill_launches(
    buffer: dict[str, int],
    present: list[Instance],
    unavailable: dict[tuple[str, str], float],
    launched: list[tuple[str, str]],
) -> None:
    zones = (ZONE_A, ZONE_B) if unavailable else (ZONE_A,)
    policy = make_policy(warm_buffer=buffer, availability_zones=zones)
    result = run(stopped_buffer(*present, tasks=[], unavailable=unavailable), policy)
    assert [(launch.instance_type, launch.availability_zone) for launch in actions_of(result, Launch)] == launched


# -- claims ------------------------------------------------------------------------------------------------


def test_an_owners_first_session_claims_a_buffer_machine_instead_of_a_launch() -> None:
    kept = buffer_machine()
    node = node_of(kept, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[kept], tasks=[pending_task("t1", BOB)]), BUFFERED)
    tag = one_of(instance_tagging(result))
    assert tag.instance_id == "i-b1"
    assert set_tags(tag)["user_id"] == "bob"
    assert parse_timestamp(set_tags(tag)[INSTANCE_WARM_UNTIL_TAG]) == NOW + BUFFERED.max_start_s
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []
    assert "starting from the buffer" in waiting_for(result, "t1").reason


def test_a_claim_says_which_machine_goes_to_whom_with_and_without_a_cache_volume() -> None:
    """The claim's reasons are what ops read in the journal to follow a buffer machine to its owner."""
    kept = buffer_machine()
    plain = run(stopped_buffer(kept, tasks=[pending_task("t1", BOB)]), BUFFERED)
    assert one_of(instance_tagging(plain)).reason == (
        "1 pending task(s) of user_id=bob claim buffer machine i-b1 (t3.medium in eu-west-1a): it is theirs from"
        " now on, and started next"
    )
    assert actions_of(plain, AttachVolume) == []
    owned = volume("vol-1", ALICE_N1, zone=ZONE_A)
    tasks = [cached_task("t1", ALICE_N1, cpus=0.5), cached_task("t2", ALICE_N1, cpus=0.5)]
    cached = run(stopped_buffer(kept, tasks=tasks, volumes=[owned]), BUFFERED)
    assert one_of(instance_tagging(cached)).reason == (
        "2 pending task(s) of user_id=alice,project_id=p1,node_id=n1 claim buffer machine i-b1 (t3.medium in"
        " eu-west-1a), with cache volume vol-1: it is theirs from now on, and started next"
    )
    # The attach is an action of its own, with its reason (apply sends it once the claim's tags landed; issue 32).
    assert only(cached, ClaimBufferMachine).volume_id == "vol-1"
    assert [(a.volume_id, a.instance_id, a.reason) for a in actions_of(cached, AttachVolume)] == [
        (
            "vol-1",
            "i-b1",
            "cache volume vol-1 of user_id=alice,project_id=p1,node_id=n1 goes to buffer machine i-b1 they claim,"
            " which is stopped: attached before its start, so that its boot finds the device at once",
        )
    ]
    for task_id in ("t1", "t2"):
        told = waiting_for(cached, task_id)
        assert (told.service_name, told.owner, told.starting) == (f"service-{task_id}", ALICE_N1, True)
        assert told.reason == "starting from the buffer: machine i-b1 (t3.medium in eu-west-1a) is claimed for you"


@pytest.mark.parametrize(
    ("warm_ttls", "tagged"),
    [
        ((0,), None),  # no warm tier: terminated once idle, as a machine launched cold would be
        ((1,), "1"),  # the shortest warm tier still is one
        ((3600,), "3600"),
        ((60, 3600), "3600"),  # several tasks: the most generous tier among them
    ],
)
def test_a_claimed_machine_carries_its_owners_warm_tier(warm_ttls: tuple[int, ...], tagged: str | None) -> None:
    """The warm-ttl tag is what keeps the claimed machine stopped for its owner once idle (or not)."""
    tasks = [
        pending_task(f"t{n}", BOB, cpus=0.5, service_labels=CachePolicy(warm_ttl_s=ttl).to_labels())
        for n, ttl in enumerate(warm_ttls)
    ]
    result = run(stopped_buffer(buffer_machine(), tasks=tasks), BUFFERED)
    tags = set_tags(one_of(instance_tagging(result)))
    assert tags.get(INSTANCE_WARM_TTL_TAG) == tagged
    assert INSTANCE_VOLUME_TAG not in tags


def test_a_cache_owner_claims_only_a_machine_in_its_volumes_zone_and_names_the_volume() -> None:
    in_a, in_b = buffer_machine("i-ba"), buffer_machine("i-bb", zone=ZONE_B)
    policy = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A, ZONE_B))
    owned = volume("vol-1", ALICE_N1, zone=ZONE_B, state="available")
    nodes = [node_of(in_a, labelled=False, state="down"), node_of(in_b, labelled=False, state="down")]
    world = snapshot(nodes=nodes, instances=[in_a, in_b], tasks=[cached_task("t1", ALICE_N1)], volumes=[owned])
    result = run(world, policy)
    tag = one_of(instance_tagging(result))
    assert tag.instance_id == "i-bb"
    assert set_tags(tag)[INSTANCE_VOLUME_TAG] == "vol-1"
    # Attached to the stopped machine by an action of its own (sent once the claim's tags landed), so that its boot
    # finds the device.
    assert only(result, ClaimBufferMachine).volume_id == "vol-1"
    assert [(a.volume_id, a.instance_id) for a in actions_of(result, AttachVolume)] == [("vol-1", "i-bb")]


def test_a_cache_owner_without_a_volume_gets_it_made_in_the_claimed_machines_zone_in_the_same_plan() -> None:
    kept = buffer_machine()
    world = snapshot(nodes=[node_of(kept, labelled=False, state="down")], instances=[kept], tasks=[cached_task("t1")])
    result = run(world, BUFFERED)
    create = only(result, CreateVolume)
    assert (create.owner, create.availability_zone) == (ALICE_N1, kept.availability_zone)
    claim = only(result, ClaimBufferMachine)
    # No id yet: apply creates the volume first and claims with its id (that CreateVolume's token names it).
    assert (claim.instance_id, claim.volume_id, claim.volume_token) == (kept.id, None, create.client_token)
    assert result.actions.index(create) < result.actions.index(claim)
    assert actions_of(result, Launch) == []
    assert "starting from the buffer" in waiting_for(result, "t1").reason


def test_a_claim_whose_volume_was_created_with_it_gets_it_attached_while_still_stopped() -> None:
    # The claim's own attach was left out ("creating" then); once available the janitor attaches it to the stopped
    # machine (AWS attaches to a stopped instance), so that the start's boot finds the device at once.
    kept = buffer_machine()
    first = run(stopped_buffer(kept, tasks=[cached_task("t1")]), BUFFERED)
    create = only(first, CreateVolume)
    claimed = dataclasses.replace(
        buffer_machine(owner=ALICE_N1), volume_id="vol-new", claimed_at=NOW, warm_until=NOW + 500
    )
    made = volume_from_create(create, "vol-new", state="available", created_at=NOW + 1)
    second = run(
        next_snapshot(
            first,
            now=NOW + 2,
            nodes=[node_of(claimed, labelled=False, state="down")],
            tasks=[cached_task("t1")],
            instances=[claimed],
            volumes=[made],
        ),
        BUFFERED,
    )
    attach = only(second, AttachVolume)
    assert (attach.volume_id, attach.instance_id) == ("vol-new", kept.id)
    # Its reason says the machine is stopped, as it is (it said "runs" before issue 32).
    assert attach.reason == f"{kept.id} is stopped and waits for its owner's cache volume vol-new"


def test_a_stopped_machine_nobody_claimed_never_gets_a_volume_attached() -> None:
    stray = dataclasses.replace(buffer_machine(), volume_id="vol-a", claimed_at=NOW)  # a buffer machine, unclaimed
    result = run(stopped_buffer(stray, tasks=[], volumes=[volume("vol-a", ALICE_N1, zone=ZONE_A)]), BUFFERED)
    assert actions_of(result, AttachVolume) == []


def test_a_cache_owner_whose_only_volume_failed_claims_with_a_new_one() -> None:
    """No usable volume (its one is in error): a new one is made where the claimed machine is, never the broken one."""
    broken = volume("vol-bad", ALICE_N1, zone=ZONE_A, state="error")
    result = run(stopped_buffer(buffer_machine(), tasks=[cached_task("t1", ALICE_N1)], volumes=[broken]), BUFFERED)
    create = only(result, CreateVolume)
    assert create.owner == ALICE_N1
    claim = only(result, ClaimBufferMachine)
    assert (claim.volume_id, claim.volume_token) == (None, create.client_token)
    assert all(getattr(a, "volume_id", None) != "vol-bad" for a in result.actions)


def test_work_larger_than_the_buffered_type_launches_cold() -> None:
    kept = buffer_machine()
    large = pending_task("t1", BOB, cpus=1.5, memory_gib=6)
    result = run(
        snapshot(nodes=[node_of(kept, labelled=False, state="down")], instances=[kept], tasks=[large]), BUFFERED
    )
    assert instance_tagging(result) == []
    assert only(result, LaunchBatch).launches[0].owner == BOB


def test_a_claim_passes_over_a_cheaper_machine_whose_offering_is_out_of_capacity() -> None:
    """EC2 just refused that type in that zone: a start of it would likely fail too; the next one is taken."""
    cheap, dearer = buffer_machine("i-b1"), buffer_machine("i-b2", instance_type="m5.large")
    policy = make_policy(warm_buffer={"t3.medium": 1, "m5.large": 1}, availability_zones=(ZONE_A,))
    world = stopped_buffer(
        cheap, dearer, tasks=[pending_task("t1", BOB)], unavailable={("t3.medium", ZONE_A): NOW + 300}
    )
    assert one_of(instance_tagging(run(world, policy))).instance_id == "i-b2"


def test_a_claim_takes_the_cheapest_free_machine_that_fits() -> None:
    dearer, cheap = buffer_machine("i-b1", instance_type="m5.large"), buffer_machine("i-b2")
    policy = make_policy(warm_buffer={"t3.medium": 1, "m5.large": 1}, availability_zones=(ZONE_A,))
    world = stopped_buffer(dearer, cheap, tasks=[pending_task("t1", BOB)])
    assert one_of(instance_tagging(run(world, policy))).instance_id == "i-b2"


def test_two_owners_first_sessions_claim_a_machine_each_and_both_are_told() -> None:
    policy = make_policy(warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,))
    machines = (buffer_machine("i-b1"), buffer_machine("i-b2"))
    tasks = [pending_task("t1", BOB), pending_task("t2", ALICE_N1)]
    result = run(stopped_buffer(*machines, tasks=tasks), policy)
    assert sorted(tag.instance_id for tag in instance_tagging(result)) == ["i-b1", "i-b2"]
    assert all(waiting_for(result, task_id).starting for task_id in ("t1", "t2"))


def test_work_pinned_to_no_owner_never_claims_a_buffer_machine() -> None:
    """A claim makes a machine its owner's for good: work of nobody in particular launches as before."""
    world = stopped_buffer(buffer_machine(), tasks=[pending_task("t1", NOBODY)])
    result = run(world, BUFFERED)
    assert instance_tagging(result) == []
    assert [launch.task_ids for launch in actions_of(result, Launch)] == [("t1",)]


def test_a_buffer_machine_of_a_type_since_dropped_is_never_claimed_only_terminated() -> None:
    """g4dn.xlarge left the settings while one of its buffer machines was stopped: no owner gets it (it would be
    terminated in the same plan as their claim, and it is no type ops allow any more); the kept one is claimed."""
    dropped, kept = buffer_machine("i-b1", instance_type="g4dn.xlarge"), buffer_machine("i-b2")
    policy = make_policy(
        warm_buffer={"t3.medium": 1},
        availability_zones=(ZONE_A,),
        allowed_instance_types=("t3.medium",),
        price_per_hour={"t3.medium": 0.0416},
    )
    result = run(stopped_buffer(dropped, kept, tasks=[pending_task("t1", BOB)]), policy)
    assert [tag.instance_id for tag in instance_tagging(result)] == ["i-b2"]
    assert [end.instance_id for end in actions_of(result, Terminate)] == ["i-b1"]


def test_a_buffer_machine_in_a_zone_since_dropped_is_never_claimed() -> None:
    machine = buffer_machine("i-b1", zone=ZONE_B)
    result = run(stopped_buffer(machine, tasks=[pending_task("t1", BOB)]), BUFFERED)
    assert instance_tagging(result) == []
    assert [end.instance_id for end in actions_of(result, Terminate)] == ["i-b1"]


# -- a claimed machine from then on ------------------------------------------------------------------------


def test_a_claimed_buffer_machine_is_started_for_its_owner_then_labelled_for_them_when_it_joins() -> None:
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    node = node_of(machine, labelled=False, state="down")
    task = pending_task("t1", BOB)
    started = run(snapshot(nodes=[node], instances=[machine], tasks=[task]), BUFFERED)
    assert only(started, Start).instance_id == "i-b1"
    # The buffer refills in a later cycle: nothing is added to it in a cycle that starts a machine for an owner.
    assert actions_of(started, Launch) == []
    running = claimed(buffer_machine(state="running"), dict(machine.tags))
    joined = run(snapshot(nodes=[node_of(running, labelled=False)], instances=[running], tasks=[task]), BUFFERED)
    label = only(joined, LabelNode)
    assert labels_of(label)["user_id"] == "bob"


@pytest.mark.parametrize(
    ("state", "attached", "started"), [("creating", False, False), ("available", False, True), ("in-use", True, True)]
)
def test_a_claim_whose_new_volume_is_still_creating_is_started_only_once_it_can_be_attached(
    state: str, attached: bool, started: bool
) -> None:
    tags = {**ALICE_N1.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)}
    machine = dataclasses.replace(claimed(buffer_machine(), tags), volume_id="vol-new", claimed_at=NOW - 2)
    made = volume(
        "vol-new", ALICE_N1, zone=ZONE_A, state=state, attached_to=[attachment(machine.id)] if attached else []
    )
    world = stopped_buffer(machine, tasks=[cached_task("t1", ALICE_N1)], volumes=[made])
    result = run(world, BUFFERED)
    assert [a.instance_id for a in actions_of(result, Start)] == ([machine.id] if started else [])
    assert actions_of(result, Terminate) == []
    assert [a.owner for a in actions_of(result, Launch)] in ([], [NOBODY]), "no second machine for the owner"


@pytest.mark.parametrize("node_state", ["ready", "down"])
def test_a_claimed_machine_is_started_while_the_swarm_still_shows_its_node_ready(node_state: str) -> None:
    """Claimed seconds after its stop: the swarm has not missed its heartbeats yet and still says "ready". It is the
    owner's machine all the same (found by the buffer e2e test: it was launched past, then terminated)."""
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    node = node_of(machine, labelled=False, state=node_state)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", BOB)]), BUFFERED)
    assert only(result, Start).instance_id == "i-b1"
    assert actions_of(result, Terminate) == []
    assert actions_of(result, Launch) == []  # no second machine for the owner, and the refill waits for the start
    assert actions_of(result, LaunchBatch) == []


def test_the_refill_leaves_a_place_for_a_claimed_machine_whose_start_has_not_gone_through() -> None:
    """Issue 32 (fault campaign, seed 218): a claim's start was not sent (its tag call failed) and the refill took the
    last places under max_instances; the start found none, and the claim expired unstarted."""
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    other = instance("i-02", ALICE_N1)
    policy = make_policy(warm_buffer={"t3.medium": 1}, hot_buffer={"t3.medium": 1}, max_instances=3)

    result = run(snapshot(instances=[machine, other], nodes=[node_of(other)]), policy)

    # Three places: Alice's machine, the claim's start, and one for the buffer (not two).
    assert len([a for a in actions_of(result, Launch) if a.owner == NOBODY]) == 1


def claimed_with_volume(state: str, warm_until: float = NOW + 500) -> Instance:
    """Alice's claim of the warm buffer's machine, with her cache volume vol-1."""
    tags = {**ALICE_N1.labels(), INSTANCE_VOLUME_TAG: "vol-1", INSTANCE_WARM_UNTIL_TAG: format_timestamp(warm_until)}
    return claimed(buffer_machine(state=state), tags)


def test_a_started_claim_whose_node_still_shows_its_buffer_boot_is_waited_for_not_failed() -> None:
    """Started seconds after its stop, the swarm never missed the node: it is "ready" with the labels of its boot as
    a buffer machine (no cache volume). That is no failed mount: the machine comes back with the volume mounted
    (found by the buffer e2e test, which saw it terminated and a cold launch take its place)."""
    machine = claimed_with_volume("running")
    stale = node_of(buffer_machine(state="running"), labelled=False)  # the node as the buffer boot left it
    result = run(snapshot(nodes=[stale], instances=[machine], tasks=[cached_task("t1", ALICE_N1)]), BUFFERED)
    assert actions_of(result, Terminate) == []
    assert [launch.owner for launch in actions_of(result, Launch)] == [NOBODY]  # the buffer's refill only
    assert actions_of(result, LabelNode) == []  # no work, and no labels, before the node says it is mounted
    assert "comes back with your cache volume vol-1" in waiting_for(result, "t1").reason


def test_a_started_claim_whose_node_never_shows_the_volume_fails_its_mount_at_its_warm_until() -> None:
    machine = claimed_with_volume("running", warm_until=NOW)
    stale = node_of(buffer_machine(state="running"), labelled=False)
    result = run(snapshot(nodes=[stale], instances=[machine], tasks=[cached_task("t1", ALICE_N1)]), BUFFERED)
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-b1", "volume_missing")]


def test_a_started_claimed_machine_launched_long_ago_is_waited_for_not_late_nor_replaced() -> None:
    # Its launch was long before max_start_s ago (it waited in the buffer); its node is down until it rejoins.
    old = {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)}
    machine = instance("i-b1", state="running", launched_at=NOW - 7200, tags={INSTANCE_BUFFER_TAG: "true", **old})
    node = node_of(machine, labelled=False, state="down")
    task = pending_task("t1", BOB)
    first = run(snapshot(nodes=[node], instances=[machine], tasks=[task]), BUFFERED)
    assert actions_of(first, Terminate) == []
    assert [launch.purpose == "buffer" for launch in actions_of(first, Launch)] == [
        True
    ]  # the refill only, nothing for bob
    assert first.carried.down_since == {node.id: NOW}
    # Down for max_start_s: it goes as any machine that does not come back, and the work launches anew.
    late = run(snapshot(nodes=[node], instances=[machine], tasks=[task], down_since={node.id: NOW - 600}), BUFFERED)
    assert only(late, Terminate).cause == "node_down"


def test_a_claimed_machine_never_returns_to_the_buffer_nor_goes_to_another_owner() -> None:
    machine = claimed(buffer_machine(), {**BOB.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)})
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", ALICE_N1)]), BUFFERED)
    assert instance_tagging(result) == []
    assert actions_of(result, Start) == []
    assert tier_of(machine)[0] == "warm"
    # The buffer counts it no longer: a new buffer machine is launched beside it (the owner's launch first).
    assert any(launch.owner == ALICE_N1 for launch in actions_of(result, Launch))


def test_a_machine_claimed_beyond_a_shrunk_buffer_is_the_owners_not_the_buffers_surplus() -> None:
    """The buffer was shrunk to none while a machine was stopped in it: an owner's claim takes it (saving a
    launch), and the same plan does not terminate it as surplus."""
    machine = buffer_machine("i-b1")
    policy = make_policy(warm_buffer={"m5.large": 1}, availability_zones=(ZONE_A,))
    result = run(stopped_buffer(machine, tasks=[pending_task("t1", BOB)]), policy)
    assert [tag.instance_id for tag in instance_tagging(result)] == ["i-b1"]
    assert actions_of(result, Terminate) == []


# -- stopping a buffer machine that joined -----------------------------------------------------------------


def test_a_buffer_machine_that_joined_is_stopped_unlabelled_and_takes_no_work() -> None:
    booted = buffer_machine(state="running")
    node = node_of(booted, labelled=False)
    result = run(snapshot(nodes=[node], instances=[booted], tasks=[pending_task("t1")]), BUFFERED)
    stop = only(result, Stop)
    assert (stop.instance_id, stop.warm_until) == ("i-b1", None)
    assert actions_of(result, LabelNode) == []
    assert "buffer" not in waiting_for(result, "t1").reason


def test_only_a_joined_buffer_machine_nobody_works_on_is_stopped_and_once() -> None:
    """Work on a buffer node means someone activated it by hand: its machine is not stopped under it."""
    owners = instance("i-o1", BOB)
    busy, free = buffer_machine("i-b1", state="running"), buffer_machine("i-b2", state="running")
    busy_node = node_of(busy, labelled=False)
    nodes = [
        node_of(owners),
        busy_node,
        node_of(free, labelled=False),
        node_of(free, labelled=False, node_id="node-i-b2-stale"),  # a stale registration of the same machine
    ]
    world = snapshot(nodes=nodes, instances=[owners, busy, free], tasks=[running_task("t1", busy_node)])
    stops = actions_of(run(world, BUFFERED), Stop)
    assert [(stop.instance_id, stop.warm_until) for stop in stops] == [("i-b2", None)]
    assert stops[0].reason == (
        "buffer machine i-b2 (t3.medium in eu-west-1a) joined with its images pulled: stopped until an owner's"
        " first session claims it"
    )


@pytest.mark.parametrize(
    ("machine_state", "node_state"),
    [
        ("running", "down"),  # its boot has not joined yet (or its node dropped out): the images may not be there
        ("stopped", "ready"),  # stopped already; swarm has not noticed its heartbeats stopped
    ],
)
def test_a_buffer_machine_is_stopped_only_running_with_its_node_ready(machine_state: str, node_state: str) -> None:
    machine = buffer_machine("i-b1", state=machine_state)
    world = snapshot(nodes=[node_of(machine, labelled=False, state=node_state)], instances=[machine])
    assert actions_of(run(world, BUFFERED), Stop) == []


@pytest.mark.parametrize(
    ("state", "global_service", "stopped"),
    [
        ("running", False, False),  # someone's work runs there
        ("complete", False, True),  # it ran there once and is done
        ("running", True, True),  # a global service's task (a monitoring agent) follows every node
    ],
)
def test_which_tasks_keep_a_joined_buffer_machine_running(state: str, global_service: bool, stopped: bool) -> None:
    machine = buffer_machine(state="running")
    node = node_of(machine, labelled=False)
    task = replace(running_task("t1", node, state=state, desired_state=state), global_service=global_service)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]), BUFFERED)
    assert [stop.instance_id for stop in actions_of(result, Stop)] == (["i-b1"] if stopped else [])


# -- surplus -----------------------------------------------------------------------------------------------


def test_surplus_buffer_machines_are_terminated_when_the_buffer_shrinks() -> None:
    kept = buffer_machine()
    result = run(snapshot(instances=[kept]), make_policy(warm_buffer={}))
    terminate = only(result, Terminate)
    assert terminate.instance_id == "i-b1"
    assert "never ran anyone's work" in terminate.reason


@pytest.mark.parametrize(
    ("machines", "terminated", "reason"),
    [
        (  # the buffer was shrunk from 2 to 1: the machine beyond it goes
            [buffer_machine("i-b1"), buffer_machine("i-b2")],
            "i-b2",
            "buffer machine i-b2 (t3.medium in eu-west-1a) is beyond the warm buffer's 1 per zone for its type;"
            " it never ran anyone's work",
        ),
        (  # its zone is no longer one of the settings': none is kept there
            [buffer_machine("i-b1"), buffer_machine("i-b3", zone=ZONE_B)],
            "i-b3",
            "buffer machine i-b3 (t3.medium in eu-west-1b) is beyond the warm buffer's 0 per zone for its type;"
            " it never ran anyone's work",
        ),
    ],
)
def test_stopped_buffer_machines_beyond_the_settings_are_terminated(
    machines: list[Instance], terminated: str, reason: str
) -> None:
    result = run(stopped_buffer(*machines, tasks=[]), BUFFERED)
    assert [(t.instance_id, t.reason, t.cause) for t in actions_of(result, Terminate)] == [
        (terminated, reason, "buffer_surplus")
    ]


# -- trust under faults (issue 19) -------------------------------------------------------------------------


def test_no_buffer_machine_is_claimed_while_this_clock_disagrees_with_aws() -> None:
    """A claim writes a warm-until: a clock behind or ahead would write it wrong (behaviour 1)."""
    kept = buffer_machine()
    for skew_s in (-600.0, 600.0):
        world = dataclasses.replace(stopped_buffer(kept, tasks=[pending_task("t1", BOB)]), aws_now=NOW + skew_s)
        result = run(world, BUFFERED)
        assert instance_tagging(result) == []
        assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]  # a cold launch instead


def test_a_buffer_machine_holding_another_owners_volume_is_never_offered_and_the_volume_is_detached() -> None:
    """A claim whose tags never landed but whose attach did leaves alice's volume on an anonymous machine: bob must
    never be started on it (behaviour 2)."""
    half = buffer_machine("i-b1")
    clean = buffer_machine("i-b2")
    alices = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-b1")])

    result = run(stopped_buffer(half, clean, tasks=[pending_task("t1", BOB)], volumes=[alices]), BUFFERED)

    assert [(c.instance_id, c.owner) for c in instance_tagging(result)] == [("i-b2", BOB)]
    detach = only(result, DetachVolume)
    assert (detach.volume_id, detach.instance_id, detach.force, detach.reason) == (
        "vol-1",
        "i-b1",
        False,
        "cache volume vol-1 of user_id=alice,project_id=p1,node_id=n1 is attached to buffer machine i-b1, which"
        " nobody claimed: detached, it stays its owner's",
    )
    # An attach still on its way is as much an attachment; a detached one (or one on its owner's machine) is none.
    attaching = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-b1", state="attaching")])
    assert only(run(stopped_buffer(half, tasks=[], volumes=[attaching]), BUFFERED), DetachVolume).volume_id == "vol-1"
    gone = volume("vol-1", ALICE_N1, state="available", attached_to=[attachment("i-b1", state="detached")])
    assert actions_of(run(stopped_buffer(half, tasks=[], volumes=[gone]), BUFFERED), DetachVolume) == []


def test_a_stopped_buffer_machine_whose_node_was_removed_is_terminated_and_never_claimed() -> None:
    """It could never come back as a node (behaviour 9)."""
    orphan = buffer_machine("i-b1")

    result = run(snapshot(instances=[orphan], tasks=[pending_task("t1", BOB)]), BUFFERED)

    assert [(t.instance_id, t.cause, t.reason) for t in actions_of(result, Terminate)] == [
        (
            "i-b1",
            "node_down",
            "buffer machine i-b1 (t3.medium in eu-west-1a) is stopped and its swarm node was removed: it could never"
            " serve a session; it never ran anyone's work",
        )
    ]
    assert instance_tagging(result) == []
    # Not counted as the buffer's: its part is refilled in the same plan when nobody waits.
    assert [launch.purpose for launch in actions_of(run(snapshot(instances=[orphan]), BUFFERED), Launch)] == ["buffer"]


def test_a_joined_buffer_machine_takes_its_stop_from_the_one_budget_and_goes_past_it() -> None:
    """The buffer's own stop took no room: with the cap reached by the warm tier, it would exceed it (behaviour 11)."""
    policy = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=1)
    warm_one = instance("i-w", BOB, state="stopped", tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 600)})
    joined = buffer_machine("i-b1", state="running")
    nodes = [node_of(joined, labelled=False), node_of(warm_one, state="down")]

    result = run(snapshot(nodes=nodes, instances=[joined, warm_one]), policy)

    assert actions_of(result, Stop) == []
    (end,) = actions_of(result, Terminate)
    assert (end.instance_id, end.cause, end.reason) == (
        "i-b1",
        "buffer_surplus",
        "buffer machine i-b1 (t3.medium in eu-west-1a) joined, but max_stopped_instances=1 machines are stopped (or"
        " about to be) already: terminated, it never ran anyone's work",
    )


CAROL = Owner(user_id="carol")


def test_with_room_to_start_one_machine_one_owner_claims_and_the_other_waits_for_max_instances() -> None:
    policy = make_policy(max_instances=2, warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,))
    busy = instance("i-09", CAROL)
    world = stopped_buffer(
        buffer_machine("i-b1"), buffer_machine("i-b2"), tasks=[pending_task("t1", BOB), pending_task("t2", ALICE_N1)]
    )
    world = dataclasses.replace(world, nodes=(*world.nodes, node_of(busy)), instances=(*world.instances, busy))

    result = run(world, policy)

    (claimed,) = actions_of(result, ClaimBufferMachine)
    other = "t2" if claimed.owner == BOB else "t1"
    assert waiting_for(result, other).reason == "max_instances=2 reached (2 running or starting)"


def _resume_and_claim(*tasks: Task) -> Snapshot:
    """Alice's warm machine, which her cached task resumes, a stopped buffer machine, and `tasks`."""
    warm = warm_machine()
    world = stopped_buffer(buffer_machine("i-b1"), tasks=[cached_task("t1", ALICE_N1), *tasks])
    return dataclasses.replace(
        world,
        nodes=(*world.nodes, node_of(warm, state="down", availability="drain")),
        instances=(*world.instances, warm),
    )


def test_a_resume_counts_against_the_machines_a_claim_may_start() -> None:
    policy = make_policy(max_instances=2, warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    busy = instance("i-09", CAROL)
    world = _resume_and_claim(pending_task("t2", BOB))
    world = dataclasses.replace(world, nodes=(*world.nodes, node_of(busy)), instances=(*world.instances, busy))

    result = run(world, policy)

    assert only(result, Start).instance_id == "i-01"
    assert actions_of(result, ClaimBufferMachine) == []
    assert waiting_for(result, "t2").reason.startswith("max_instances=2 reached")


def test_a_resume_and_a_claim_both_count_against_the_launches_of_the_same_plan() -> None:
    policy = make_policy(max_instances=2, warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    world = _resume_and_claim(pending_task("t2", BOB), pending_task("t3", CAROL))

    result = run(world, policy)

    assert only(result, Start).instance_id == "i-01"
    (claimed,) = actions_of(result, ClaimBufferMachine)
    assert actions_of(result, Launch) == []
    other = "t3" if claimed.owner == BOB else "t2"
    assert waiting_for(result, other).reason.startswith("max_instances=2 reached")


def test_at_max_instances_no_buffer_machine_is_claimed_that_this_plan_could_not_start() -> None:
    """A claim that cannot start expires, and the next machine is claimed: the buffer burns itself (behaviour 12)."""
    policy = dataclasses.replace(BUFFERED, max_instances=1)
    busy = instance("i-01", ALICE)
    kept = buffer_machine("i-b1")
    nodes = [node_of(busy), node_of(kept, labelled=False, state="down")]

    result = run(snapshot(nodes=nodes, instances=[busy, kept], tasks=[pending_task("t1", BOB)]), policy)

    assert instance_tagging(result) == []
    assert waiting_for(result, "t1").reason == "max_instances=1 reached (1 running or starting)"
