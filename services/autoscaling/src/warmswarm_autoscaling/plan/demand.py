"""The buffers' targets per type, zone and kind (hot or warm): the settings' counts, or sized by recent demand.

With `buffer_sizing = "fixed"` (the default) a part of the buffers keeps what AUTOSCALING_HOT_BUFFER and
AUTOSCALING_WARM_BUFFER name for its type in every zone. With "demand" those counts are each part's maximum and the
target follows Little's law, L = λ·W: the machines a buffer must hold so that the sessions arriving while it
refills find one are the arrival rate times the refill time,

    total = ceil(arrivals in the window / buffer_window_s × buffer_refill_s × buffer_headroom)

per type and zone, taken by the hot buffer first (a claim takes a hot machine first), up to its maximum and within
`buffer_daily_budget_usd` (its running machines at price_per_hour for 24 h, across all types and zones); the warm
buffer takes the rest, up to its maximum (a stopped machine bills its disks only: no budget). Nobody in the window:
every target is 0, and buffer._surplus terminates what the buffers hold beyond it.

An arrival is a machine that came up for an owner's session, read from the snapshot alone (a restart loses
nothing): per machine of this cluster that is not an unclaimed buffer machine, its latest moment of
`claimed-at` (a claim from the hot or the warm buffer) and EC2's LaunchTime (a cold launch; AWS resets LaunchTime
at every start, so in production a warm machine resumed for a return counts too; the simulator's LaunchTime is the
RunInstances call, so there a resume does not). A machine terminated within the window is no longer listed: its
arrival is remembered in the plan's carried state (Carried.arrivals) until it leaves the window; a restart forgets
those of machines already gone, so right after one the rate is a lower bound (a smaller buffer, never a larger one).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Part, Target
from warmswarm_autoscaling.policy import Policy

HOURS_PER_DAY = 24.0
_EPSILON = 1e-9  # a product that is whole in exact arithmetic may land a hair above it in floats


Arrival = tuple[str, str, float]  # instance type, zone, moment (AWS's clock)


def buffer_targets(cluster: Cluster) -> tuple[dict[Part, Target], dict[str, Arrival]]:
    """Every part the settings name, in every zone of the policy, with its target (a part not named keeps 0); and the
    arrivals it was sized by, by instance id (none unless sized by demand), which the next cycle carries."""
    policy = cluster.policy
    if policy.buffer_sizing == "demand":
        seen = seen_arrivals(cluster)
        return demand_targets(policy, arrivals(seen)), seen
    return {
        Part(instance_type, zone, hot): Target(count, _fixed(hot, count, instance_type, zone))
        for hot, counts in ((True, policy.hot_buffer), (False, policy.warm_buffer))
        for instance_type, count in counts.items()
        for zone in policy.availability_zones
    }, {}


def _fixed(hot: bool, count: int, instance_type: str, zone: str) -> str:
    kept = "running" if hot else "stopped"
    return f"the {'hot' if hot else 'warm'} buffer keeps {count} {kept} {instance_type} in {zone}"


def seen_arrivals(cluster: Cluster) -> dict[str, Arrival]:
    """Every arrival within the window, by instance id: the listed machines' and those remembered from earlier cycles
    (their machines may be gone since). Only buffers sized by demand read them: none are kept otherwise."""
    if cluster.policy.buffer_sizing != "demand":
        return {}
    since = cluster.clock.aws - cluster.policy.buffer_window_s
    seen = {iid: arrival for iid, arrival in cluster.snapshot.carried.arrivals.items() if arrival[2] > since}
    for instance in cluster.snapshot.instances:
        if instance.in_buffer:
            continue  # nobody's yet: the buffer's own launch is no session
        moment = max(instance.launched_at, instance.claimed_at or instance.launched_at)
        if moment > since:
            seen[instance.id] = (instance.instance_type, instance.availability_zone, moment)
    return seen


def arrivals(seen: Mapping[str, Arrival]) -> dict[tuple[str, str], int]:
    """The machines that came up for an owner's session within the window (seen_arrivals), by type and zone."""
    counted: dict[tuple[str, str], int] = {}
    for instance_type, zone, _ in seen.values():
        counted[(instance_type, zone)] = counted.get((instance_type, zone), 0) + 1
    return counted


