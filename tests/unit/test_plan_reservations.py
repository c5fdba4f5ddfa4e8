"""Reservations (plan/reservations.py): the hot buffer raised for a known burst from at - lead_s to at +
release_after_s, combined with the buffers' own targets, within max_instances; released, its unclaimed machines go."""

from __future__ import annotations

import dataclasses
from typing import Any, Final

from warmswarm_autoscaling.actions import Launch, Terminate
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.reservations import lead_s, refusals, spread
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
