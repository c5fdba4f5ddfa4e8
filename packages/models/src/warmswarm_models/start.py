"""A session's start path (how its machine came to run it) and its derivation from durable machine and volume facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# hot_claim: a running machine of the hot buffer was claimed for the session. buffer_claim: a stopped machine of the
# warm buffer was claimed and started. warm_resume: the owner's own stopped (warm) machine was started.
# cache_return: a machine was launched and mounted the owner's cache volume kept from an earlier session.
# cold_launch: a machine was launched, with a volume made for this session or none. running_return: the owner's
# own machine still ran when the session was asked for (its idle grace), nothing was started.
StartPath = Literal["hot_claim", "buffer_claim", "warm_resume", "cache_return", "cold_launch", "running_return"]
START_PATHS: Final[tuple[StartPath, ...]] = (
    "hot_claim",
    "buffer_claim",
    "warm_resume",
    "cache_return",
    "cold_launch",
    "running_return",
)
BufferKind = Literal["hot", "warm"]

# The swarm's clock (a service's creation) and AWS's (the tags' moments) may differ by a little: a fact this close
# before the request still counts as done for it. No machine is claimed, started or launched for a session that
# had not been asked for, and a session comes back after far longer than this.
CLOCK_SLACK_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class MachineFacts:
    """What the autoscaler's tags and EC2 say about the machine a session runs on (epoch seconds, AWS's clock).

    `buffer_kind`: the buffer it was launched for (None: launched for an owner). `claimed_at`: when an owner claimed
    it from that buffer. `started_at`: when the autoscaler last started it from stopped (warm). `launched_at`: EC2's
    LaunchTime (on EC2 also moved by a start; the derivation reads it only after the start). `volume_created_at`:
    when the cache volume it carries for its owner was created (None: no cache volume).
    """

    launched_at: float
    buffer_kind: BufferKind | None = None
    claimed_at: float | None = None
    started_at: float | None = None
    volume_created_at: float | None = None


def start_path(requested_at: float, machine: MachineFacts) -> StartPath:
    """The path a session asked for at `requested_at` (epoch s, the swarm's clock) took to run on `machine`.

    The newest step taken for it decides: a claim after the request, else a start after it, else a launch after it
    (with a volume older than the request: a cache return); none of these: the machine ran already (running_return).
    """
    since = requested_at - CLOCK_SLACK_S
    if machine.claimed_at is not None and machine.claimed_at >= since:
        return "hot_claim" if machine.buffer_kind == "hot" else "buffer_claim"
    if machine.started_at is not None and machine.started_at >= since:
        return "warm_resume"
    if machine.launched_at >= since:
        return "cache_return" if cache_hit(requested_at, machine) else "cold_launch"
    return "running_return"


def cache_hit(requested_at: float, machine: MachineFacts) -> bool:
    """The session found its owner's cache: the machine carries a volume created before the session was asked for."""
    return machine.volume_created_at is not None and machine.volume_created_at < requested_at - CLOCK_SLACK_S
