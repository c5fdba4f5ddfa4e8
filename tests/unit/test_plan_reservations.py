"""Reservations (plan/reservations.py): the hot buffer raised for a known burst from at - lead_s to at +
release_after_s, combined with the buffers' own targets, within max_instances; released, its unclaimed machines go."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from warmswarm_autoscaling.actions import Launch, Terminate
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.reservations import describe, lead_s, refusals, spread, unobserved
from warmswarm_autoscaling.plan.result import BufferPart, Hold
from warmswarm_autoscaling.snapshot import Instance, Snapshot
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    format_timestamp,
)
from warmswarm_models.reservation import Reservation, ReservedSize

from .factories import (
    ALICE_N1,
    BOB,
    INSTANCE_TYPES,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    instance,
    make_policy,
    node_of,
    run,
    snapshot,
)

GIB: Final = 2**30
SMALL: Final = ReservedSize(cpus=0.5, memory_bytes=GIB // 4)
# Lead = 60 s × 2 = 120 s.
POLICY: Final = make_policy(buffer_refill_s=60.0, reservation_lead_margin=2.0, availability_zones=(ZONE_A, ZONE_B))
HOT_TAGS: Final = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}


def reservation(
    sessions: int = 3, *, at: float = NOW + 60, zone: str | None = ZONE_A, size: ReservedSize = SMALL, **more: Any
) -> Reservation:
    return Reservation(
        id=more.pop("id", "resv-000000000001"),
        group="class-7b",
        sessions=sessions,
        resources=size,
        at=at,
        zone=zone,
        created_at=NOW - 600,
        **more,
    )


def hot(instance_id: str, zone: str = ZONE_A, *, claimed_at: float | None = None, **kwargs: Any) -> Instance:
    tags = dict(HOT_TAGS)
    if claimed_at is not None:
        tags |= {**ALICE_N1.labels(), INSTANCE_CLAIMED_AT_TAG: format_timestamp(claimed_at)}
    return instance(instance_id, zone=zone, tags=tags, **kwargs)


def world(*reserved: Reservation, machines: tuple[Instance, ...] = (), unread: bool = False, **kw: Any) -> Snapshot:
    """The snapshot with these reservations; every running machine's node joined (hot ones drained, unlabelled)."""
    nodes = [node_of(m, labelled=m.owner != BOB and not m.in_buffer) for m in machines if m.state == "running"]
    base = snapshot(instances=machines, nodes=nodes, **kw)
    return dataclasses.replace(base, reservations=reserved, reservations_unread=unread)


def hot_launches(result: Any) -> list[Launch]:
    return [a for a in actions_of(result, Launch) if a.purpose == "hot_buffer"]


def test_lead_time_is_the_refill_time_times_the_margin() -> None:
    assert lead_s(POLICY) == 120.0
    assert lead_s(make_policy()) == 240.0 * 2.0  # the defaults: 240 s refill, margin 2


def test_the_buffer_fills_from_at_minus_lead_and_not_a_second_before() -> None:
    assert hot_launches(run(world(reservation(at=NOW + 120.5)), POLICY)) == []
    launched = hot_launches(run(world(reservation(at=NOW + 120)), POLICY))
    assert len(launched) == 3
    assert {(a.instance_type, a.availability_zone) for a in launched} == {("t3.medium", ZONE_A)}
    assert all(
        a.reason.startswith(
            f"reservation resv-000000000001 for group class-7b: 3 sessions at {format_timestamp(NOW + 120)}"
        )
        for a in launched
    ), launched[0].reason


def test_a_reservation_is_released_at_at_plus_release_after_s() -> None:
    # Still active a second before its release; released at it.
    assert len(hot_launches(run(world(reservation(at=NOW - 899, release_after_s=900)), POLICY))) == 3
    assert hot_launches(run(world(reservation(at=NOW - 900, release_after_s=900)), POLICY)) == []


