"""Ops' reservations through the API: checked against the policy, kept in the store, listed with how they are held."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Final, Protocol, runtime_checkable

from warmswarm_models.reservation import (
    Reservation,
    ReservationIn,
    ReservationOut,
    ReservationsOut,
    UnreadableRecordOut,
    ahead_refusal,
)

from warmswarm_autoscaling import views
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.reservations import refusals
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import ReservationStore
from warmswarm_autoscaling.snapshot import Snapshot

# A released reservation stays listed (status "released") this long, then a later add forgets it.
RELEASED_KEPT_S: Final = 86_400.0


class ReservationRefused(Exception):
    """The request cannot be held as asked (422): every reason, as (field, why)."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{name}: {why}" for name, why in problems))
        self.problems = problems


class ReservationNotFound(Exception):
    pass


class NoReservationStore(Exception):
    """This autoscaler was assembled without a store (the simulator, a test): reservations are off."""


@runtime_checkable
class ExplainsUnreadable(Protocol):
    """A store that says why each unreadable record cannot be read (the Redis one); others name the ids alone."""

    @property
    def unreadable_reasons(self) -> Mapping[str, str]: ...


def unreadable_records(store: ReservationStore | None) -> list[UnreadableRecordOut]:
    """The records the store's last read could not read, each with why: for the status and the listing."""
    if store is None:
        return []
    reasons = store.unreadable_reasons if isinstance(store, ExplainsUnreadable) else {}
    return [
        UnreadableRecordOut(id=record_id, reason=reasons.get(record_id, "it cannot be read as a reservation"))
        for record_id in store.unreadable
    ]


def _new_id() -> str:
    return f"resv-{uuid.uuid4().hex[:12]}"


class Bookings:
    """The reservations of one cluster as ops see them; every store failure comes out as ReservationStoreError."""

    def __init__(self, store: ReservationStore | None, policy: Policy, new_id: Callable[[], str] = _new_id) -> None:
        self._store = store
        self._policy = policy
        self._new_id = new_id

    def _the_store(self) -> ReservationStore:
        if self._store is None:
            raise NoReservationStore("this autoscaler keeps no reservations (it was assembled without a store)")
        return self._store

    async def add(self, request: ReservationIn, now: float, snapshot: Snapshot | None) -> ReservationOut:
        """Check, store and answer a new reservation; raises ReservationRefused (nothing stored) or the store's
        error."""
        store = self._the_store()
        reservation = Reservation.of(request, reservation_id=self._new_id(), created_at=now)
        offerings = self._offerings(snapshot)
        problems = refusals(reservation, self._policy, offerings, now)
        too_far = ahead_refusal(reservation.at, now)
        if too_far is not None:
            problems.insert(0, ("at", too_far))
        if problems:
            raise ReservationRefused(problems)
        stored = await store.list()
        for old in stored:
            if old.released_at + RELEASED_KEPT_S < now:
                await store.delete(old.id)
        await store.add(reservation)
        # No plan has held it yet: answered by the clock alone, the next cycle's plan decides what it holds.
        (answer,) = views.reservations(self._policy, None, [reservation], now, offerings)
        return answer

    def _offerings(self, snapshot: Snapshot | None) -> Offerings | None:
        """The allowed types as the last cycle saw them; None before one."""
        known = snapshot.instance_types if snapshot is not None and snapshot.instance_types else None
        return Offerings(known, self._policy) if known is not None else None

    async def listed(self, now: float, plan: Plan | None, snapshot: Snapshot | None) -> ReservationsOut:
        """Every stored reservation as the last plan holds it (by the clock alone before one, or one made since)."""
        store = self._the_store()
        stored = await store.list()
        notices = []
        if plan is None:
            notices.append("no cycle of this replica has observed the machines yet: statuses follow the clock alone")
        if store.unreadable:
            notices.append(f"record(s) {', '.join(store.unreadable)} cannot be read: they are not planned for")
        offerings = self._offerings(snapshot)
        return ReservationsOut(
            reservations=views.reservations(self._policy, plan, stored, now, offerings),
            notices=notices,
            unreadable=unreadable_records(store),
        )

    async def delete(self, reservation_id: str) -> None:
        """Forget it: its extra buffer target goes at the next cycle, which terminates what it left unclaimed."""
        if not await self._the_store().delete(reservation_id):
            raise ReservationNotFound(f"no reservation {reservation_id} in this cluster")
