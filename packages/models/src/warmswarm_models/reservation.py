"""A reservation for a known burst (N sessions of one size at a moment, in a zone or any): request, record, answer."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from warmswarm_models.cache import format_timestamp
from warmswarm_models.resources import GPU, Resources

# The director's rules for a group id and a session's size (warmswarm_director.schemas), repeated here: the
# autoscaler and the CLI cannot import the director, and a reservation names what the director will be asked for.
GROUP_ID_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
MIN_CPUS: Final = 0.001
MAX_CPUS: Final = 4096
MIN_MEMORY_BYTES: Final = 4 * 2**20
MAX_MEMORY_BYTES: Final = 2**50
MAX_GPUS: Final = 64
# A class of a few hundred is the largest burst foreseen; the autoscaler also refuses more than max_instances.
MAX_RESERVED_SESSIONS: Final = 1000
DEFAULT_RELEASE_AFTER_S: Final = 900
MAX_RELEASE_AFTER_S: Final = 86_400
RESERVATION_ID_PATTERN: Final = r"^resv-[0-9a-f]{12}$"
# How far ahead a reservation may be made: a term's bursts are known a few months out, and machines are bought for
# the moment itself only (lead_s before it). Past bound: `at` must be ahead of now, as before (a moment that passed
# has no lead time left to fill for); both depend on now, so the OpenAPI document states them in words, and a
# request outside them is a 422 naming `at`.
MAX_AHEAD_S: Final = 365 * 86_400
# Every moment a record holds lies in [1970, 3000): a bound no clock of this code's lifetime reaches, which keeps
# the moments derived from it (release_at = at + release_after_s, fill_from = at - lead_s) within what a datetime and
# ISO 8601 can write. A stored record outside it (written before the bounds, or by hand) is unreadable, never a 500.
MAX_MOMENT_EPOCH_S: Final = 32_503_680_000.0  # 3000-01-01T00:00:00Z
# ISO 8601 with a UTC offset as the API takes it (RFC 3339's date-time, 'T' and 'Z' upper case, 1970-2999): a
# pattern and not `format: date-time`, so that what a generator reads off the document parses (a day 31 of a short
# month still does not: 422).
MOMENT_TEXT_PATTERN: Final = (
    r"^(19[7-9][0-9]|2[0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)

ReservationStatus = Literal["pending", "filling", "ready", "released"]


class ReservedSize(BaseModel):
    """One session's size, as the director's request carries it (ResourcesIn): strict JSON numbers."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    cpus: float = Field(ge=MIN_CPUS, le=MAX_CPUS, allow_inf_nan=False, description="CPUs one session reserves.")
    memory_bytes: int = Field(ge=MIN_MEMORY_BYTES, le=MAX_MEMORY_BYTES, description="Memory one session reserves.")
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS, description="GPUs one session reserves.")

    @field_validator("memory_bytes", "gpus", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        return int(value) if isinstance(value, float) and value.is_integer() else value

    def resources(self) -> Resources:
        return Resources(self.cpus, self.memory_bytes, {GPU: self.gpus} if self.gpus else {})


def epoch_of(value: Any) -> float:
    """Epoch seconds from a JSON number (epoch s) or an ISO 8601 text with its UTC offset ('Z' or '+02:00')."""
    if isinstance(value, bool):
        raise ValueError("a moment is epoch seconds or ISO 8601 text, not true or false")
    if isinstance(value, int | float):
        return _in_range(float(value), value)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not ISO 8601 (e.g. 2026-05-04T09:00:00Z)") from None
        if parsed.tzinfo is None:
            raise ValueError(f"{value!r} has no UTC offset: add 'Z' (UTC) or one such as '+02:00'")
        return _in_range(parsed.timestamp(), value)
    raise ValueError("a moment is epoch seconds (a number) or ISO 8601 text")


def _in_range(epoch_s: float, value: Any) -> float:
    if not math.isfinite(epoch_s) or not 0 <= epoch_s <= MAX_MOMENT_EPOCH_S:
        raise ValueError(f"{value} is not a moment between 1970 and 3000 (epoch seconds 0 to {MAX_MOMENT_EPOCH_S:.0f})")
    return epoch_s


def ahead_refusal(at_epoch_s: float, now: float) -> str | None:
    """Why a new reservation's moment cannot be held (more than MAX_AHEAD_S ahead); None: it can. Pure: the API's
    422 and the OpenAPI document's words both come from here and MAX_AHEAD_S."""
    if at_epoch_s > now + MAX_AHEAD_S:
        return (
            f"{format_timestamp(at_epoch_s)} is more than {MAX_AHEAD_S // 86_400} days ahead"
            f" (now is {format_timestamp(now)}): reserve it closer to the day"
        )
    return None


class ReservationIn(BaseModel):
    """POST /v1/reservations: group G, N sessions of this size at time T, in zone Z or any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group: str = Field(pattern=GROUP_ID_PATTERN, description="The group the sessions are of (1-64 of [A-Za-z0-9._-]).")
    sessions: int = Field(ge=1, le=MAX_RESERVED_SESSIONS, description="How many sessions start at `at`.")
    resources: ReservedSize
    at: Annotated[
        float | str,
        WithJsonSchema(
            {
                "anyOf": [
                    {"type": "number", "minimum": 0, "maximum": MAX_MOMENT_EPOCH_S},
                    {"type": "string", "pattern": MOMENT_TEXT_PATTERN},
                ]
            }
        ),
    ] = Field(
        description=(
            "When they start: epoch seconds, or ISO 8601 with a UTC offset. It must be ahead of now and at most"
            f" {MAX_AHEAD_S // 86_400} days ahead (bounds that move with the clock, so no schema can state them:"
            " 422 naming `at` outside them)."
        )
    )
    zone: str | None = Field(
        default=None,
        min_length=1,
        description="An availability zone among the autoscaler's (the document it serves lists them); null: any.",
    )
    release_after_s: int = Field(
        default=DEFAULT_RELEASE_AFTER_S,
        ge=0,
        le=MAX_RELEASE_AFTER_S,
        description="Machines nobody claimed are let go this long after `at`.",
    )

    @field_validator("at", mode="before")
    @classmethod
    def _moment(cls, value: Any) -> float:
        return epoch_of(value)

    @property
    def at_epoch_s(self) -> float:
        return epoch_of(self.at)


class Reservation(BaseModel):
    """A reservation as it is stored (JSON in the autoscaler's Redis) and planned from: moments in epoch seconds."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    # The request's bounds again: a record from an older release or a hand edit outside them is unreadable (named in
    # the status and skipped), never planned from or written into an answer it would break.
    id: str = Field(pattern=RESERVATION_ID_PATTERN)
    group: str = Field(pattern=GROUP_ID_PATTERN)
    sessions: int = Field(ge=1, le=MAX_RESERVED_SESSIONS)
    resources: ReservedSize
    at: float = Field(ge=0, le=MAX_MOMENT_EPOCH_S, allow_inf_nan=False)  # epoch s
    zone: str | None = Field(default=None, min_length=1)  # None: any of the autoscaler's zones
    release_after_s: int = Field(default=DEFAULT_RELEASE_AFTER_S, ge=0, le=MAX_RELEASE_AFTER_S)
    created_at: float = Field(ge=0, le=MAX_MOMENT_EPOCH_S, allow_inf_nan=False)  # epoch s

    @classmethod
    def of(cls, request: ReservationIn, *, reservation_id: str, created_at: float) -> Reservation:
        return cls(
            id=reservation_id,
            group=request.group,
            sessions=request.sessions,
            resources=request.resources,
            at=request.at_epoch_s,
            zone=request.zone,
            release_after_s=request.release_after_s,
            created_at=created_at,
        )

    @property
    def size(self) -> Resources:
        return self.resources.resources()

    @property
    def released_at(self) -> float:
        """When its extra buffer target goes (epoch s)."""
        return self.at + self.release_after_s


class ReservationOut(BaseModel):
    """A reservation and how the autoscaler holds it (moments ISO 8601 UTC, as the other answers give them)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    group: str
    sessions: int
    resources: ReservedSize
    at: str
    zone: str | None
    release_after_s: int
    created_at: str
    # pending: before its window; filling: in it, fewer machines held than sessions still to come; ready: as many;
    # released: past at + release_after_s (what was left unclaimed is terminated as the buffer's surplus).
    status: ReservationStatus
    machines_held: int = 0  # running, joined, unclaimed hot-buffer machines counted for it now
    sessions_arrived: int = 0  # machines of its part claimed since `at`: its sessions that came
    instance_type: str | None = None  # the cheapest allowed type one session fits; null: none fits
    zones: list[str] = Field(default_factory=list)  # where its machines are kept
    fill_from: str  # at - lead_s: when the buffer starts filling for it
    release_at: str
    lead_s: float
    reason: str = ""


class UnreadableRecordOut(BaseModel):
    """A stored record that cannot be read (written by an older release, edited by hand): skipped, named here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kind: Literal["reservation"] = "reservation"
    id: str  # the key it is stored under: DELETE /v1/reservations/{id} removes it
    reason: str


class ReservationsOut(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    reservations: list[ReservationOut]
    # Stored records that cannot be read, each with why; they are neither listed above nor planned for.
    unreadable: list[UnreadableRecordOut] = Field(default_factory=list)
    # Why the statuses may be incomplete (no cycle observed the machines yet; the store did not answer).
    notices: list[str] = Field(default_factory=list)