def test_zone_any_spreads_the_sessions_over_the_allowed_zones() -> None:
    launched = hot_launches(run(world(reservation(5, zone=None)), POLICY))
    assert sorted(a.availability_zone for a in launched) == [ZONE_A] * 3 + [ZONE_B] * 2
    assert spread(5, ["a", "b"]) == {"a": 3, "b": 2}
    assert spread(1, ["a", "b", "c"]) == {"a": 1}


def test_a_fixed_zone_keeps_them_there() -> None:
    launched = hot_launches(run(world(reservation(2, zone=ZONE_B)), POLICY))
    assert [a.availability_zone for a in launched] == [ZONE_B, ZONE_B]


def test_the_cheapest_type_one_session_fits_is_kept() -> None:
    big = ReservedSize(cpus=3.0, memory_bytes=8 * GIB)  # beyond a t3.medium and an m5.large once the overhead goes
    launched = hot_launches(run(world(reservation(1, size=big)), POLICY))
    assert [a.instance_type for a in launched] == ["m5.xlarge"]


def test_the_target_is_the_larger_of_the_buffers_own_and_the_reservations() -> None:
    own = dataclasses.replace(POLICY, hot_buffer={"t3.medium": 2})
    launched = hot_launches(run(world(reservation(3, zone=ZONE_A)), own))
    assert sorted(a.availability_zone for a in launched) == [ZONE_A] * 3 + [ZONE_B] * 2
    more = dataclasses.replace(POLICY, hot_buffer={"t3.medium": 4}, availability_zones=(ZONE_A,))
    assert len(hot_launches(run(world(reservation(3)), more))) == 4


def test_two_reservations_of_one_part_add_up() -> None:
    first, second = reservation(2), reservation(3, id="resv-000000000002", at=NOW + 90)
    launched = hot_launches(run(world(first, second), POLICY))
    assert len(launched) == 5
    assert "resv-000000000001" in launched[0].reason
    assert "resv-000000000002" in launched[0].reason


def test_reservation_machines_count_against_max_instances_not_the_demand_budget() -> None:
    tight = dataclasses.replace(
        POLICY, max_instances=3, buffer_sizing="demand", hot_buffer={"t3.medium": 1}, buffer_daily_budget_usd=0.0
    )
    busy = instance("i-busy", BOB)
    assert len(hot_launches(run(world(reservation(5), machines=(busy,)), tight))) == 2


def test_held_machines_are_kept_and_not_launched_again() -> None:
    machines = (hot("i-h1"), hot("i-h2"), hot("i-h3"))
    result = run(world(reservation(3), machines=machines), POLICY)
    assert hot_launches(result) == []
    assert actions_of(result, Terminate) == []
    (hold,) = result.holds  # the plan's own: what the status answer formats
    assert hold.held == {ZONE_A: 3}
    assert hold.status(NOW) == "ready"


def test_a_hot_machine_no_claim_would_take_is_not_held_for_a_reservation() -> None:
    """One claimable rule (issue 32): a hot machine whose node someone activated is no claim's, so the reservation
    does not count it held nor reports ready on it (it counted every running, joined hot machine before)."""
    machines = (hot("i-h1"), hot("i-h2"), hot("i-h3"))
    base = world(reservation(3), machines=machines)
    activated = [node_of(m, labelled=False, availability="active" if m.id == "i-h3" else None) for m in machines]
    result = run(dataclasses.replace(base, nodes=tuple(activated)), POLICY)
    (hold,) = result.holds
    assert hold.held == {ZONE_A: 2}
    assert hold.status(NOW) == "filling"


def test_once_released_what_is_left_unclaimed_is_terminated_and_a_claimed_machine_never() -> None:
    claimed = hot("i-claimed", claimed_at=NOW - 100)
    machines = (hot("i-h1"), hot("i-h2"), claimed)
    result = run(world(reservation(3, at=NOW - 1000, release_after_s=900), machines=machines), POLICY)
    assert {a.instance_id for a in actions_of(result, Terminate)} == {"i-h1", "i-h2"}


def test_deleting_a_reservation_lets_its_machines_go_as_surplus() -> None:
    result = run(world(machines=(hot("i-h1"), hot("i-h2"))), POLICY)
    assert {a.instance_id for a in actions_of(result, Terminate)} == {"i-h1", "i-h2"}


