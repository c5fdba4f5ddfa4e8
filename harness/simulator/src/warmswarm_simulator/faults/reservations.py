"""The campaign's reservation store: ops' reservations in memory (production keeps them in Redis), made on cue."""

from __future__ import annotations

from warmswarm_models.reservation import Reservation, ReservedSize

from warmswarm_simulator.config import GIB
from warmswarm_simulator.faults.scenario import Booking


class MemoryReservations:
    """ports.ReservationStore over a dict; the campaign adds each booking at its cycle, as ops would by the API."""

    def __init__(self) -> None:
        self.stored: dict[str, Reservation] = {}
        self.unreadable: tuple[str, ...] = ()

    async def list(self) -> list[Reservation]:
        return sorted(self.stored.values(), key=lambda r: (r.at, r.id))

    async def add(self, reservation: Reservation) -> None:
        self.stored[reservation.id] = reservation

    async def delete(self, reservation_id: str) -> bool:
        return self.stored.pop(reservation_id, None) is not None

    def book(self, booking: Booking, now_epoch_s: float) -> Reservation:
        """The reservation `booking` stands for, made at `now_epoch_s` (AWS's clock: ops' clock agrees with it)."""
        cpus, memory_gib = booking.size
        reservation = Reservation(
            id=f"resv-{len(self.stored) + 1:012x}",
            group=booking.group,
            sessions=booking.sessions,
            resources=ReservedSize(cpus=cpus, memory_bytes=int(memory_gib * GIB)),
            at=now_epoch_s + booking.after_s,
            zone=booking.zone,
            release_after_s=booking.release_after_s,
            created_at=now_epoch_s,
        )
        self.stored[reservation.id] = reservation
        return reservation
