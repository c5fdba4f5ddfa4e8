"""The checks a campaign makes, by name: what each means, and which the command line may set aside as known open."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    what: str


CROSS_OWNER_MACHINE: Final = "cross-owner-machine"
CROSS_OWNER_VOLUME: Final = "cross-owner-volume"
DELETE_BEFORE_TTL: Final = "delete-before-ttl"
EVICTS_WORK: Final = "evicts-work"
STOPPED_CAP: Final = "stopped-cap"
LAUNCH_BOUND: Final = "launch-bound"
DEADLINE: Final = "deadline"
STALE_LEADER: Final = "stale-leader"
UNFOUNDED_CAPACITY: Final = "unfounded-capacity"
UNUSED_CLAIM: Final = "unused-claim"
START_RETRIED: Final = "start-retried"
CYCLE_RAISES: Final = "cycle-raises"
LIVENESS: Final = "liveness"
RECYCLE_UNSCRUBBED: Final = "recycle-unscrubbed"
RECYCLE_CLAIM: Final = "recycle-claim"
RECYCLE_UNACCEPTED: Final = "recycle-unaccepted"
RECYCLE_RELEASED: Final = "recycle-released"
SCRUB_CRASHED: Final = "scrub-crashed"

CHECKS: Final = (
    Check(CROSS_OWNER_MACHINE, "a machine of one owner carries another's node labels"),
    Check(CROSS_OWNER_VOLUME, "a volume attached to a machine not its owner's, or an owner's work on another's cache"),
    Check(DELETE_BEFORE_TTL, "a cache volume deleted before its TTL since release by AWS's clock, or its expires-at"),
    Check(EVICTS_WORK, "an owner's work taken off a healthy node of theirs (drain, stop, terminate, remove)"),
    Check(STOPPED_CAP, "more machines stopping or stopped than max_stopped_instances"),
    Check(LAUNCH_BOUND, "more launches for one owner (the buffer, a batch) in an hour than sessions + faults + 2"),
    Check(DEADLINE, "a stopped machine kept past its tier, or with a warm-until beyond it (by AWS's clock)"),
    Check(STALE_LEADER, "a mutating call of the stale replica took effect after its lock expired"),
    Check(UNFOUNDED_CAPACITY, "an offering avoided as out of capacity with no refusal and no owner's late machine"),
    Check(UNUSED_CLAIM, "a buffer machine claimed by an owner and terminated without a start"),
    Check(START_RETRIED, "a warm machine refused a start for capacity, started again instead of given up"),
    Check(CYCLE_RAISES, "a cycle raised (the loop would log it and back off)"),
    Check(LIVENESS, "after K calm cycles an owned task neither runs nor waits for a cause that still holds"),
    Check(RECYCLE_UNSCRUBBED, "an owner's task runs on a machine that served another owner, no scrub proven since"),
    Check(RECYCLE_CLAIM, "a machine claimed while it owes its scrub, or another owner's volume attached or mounted"),
    Check(RECYCLE_UNACCEPTED, "a machine that served an owner went to an owner whose groups do not accept one"),
    Check(RECYCLE_RELEASED, "a recycling owner's volume ends held by a machine not theirs, or held by none unreleased"),
    Check(SCRUB_CRASHED, "a machine whose scrub boot crashed is not terminated by the end"),
)
NAMES: Final = tuple(c.name for c in CHECKS)


class UnknownCheck(ValueError):
    """A check name the campaign does not know; the message lists those it does."""


def names(raw: Iterable[str]) -> tuple[str, ...]:
    """The check names given (comma-separated, repeatable), in CHECKS order."""
    given = {n.strip() for part in raw for n in part.split(",") if n.strip()}
    unknown = sorted(given - set(NAMES))
    if unknown:
        raise UnknownCheck(f"no check {unknown}; the checks are {', '.join(NAMES)}")
    return tuple(n for n in NAMES if n in given)
