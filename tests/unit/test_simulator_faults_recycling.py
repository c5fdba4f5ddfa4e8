"""The fault campaign's recycling (issue 33): some campaigns draw owners who recycle and owners who accept, and each
recycling check fails on a world built to break it (and holds on the same world done right)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest
from warmswarm_models import (
    INSTANCE_BUFFER_TAG,
    INSTANCE_SCRUB_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    GroupProperties,
    Owner,
    Resources,
    format_timestamp,
)
from warmswarm_simulator.config import GIB, load_model
from warmswarm_simulator.faults import checks
from warmswarm_simulator.faults.campaign import Campaign
from warmswarm_simulator.faults.kinds import NAMES
from warmswarm_simulator.faults.runner import Plan, campaign
from warmswarm_simulator.faults.scenario import Booking, draw
from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.workload import Session

MODEL = load_model()
ZONE = MODEL.availability_zones[0]
ALICE = Owner("u1", "p1", "n1")  # her group recycles and does not accept recycled machines
BOB = Owner("u2", "p2", "n2")  # his group accepts recycled machines
CAROL = Owner("u3", "p3", "n3")  # her group neither recycles nor accepts
TOKEN_1 = "pending-1.1772409600"  # the scrub tag of a first recycle (contract: pending-<n>.<t>)
_GROUPS = {
    "g1": GroupProperties(ebs_cache_enabled=True, cache_ttl_s=60, recycle_machines=True),
    "g2": GroupProperties(accept_recycled=True),
    "g3": GroupProperties(),
}


@pytest.fixture
def world() -> Iterator[Campaign]:
    """A campaign of seed 1 with no fault: a world to break by hand, with Alice, Bob and Carol as owners (their
    sessions never start: the campaign is not run)."""
    drawn = draw(1, 60, (), MODEL)
    sessions = tuple(
        Session(1e9, f"u{n}", f"p{n}", f"n{n}", 0.5, 1.0, 0, 60.0, f"g{n}", 0.0) for n in (1, 2, 3)
    )  # Alice's, Bob's and Carol's
    built = Campaign(dataclasses.replace(drawn, sessions=sessions, groups=dict(_GROUPS)))
    yield built
    built.loop.close()


def _advance(built: Campaign, seconds: float) -> None:
    built.loop.run_until_complete(asyncio.sleep(seconds))


def _joined(built: Campaign, tags: dict[str, str]) -> tuple[str, str]:
    (instance_id,) = built.parts.cloud.run_instances("t3.medium", ZONE, 1, tags)
    _advance(built, 120.0)
    return instance_id, built.parts.machines.node_of[instance_id]


def _serve(built: Campaign, node_id: str, owner: Owner) -> str:
    """The owner's task runs on the node (its labels the owner's): the service's id."""
    built.parts.swarm.update_node(node_id, owner.labels(), "active")
    service_id = built.parts.swarm.create_service(
        f"ws-{owner.user_id}", {}, tuple(owner.constraints()), Resources(0.5, GIB), SESSION_IMAGE, _no, _nothing
    )
    _advance(built, 1.0)
    built.recycling.after_cycle()
    return service_id


def _no(_node: object) -> None:
    return None


def _nothing() -> None:
    return None


def _scrubbed(built: Campaign, instance_id: str) -> None:
    """Stopped, then started while its scrub of token 1.<t> is owed: its node comes back with the proof."""
    cloud = built.parts.cloud
    cloud.stop_instances([instance_id])
    _advance(built, 60.0)
    cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: TOKEN_1})
    cloud.start_instances([instance_id])
    _advance(built, 120.0)


def _failed(built: Campaign) -> list[str]:
    return [f.check for f in built.history.failures]


def test_a_task_on_a_machine_another_owner_used_fails_unless_a_scrub_was_proven_between(world: Campaign) -> None:
    _, node_id = _joined(world, ALICE.labels())
    world.parts.swarm.remove_service(_serve(world, node_id, ALICE))
    _serve(world, node_id, BOB)
    # Its node labelled for Bob (recycle-claim, issue 42: labelled for an owner is offered), his task on it.
    assert _failed(world) == [checks.RECYCLE_CLAIM, checks.RECYCLE_UNSCRUBBED]