def test_a_store_that_did_not_answer_lets_no_machine_go_that_cycle() -> None:
    result = run(world(machines=(hot("i-h1"), hot("i-h2")), unread=True), POLICY)
    assert actions_of(result, Terminate) == []


def test_sessions_claimed_since_at_are_not_refilled_but_claims_before_at_are() -> None:
    after = (hot("i-c1", claimed_at=NOW - 20), hot("i-c2", claimed_at=NOW - 10))
    assert len(hot_launches(run(world(reservation(3, at=NOW - 30), machines=after), POLICY))) == 1
    before = (hot("i-c1", claimed_at=NOW - 50), hot("i-c2", claimed_at=NOW - 40))
    assert len(hot_launches(run(world(reservation(3, at=NOW - 30), machines=before), POLICY))) == 3


def test_a_size_no_type_fits_is_said_and_holds_nothing() -> None:
    huge = ReservedSize(cpus=64.0, memory_bytes=512 * GIB)
    result = run(world(reservation(2, size=huge)), POLICY)
    assert hot_launches(result) == []
    assert any("no allowed instance type fits one session" in n for n in result.notices), result.notices


def test_the_plan_looks_again_when_a_reservation_starts_filling() -> None:
    result = run(world(reservation(at=NOW + 500)), POLICY)
    assert result.deadline == NOW + 500 - 120


def test_refusals_name_each_field() -> None:
    offerings = Offerings(INSTANCE_TYPES, POLICY)
    assert refusals(reservation(), POLICY, offerings, NOW) == []
    past = refusals(reservation(at=NOW), POLICY, offerings, NOW)
    assert [field for field, _ in past] == ["at"]
    zone = refusals(reservation(zone="mars-1a"), POLICY, offerings, NOW)
    assert [field for field, _ in zone] == ["zone"]
    many = refusals(reservation(11), POLICY, offerings, NOW)
    assert [field for field, _ in many] == ["sessions"]
    huge = ReservedSize(cpus=64.0, memory_bytes=512 * GIB)
    assert [field for field, _ in refusals(reservation(size=huge), POLICY, offerings, NOW)] == ["resources"]
    # Before a cycle saw the types, the size is the planner's to judge.
    assert refusals(reservation(size=huge), POLICY, None, NOW) == []


def the_hold(result: Any) -> Hold:
    (found,) = result.holds
    assert isinstance(found, Hold)
    return found


def part_reading(result: Any, instance_type: str, zone: str, *, is_hot: bool = True) -> BufferPart:
    (found,) = [
        p for p in result.buffers if (p.instance_type, p.availability_zone, p.hot) == (instance_type, zone, is_hot)
    ]
    assert isinstance(found, BufferPart)
    return found


def test_a_claim_at_the_very_moment_is_a_session_come() -> None:
    claimed = (hot("i-c1", claimed_at=NOW - 30), hot("i-c2", claimed_at=NOW - 10))
    hold = the_hold(run(world(reservation(3, at=NOW - 30), machines=claimed), POLICY))
    assert hold.arrived == {ZONE_A: 2}
    assert hold.still_to_come == {ZONE_A: 1}


def test_a_claim_stamped_at_the_release_moment_is_no_session_of_it() -> None:
    # AWS's clock ahead of ours: the stamp can be at released_at while our clock still has the reservation active.
    released_at = NOW + 10
    claimed = (hot("i-c1", claimed_at=released_at),)
    hold = the_hold(run(world(reservation(2, at=NOW - 890, release_after_s=900), machines=claimed), POLICY))
    assert hold.arrived == {ZONE_A: 0}
    assert hold.still_to_come == {ZONE_A: 2}


def test_every_session_come_leaves_nothing_to_come_and_nothing_to_launch() -> None:
    claimed = tuple(hot(f"i-c{n}", claimed_at=NOW - 10 * n) for n in (1, 2, 3))
    result = run(world(reservation(3, at=NOW - 60), machines=claimed), POLICY)
    assert the_hold(result).still_to_come == {ZONE_A: 0}
    assert hot_launches(result) == []


