"""What a cycle leaves the next: the plan's own part (clocks, capacity marks), and what applying it taught (`after`).

Two rules about how long a mark lasts live here: an offering AWS had no capacity for is avoided for
`capacity_backoff_s`, and a machine that could not be started is remembered until it is terminated or started
(failures that repeat the same way back off in backoff.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Carried, Repeated, Snapshot


def planned(
    snapshot: Snapshot,
    *,
    idle_since: Mapping[str, float],
    down_since: Mapping[str, float],
    stopped_since: Mapping[str, float],
    unavailable_offerings: Mapping[tuple[str, str], float],
    volume_backoffs: Mapping[str, Repeated],
    buffer_backoff: Repeated | None,
    arrivals: Mapping[str, tuple[str, str, float]],
) -> Carried:
    """What the plan of `snapshot` leaves the next cycle before anything is applied: the clocks it kept running,
    the offerings still avoided (for everyone, for one volume, for the buffer), the tokens spent so far, and the
    failed starts whose machine is still stopped (a failed start matters until its machine is terminated, which
    this plan does, or someone starts it)."""
    failed = snapshot.carried.failed_starts
    return Carried(
        idle_since=idle_since,
        down_since=down_since,
        stopped_since=stopped_since,
        unavailable_offerings=unavailable_offerings,
        spent_tokens=snapshot.carried.spent_tokens,
        failed_starts=frozenset(i.id for i in snapshot.instances if i.id in failed and i.state == "stopped"),
        volume_backoffs=volume_backoffs,
        buffer_backoff=buffer_backoff,
        arrivals=arrivals,
    )


def after(carried: Carried, outcomes: Iterable[Outcome], policy: Policy, now: float) -> Carried:
    """`carried` with what the plan's outcomes taught, at `now` (the cycle's start): an offering AWS had no
    capacity for is not tried for `capacity_backoff_s`; a token whose first use is over is not used again; a warm
    machine that could not be started is terminated by the next plan, and its owner's work launched anew."""
    unavailable = dict(carried.unavailable_offerings)
    spent = set(carried.spent_tokens)
    failed = set(carried.failed_starts)
    for outcome in outcomes:
        if outcome.unavailable_offering is not None:
            unavailable[outcome.unavailable_offering] = now + policy.capacity_backoff_s
        if outcome.spent_token is not None:
            spent.add(outcome.spent_token)
        if outcome.failed_start is not None:
            failed.add(outcome.failed_start)
    return dataclasses.replace(
        carried, unavailable_offerings=unavailable, spent_tokens=frozenset(spent), failed_starts=frozenset(failed)
    )