def test_a_task_after_a_proven_scrub_passes(world: Campaign) -> None:
    instance_id, node_id = _joined(world, ALICE.labels())
    world.parts.swarm.remove_service(_serve(world, node_id, ALICE))
    _scrubbed(world, instance_id)
    assert world.parts.node_of(instance_id) is not None
    world.recycling.after_cycle()  # the proof seen
    _serve(world, node_id, BOB)
    assert _failed(world) == []


def test_a_claim_of_a_machine_that_owes_its_scrub_fails(world: Campaign) -> None:
    instance_id, node_id = _joined(world, {INSTANCE_BUFFER_TAG: "true"})
    world.parts.swarm.remove_service(_serve(world, node_id, ALICE))
    world.parts.cloud.tag_instance(instance_id, BOB.labels())  # Bob claims it, unscrubbed
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_CLAIM]


def test_a_claim_of_a_machine_holding_another_owners_volume_fails(world: Campaign) -> None:
    parts = world.parts
    volume_id = parts.cloud.volumes.create(ZONE, 10, "gp3", {**ALICE.labels(), VOLUME_TTL_TAG: "60"}, "")
    instance_id, _ = _joined(world, {INSTANCE_BUFFER_TAG: "true"})
    parts.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    world.recycling.after_cycle()
    parts.cloud.tag_instance(instance_id, BOB.labels())
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_CLAIM]


def test_a_recycled_machine_to_an_owner_who_does_not_accept_one_fails(world: Campaign) -> None:
    instance_id, node_id = _joined(world, {INSTANCE_BUFFER_TAG: "true"})
    world.parts.swarm.remove_service(_serve(world, node_id, ALICE))
    _scrubbed(world, instance_id)
    world.recycling.after_cycle()
    world.parts.cloud.tag_instance(instance_id, CAROL.labels())
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_UNACCEPTED]
    world.parts.cloud.tag_instance(instance_id, {INSTANCE_BUFFER_TAG: "true", **Owner().labels()})
    world.recycling.after_cycle()
    world.parts.cloud.tag_instance(instance_id, BOB.labels())  # Bob accepts: no new failure
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_UNACCEPTED]


def test_a_recycling_owners_volume_left_unreleased_fails_at_the_end_and_a_released_one_passes(
    world: Campaign,
) -> None:
    parts = world.parts
    kept = parts.cloud.volumes.create(ZONE, 10, "gp3", {**ALICE.labels(), VOLUME_TTL_TAG: "600"}, "")
    released = parts.cloud.volumes.create(ZONE, 10, "gp3", {**ALICE.labels(), VOLUME_TTL_TAG: "600"}, "")
    parts.cloud.volumes.set_tags(released, {VOLUME_RELEASED_AT_TAG: format_timestamp(parts.world.epoch())})
    world.recycling.after_cycle()
    _advance(world, 300.0)  # longer than a resync and a busy cycle
    world.recycling.at_end()
    assert [(f.check, kept in f.message) for f in world.history.failures] == [(checks.RECYCLE_RELEASED, True)]


def test_a_crashed_scrub_boot_never_joins_and_fails_unless_terminated(world: Campaign) -> None:
    parts = world.parts
    instance_id, _ = _joined(world, ALICE.labels())
    parts.cloud.stop_instances([instance_id])
    _advance(world, 60.0)
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: TOKEN_1})
    parts.cloud.start_instances([instance_id])
    _advance(world, world.scenario.model.ec2.start_pending_s + 1.0)
    world.dice.rates["scrub"] = 1.0
    world.recycling.strike()
    _advance(world, 120.0)
    node = parts.node_of(instance_id)
    assert node is not None
    assert node.state == "down"  # it never came back
    world.recycling.at_end()
    assert _failed(world) == [checks.SCRUB_CRASHED]
    parts.cloud.terminate_instances([instance_id])
    world.history.failures.clear()
    world.recycling.at_end()
    assert _failed(world) == []


def test_campaigns_draw_owners_who_recycle_and_owners_who_accept_and_old_draws_keep_their_settings() -> None:
    drawn = [draw(seed, 60, NAMES, MODEL) for seed in range(1, 41)]
    recycling = [s for s in drawn if any(g.recycle_machines for g in s.groups.values())]
    assert 5 < len(recycling) < 35
    assert any(any(g.accept_recycled for g in s.groups.values()) for s in recycling)
    assert all(s.settings.warm_buffer or s.settings.hot_buffer for s in recycling)  # so that a machine may recycle
    # Recycling's draws have a stream of their own: a campaign without recycling is the one it was before.
    plain = next(s for s in drawn if s not in recycling)
    assert "scrub" not in plain.rates
    assert "detach" not in plain.rates
    assert draw(24, 60, NAMES, MODEL, recycling=False).groups != draw(24, 60, NAMES, MODEL).groups  # 24 recycles


