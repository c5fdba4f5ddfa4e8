"""A family's cost-wait frontier over its candidates, and a policy's wait read against another's at the same cost."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Point:
    """One candidate's daily cost and one of its waits (a p50 or a p95), each a mean over the held-out seeds."""

    policy: str
    cost_usd: float
    wait_s: float


def frontier(points: Iterable[Point]) -> list[Point]:
    """The candidates no other beats: none costs as little or less and waits as little or less, one of them strictly.

    Ordered by cost (so waits fall along it); of candidates equal in both, the first by name stands for them.
    """
    kept: list[Point] = []
    for point in sorted(points, key=lambda p: (p.cost_usd, p.wait_s, p.policy)):
        # Sorted by cost, a point is beaten exactly when a cheaper (or as cheap) one kept already waits no longer.
        if not kept or point.wait_s < kept[-1].wait_s:
            kept.append(point)
    return kept


def wait_at_cost(line: Sequence[Point], cost_usd: float) -> float | None:
    """The frontier's wait at `cost_usd`, linear between its two neighbouring candidates; None outside its costs
    (no extrapolation: a cost no candidate reached says nothing about its wait)."""
    if not line or not line[0].cost_usd <= cost_usd <= line[-1].cost_usd:
        return None
    costs = [p.cost_usd for p in line]
    at = bisect_left(costs, cost_usd)
    if costs[at] == cost_usd:
        return line[at].wait_s
    below, above = line[at - 1], line[at]
    share = (cost_usd - below.cost_usd) / (above.cost_usd - below.cost_usd)
    return below.wait_s + share * (above.wait_s - below.wait_s)


def equal_cost_ratio(point: Point, reference: Sequence[Point]) -> float | None:
    """`point`'s wait over the reference frontier's wait at the same daily cost; None where the reference has no
    candidate as cheap or as dear (the ratio would be a guess)."""
    wait_s = wait_at_cost(reference, point.cost_usd)
    if wait_s is None or wait_s <= 0:
        return None
    return point.wait_s / wait_s
