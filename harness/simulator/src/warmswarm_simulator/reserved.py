"""The day's classes declared as reservations (ops' "N sessions of this size at T"), and the store that holds them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from warmswarm_models.reservation import DEFAULT_RELEASE_AFTER_S, Reservation, ReservedSize

from warmswarm_simulator.config import GIB
from warmswarm_simulator.dayspec import DaySpec


@dataclass(frozen=True, slots=True)
class DayReservation:
    """One burst the day announces: `sessions` of one size from `at_s` (seconds since the day's midnight)."""

    group: str
    sessions: int
    cpus: float
    memory_gib: float
    at_s: float
    release_after_s: int = DEFAULT_RELEASE_AFTER_S


def class_reservations(day: DaySpec) -> tuple[DayReservation, ...]:
    """The class as its teacher would book it: its size, its profile's size, its start. Only what a person knows
    ahead (the timetable), never the trace's arrivals; the large jobs and the homework are nobody's booking."""
    klass = day.klass
    profile = day.profiles[klass.profile]
    return (DayReservation(klass.group, klass.size, profile.cpus, profile.memory_gib, klass.at_s),)


class DayReservations:
    """ports.ReservationStore over the day's bookings, all made at the day's midnight (ahead of every start)."""

    def __init__(self, bookings: Sequence[DayReservation], day_epoch_s: float) -> None:
        self.stored: dict[str, Reservation] = {}
        self.unreadable: tuple[str, ...] = ()
        for n, booking in enumerate(bookings, start=1):
            reservation = Reservation(
                id=f"resv-{n:012x}",
                group=booking.group,
                sessions=booking.sessions,
                resources=ReservedSize(cpus=booking.cpus, memory_bytes=int(booking.memory_gib * GIB)),
                at=day_epoch_s + booking.at_s,
                release_after_s=booking.release_after_s,
                created_at=day_epoch_s,
            )
            self.stored[reservation.id] = reservation

    async def list(self) -> list[Reservation]:
        return sorted(self.stored.values(), key=lambda r: (r.at, r.id))

    async def add(self, reservation: Reservation) -> None:
        self.stored[reservation.id] = reservation

    async def delete(self, reservation_id: str) -> bool:
        return self.stored.pop(reservation_id, None) is not None