def test_stripped_machines_stopped_for_their_scrub_boot_count_against_every_buffer_place_not_the_warm_ones() -> None:
    """Correction of the deadline check (seed 67): a recycled machine stripped to the buffer's tags and stopped until
    its scrub boot took a buffer place, hot or warm, and may wait while owners' work comes first (seed 115): it is not
    a warm buffer machine over the warm places, but the stopped ones may not outnumber all the buffer's places."""
    drawn = draw(1, 60, (), MODEL)
    settings = drawn.settings.model_copy(
        update={"warm_buffer": {}, "hot_buffer": {"t3.medium": 1}, "max_stopped_instances": 8}
    )
    built = Campaign(dataclasses.replace(drawn, sessions=(), settings=settings))
    places = len(settings.zones())  # one hot place per zone, no warm one
    ids = [_joined(built, {INSTANCE_BUFFER_TAG: "true", INSTANCE_SCRUB_TAG: TOKEN_1})[0] for _ in range(places + 1)]
    built.parts.cloud.stop_instances(ids[:places])
    _advance(built, settings.max_start_s + settings.resync_interval_s + settings.max_clock_skew_s + 60.0)
    built.invariants.after_cycle()
    assert checks.DEADLINE not in _failed(built)  # as long as they wait, within the places
    built.parts.cloud.stop_instances(ids[places:])
    _advance(built, 30.0)
    built.invariants.after_cycle()
    assert _failed(built) == [checks.DEADLINE]
    built.loop.close()


def test_a_reservations_sessions_are_buffer_places_a_machine_stopped_for_its_scrub_boot_may_take() -> None:
    """Correction of seed 210: the recycled machine took a hot place a reservation made (the buffers hold machines for
    its sessions), so the stopped buffer machines may number the warm and hot places plus the reserved sessions."""
    drawn = draw(1, 60, (), MODEL)
    settings = drawn.settings.model_copy(update={"warm_buffer": {}, "hot_buffer": {}, "max_stopped_instances": 8})
    booking = Booking(1, "g1", 1, (0.5, 1.0), 100.0, None, 60)
    built = Campaign(dataclasses.replace(drawn, sessions=(), settings=settings, bookings=(booking,)))
    built.dice.cycle = 1
    (instance_id, _) = _joined(built, {INSTANCE_BUFFER_TAG: "true", INSTANCE_SCRUB_TAG: TOKEN_1})
    built.parts.cloud.stop_instances([instance_id])
    _advance(built, 30.0)
    built.invariants.after_cycle()
    assert _failed(built) == []
    built.loop.close()


def test_a_recycled_machine_proven_then_claimed_and_stopped_warm_may_hold_its_new_owners_volume(
    world: Campaign,
) -> None:
    """Correction of recycle-released (seed 27970, 10,000 campaigns at main's head): a machine recycled once, proven
    (its scrub tag done-) and claimed by Alice from the hot buffer keeps her volume attached while stopped in her warm
    tier; the check took any scrub tag for a recycle under way, one that must let the volume go. A mark not yet
    proven (pending-) still counts as letting it go."""
    parts = world.parts
    volume_id = parts.cloud.volumes.create(ZONE, 10, "gp3", {**ALICE.labels(), VOLUME_TTL_TAG: "600"}, "")
    instance_id, _ = _joined(world, {**ALICE.labels(), INSTANCE_SCRUB_TAG: "done-1.1772409600"})
    parts.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    parts.cloud.stop_instances([instance_id])  # her warm tier: disks and cache stay
    world.recycling.after_cycle()
    _advance(world, 300.0)  # longer than a resync and a busy cycle
    world.recycling.after_cycle()
    world.recycling.at_end()
    assert _failed(world) == []

    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: "pending-2.1772409900"})  # marked: it must let go
    world.recycling.after_cycle()
    _advance(world, 300.0)
    world.recycling.at_end()
    assert _failed(world) == [checks.RECYCLE_RELEASED]