def test_held_machines_are_only_those_still_to_come() -> None:
    """Two of three sessions came: one free machine of the three is held for the third; the other two are not its."""
    machines = (
        hot("i-c1", claimed_at=NOW - 20),
        hot("i-c2", claimed_at=NOW - 10),
        hot("i-h1"),
        hot("i-h2"),
        hot("i-h3"),
    )
    hold = the_hold(run(world(reservation(3, at=NOW - 30), machines=machines), POLICY))
    assert hold.held == {ZONE_A: 1}


def test_with_no_machine_of_its_part_a_reservation_holds_none() -> None:
    result = run(world(reservation(3)), POLICY)
    hold = the_hold(result)
    assert hold.held == {ZONE_A: 0}
    assert hold.status(NOW) == "filling"


def test_free_machines_are_shared_between_reservations_in_order_of_at() -> None:
    first, second = reservation(2), reservation(3, id="resv-000000000002", at=NOW + 90)
    result = run(world(first, second, machines=(hot("i-h1"), hot("i-h2"), hot("i-h3"))), POLICY)
    assert [h.held for h in result.holds] == [{ZONE_A: 2}, {ZONE_A: 1}]


def test_two_reservations_with_no_machine_hold_none_each() -> None:
    first, second = reservation(2), reservation(3, id="resv-000000000002", at=NOW + 90)
    result = run(world(first, second), POLICY)
    assert [h.held for h in result.holds] == [{ZONE_A: 0}, {ZONE_A: 0}]


def test_a_pending_reservation_still_wants_every_session() -> None:
    hold = the_hold(run(world(reservation(3, at=NOW + 500)), POLICY))
    assert not hold.active
    assert hold.still_to_come == {ZONE_A: 3}


def test_a_hot_machine_with_a_stale_down_node_of_an_earlier_join_is_still_claimable() -> None:
    """Swarm keeps a down node's entry (availability active, from before a rejoin): only the ready node says whether
    the machine is taken."""
    machine = hot("i-h1")
    base = world(reservation(1), machines=(machine,))
    stale = node_of(machine, node_id="node-old", labelled=False, state="down", availability="active")
    result = run(dataclasses.replace(base, nodes=(*base.nodes, stale)), POLICY)
    assert the_hold(result).held == {ZONE_A: 1}


def test_a_released_reservation_before_an_active_one_does_not_stop_the_active_one() -> None:
    gone = reservation(2, at=NOW - 2000, release_after_s=900, id="resv-000000000000")
    launched = hot_launches(run(world(gone, reservation(3)), POLICY))
    assert len(launched) == 3


def test_a_reservation_that_wants_what_the_buffer_already_keeps_leaves_the_buffers_own_reading() -> None:
    own = dataclasses.replace(POLICY, hot_buffer={"t3.medium": 3}, availability_zones=(ZONE_A,))
    result = run(world(reservation(3)), own)
    reading = part_reading(result, "t3.medium", ZONE_A)
    assert reading.target == 3
    assert "resv-000000000001" not in reading.said


def test_a_raised_part_reads_the_reservations_and_what_the_hot_buffer_keeps() -> None:
    first, second = reservation(2), reservation(3, id="resv-000000000002", at=NOW + 90)
    reading = part_reading(run(world(first, second), POLICY), "t3.medium", ZONE_A)
    assert reading.target == 5
    assert reading.said == (
        f"{describe(first)}; {describe(second)}: the hot buffer keeps 5 running t3.medium in {ZONE_A}"
    )


def test_a_part_the_settings_do_not_name_keeps_none_and_says_its_machines_go() -> None:
    result = run(world(machines=(hot("i-h1"), hot("i-h2"))), POLICY)
    reading = part_reading(result, "t3.medium", ZONE_A)
    assert (reading.target, reading.held) == (0, 2)
    assert reading.said == "not named by the settings: its machines go"