def demand_targets(policy: Policy, seen: Mapping[tuple[str, str], int]) -> dict[Part, Target]:
    """Little's law per type and zone, the hot buffer first within its maximum and the daily budget, then the warm."""
    wanted: dict[tuple[str, str], int] = {}
    rule: dict[tuple[str, str], str] = {}
    hot_wanted: dict[tuple[str, str], int] = {}
    for instance_type in sorted({*policy.hot_buffer, *policy.warm_buffer}):
        for zone in policy.availability_zones:
            where = (instance_type, zone)
            wanted[where], rule[where] = _little(policy, seen.get(where, 0), instance_type, zone)
            hot_wanted[where] = min(wanted[where], policy.hot_buffer.get(instance_type, 0))
    hot, budget_said = _within_budget(policy, hot_wanted)
    targets: dict[Part, Target] = {}
    for (instance_type, zone), total in wanted.items():
        where = (instance_type, zone)
        hot_max = policy.hot_buffer.get(instance_type, 0)
        warm_max = policy.warm_buffer.get(instance_type, 0)
        warm = min(total - hot[where], warm_max)
        cut = budget_said if hot[where] < hot_wanted[where] else ""
        if instance_type in policy.hot_buffer:
            said = f"{rule[where]}; the hot buffer takes {hot[where]} of them (at most {hot_max} per zone{cut})"
            targets[Part(instance_type, zone, True)] = Target(hot[where], f"the hot buffer's target for {said}")
        if instance_type in policy.warm_buffer:
            said = (
                f"{rule[where]}; the hot buffer holds {hot[where]}, the warm buffer takes {warm}"
                f" (at most {warm_max} per zone)"
            )
            targets[Part(instance_type, zone, False)] = Target(warm, f"the warm buffer's target for {said}")
    return targets


def _little(policy: Policy, count: int, instance_type: str, zone: str) -> tuple[int, str]:
    """ceil(λ × W × headroom) for one type and zone, and how it reads."""
    window_min = policy.buffer_window_s / 60.0
    where = f"{instance_type} in {zone}"
    if count == 0:
        return 0, f"{where} is 0: no machine came up for an owner's session there in the last {window_min:g} min"
    rate_per_h = count / policy.buffer_window_s * 3600.0
    refill_h = policy.buffer_refill_s / 3600.0
    total = max(0, math.ceil(rate_per_h * refill_h * policy.buffer_headroom - _EPSILON))
    return total, (
        f"{where} is {total} = ceil({rate_per_h:.1f} arrivals/h × {refill_h:.3f} h refill × {policy.buffer_headroom:g}"
        f" headroom) ({count} machine(s) came up for owners' sessions there in the last {window_min:g} min)"
    )


def _within_budget(policy: Policy, wanted: Mapping[tuple[str, str], int]) -> tuple[dict[tuple[str, str], int], str]:
    """The hot buffer's machines the daily budget pays for a day of, one at a time across types and zones (in turn,
    so that one type does not take it all); without a budget, all of them."""
    budget_usd = policy.buffer_daily_budget_usd
    if budget_usd is None:
        return dict(wanted), ""
    given = dict.fromkeys(wanted, 0)
    spent_usd = 0.0
    more = True
    while more:
        more = False
        for where in sorted(wanted):
            day_usd = policy.price_per_hour.get(where[0], math.inf) * HOURS_PER_DAY
            if given[where] < wanted[where] and spent_usd + day_usd <= budget_usd + _EPSILON:
                given[where] += 1
                spent_usd += day_usd
                more = True
    return given, f"; the daily budget ${budget_usd:.2f} pays for ${spent_usd:.2f} of running buffer machines a day"