def test_a_proof_counts_only_for_the_exact_token_the_scrub_tag_asks_for(world: Campaign) -> None:
    """Issue 42: the campaign counted any warmswarm.scrubbed label as proof. A node that shows the proof of token 1
    while the machine's tag asks for token 2 (a new mark, or one set back by hand) proves nothing: a claim fails."""
    instance_id, node_id = _joined(world, {INSTANCE_BUFFER_TAG: "true"})
    world.parts.swarm.remove_service(_serve(world, node_id, ALICE))
    world.parts.swarm.update_node(node_id, None, "drain", remove_labels=tuple(ALICE.labels()))
    _scrubbed(world, instance_id)  # proof of TOKEN_1 on its node
    world.parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: "pending-2.1772413200"})
    world.recycling.after_cycle()
    world.parts.cloud.tag_instance(instance_id, BOB.labels())
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_CLAIM]


def test_a_proof_left_on_the_disk_by_a_boot_before_the_last_owner_proves_nothing(world: Campaign) -> None:
    """The proof survives boots (daemon.json): a boot that owed no scrub joins with the one an earlier boot wrote.
    Bob worked on the machine after that scrub; the tag set back to its token afterwards must not pass it to Carol's."""
    parts = world.parts
    instance_id, node_id = _joined(world, {INSTANCE_BUFFER_TAG: "true"})
    parts.swarm.remove_service(_serve(world, node_id, ALICE))
    parts.swarm.update_node(node_id, None, "drain", remove_labels=tuple(ALICE.labels()))
    _scrubbed(world, instance_id)
    world.recycling.after_cycle()  # proven: the claim below is fine
    parts.cloud.tag_instance(instance_id, {**BOB.labels(), INSTANCE_SCRUB_TAG: f"done-{TOKEN_1[len('pending-') :]}"})
    parts.swarm.remove_service(_serve(world, node_id, BOB))
    assert _failed(world) == []
    parts.swarm.update_node(node_id, None, "drain", remove_labels=tuple(BOB.labels()))
    parts.cloud.untag_instance(instance_id, list(BOB.labels()))
    parts.cloud.stop_instances([instance_id])
    _advance(world, 60.0)
    parts.cloud.start_instances([instance_id])  # a boot that owes nothing: its node shows token 1's proof still
    _advance(world, 120.0)
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: TOKEN_1})  # set back by hand to that token
    world.recycling.after_cycle()
    parts.cloud.tag_instance(instance_id, CAROL.labels())
    world.recycling.after_cycle()
    assert _failed(world) == [checks.RECYCLE_CLAIM, checks.RECYCLE_UNACCEPTED]


@pytest.mark.parametrize(
    ("seed", "kind", "seen"),
    [
        (3, "reboot", "which owes its scrub (after its strip), reboots"),
        (8, "tags", "a person deletes warmswarm:scrub"),
        (14, "tags", "a person sets warmswarm:recycled of i-00000000000000004 ('1' -> '0', set back)"),
        (21, "metadata", "the metadata service answers 5 s late"),
    ],
)
def test_campaigns_where_the_new_faults_strike_a_recycled_machine_mark_prove_and_pass(
    seed: int, kind: str, seen: str
) -> None:
    outcome = campaign(seed, Plan(60, NAMES))
    assert any(f.kind == kind and seen in f.detail for f in outcome.history.faults)
    assert outcome.marks >= 1
    assert outcome.proofs >= 1
    assert outcome.history.failures == []


def test_a_stripped_machine_whose_scrub_tag_a_person_garbled_still_awaits_its_scrub_boot_in_a_buffer_place() -> None:
    """Correction of deadline (seed 30616, the "tags" fault): the planner holds an unreadable scrub tag owed with a
    token no node proves (it starts the machine for its scrub, then terminates it unproven); the check took the
    stripped, stopped machine for a warm buffer machine over the warm places."""
    drawn = draw(1, 60, (), MODEL)
    settings = drawn.settings.model_copy(
        update={"warm_buffer": {}, "hot_buffer": {"t3.medium": 1}, "max_stopped_instances": 8}
    )
    built = Campaign(dataclasses.replace(drawn, sessions=(), settings=settings))
    instance_id, _ = _joined(built, {INSTANCE_BUFFER_TAG: "true", INSTANCE_SCRUB_TAG: TOKEN_1})
    built.parts.cloud.stop_instances([instance_id])
    built.parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: "scrubbed"})
    _advance(built, 30.0)
    built.invariants.after_cycle()
    assert _failed(built) == []
    built.parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: "done-1.1772409600"})  # proven: a warm one
    built.invariants.after_cycle()
    assert _failed(built) == [checks.DEADLINE]
    built.loop.close()