def test_a_machine_shutting_down_or_terminated_is_not_held_by_its_part() -> None:
    machines = (hot("i-h1"), hot("i-h2", state="shutting-down"), hot("i-h3", state="terminated"))
    reading = part_reading(run(world(machines=machines), POLICY), "t3.medium", ZONE_A)
    assert reading.held == 1


def test_notices_say_the_store_failed_to_answer() -> None:
    base = world(reservation(3))
    result = run(dataclasses.replace(base, reservations_problem="the reservations store did not answer"), POLICY)
    assert "the reservations store did not answer" in result.notices


def test_a_reservation_held_as_asked_has_no_notice() -> None:
    result = run(world(reservation(3)), POLICY)
    assert not [n for n in result.notices if "resv-000000000001" in n], result.notices


def test_a_size_no_type_fits_is_said_in_mib_and_gpus() -> None:
    huge = ReservedSize(cpus=64.0, memory_bytes=512 * GIB, gpus=2)
    gone = reservation(2, at=NOW - 2000, release_after_s=900, id="resv-000000000000", size=huge)
    asked = reservation(2, size=huge)
    result = run(world(gone, asked), POLICY)
    said = [n for n in result.notices if "no allowed instance type" in n]
    # Only the active one: a released reservation wants nothing any more.
    assert said == [
        f"{describe(asked)}: no allowed instance type fits one session (64 CPUs, 524288 MiB, 2 GPUs) once the"
        " node's overhead is taken: nothing is held for it"
    ]
    no_gpu = ReservedSize(cpus=64.0, memory_bytes=512 * GIB)
    notices = run(world(reservation(2, size=no_gpu)), POLICY).notices
    assert any("(64 CPUs, 524288 MiB) once" in n for n in notices), notices


def test_a_zone_not_allowed_is_said_and_holds_nothing() -> None:
    asked = reservation(2, zone="mars-1a")
    result = run(world(asked), POLICY)
    assert hot_launches(result) == []
    assert (
        f"{describe(asked)}: its zone mars-1a is not one of AUTOSCALING_AVAILABILITY_ZONES: nothing is held for it"
        in result.notices
    ), result.notices


def test_refusals_say_what_is_allowed() -> None:
    offerings = Offerings(INSTANCE_TYPES, POLICY)
    ((_, zone_why),) = refusals(reservation(zone="mars-1a"), POLICY, offerings, NOW)
    assert f"({ZONE_A}, {ZONE_B})" in zone_why
    nowhere = dataclasses.replace(POLICY, availability_zones=())
    ((_, none_why),) = refusals(reservation(zone="mars-1a"), nowhere, offerings, NOW)
    assert "(none)" in none_why
    huge = ReservedSize(cpus=64.0, memory_bytes=512 * GIB)
    ((_, size_why),) = refusals(reservation(size=huge), POLICY, offerings, NOW)
    assert "(t3.medium, m5.large, m5.xlarge, g4dn.xlarge)" in size_why
    ((_, unknown_why),) = refusals(reservation(size=huge), POLICY, Offerings({}, POLICY), NOW)
    assert "(none known)" in unknown_why


def test_as_many_sessions_as_max_instances_is_allowed() -> None:
    offerings = Offerings(INSTANCE_TYPES, POLICY)
    assert refusals(reservation(POLICY.max_instances), POLICY, offerings, NOW) == []


def test_an_unobserved_reservation_is_judged_by_the_clock_and_the_settings_alone() -> None:
    offerings = Offerings(INSTANCE_TYPES, POLICY)
    any_zone = reservation(5, zone=None)
    shares = {ZONE_A: 3, ZONE_B: 2}
    expected = Hold(any_zone, "t3.medium", shares, False, {}, {}, shares, any_zone.at - 120, observed=False)
    assert unobserved(any_zone, POLICY, offerings) == expected
    fixed = reservation(2, zone=ZONE_B)
    assert unobserved(fixed, POLICY, offerings).shares == {ZONE_B: 2}
    # Before a cycle saw the types: no type yet.
    assert unobserved(fixed, POLICY).instance_type is None
    # A zone not allowed keeps nothing anywhere.
    assert unobserved(reservation(2, zone="mars-1a"), POLICY, offerings).shares == {}
