"""What must hold of stopped machines after every cycle, on the modelled world (invariants.py runs it):

- the stopped cap: never more machines stopping or stopped than max_stopped_instances;
- deadlines: every stopped machine is the buffer's (no more than its slots), or has a warm-until within its tier
  (the owner's warm_ttl_s, or max_start_s for a claimed buffer machine) and is terminated once it passes, or without
  one is terminated within max_start_s (by the world's clock, from the later of its stop and the term's start);
  each with a tolerance of max_clock_skew_s (the skew the autoscaler accepts) and a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from warmswarm_models import (
    INSTANCE_BUFFER_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    SCRUB_DONE_PREFIX,
    parse_timestamp,
)

from warmswarm_simulator.cloud_values import SimInstance
from warmswarm_simulator.faults.checks import DEADLINE, STOPPED_CAP
from warmswarm_simulator.faults.scenario import Scenario
from warmswarm_simulator.faults.worldparts import BUFFER, Parts, whose_instance

# Tags are written in whole seconds and a cycle's `now` is taken a read's latency before what it saw: 2 s of slack.
SLACK_S = 2.0
STOPPED = ("stopping", "stopped")


@dataclass(frozen=True, slots=True)
class Stops:
    """What the invariants saw happen to stopped machines, world s: when each began stopping, when each buffer
    machine was claimed, and when the leader's current term began (its clocks start again then)."""

    stopped_since: Mapping[str, float]
    claimed_at: Mapping[str, float]
    term_started_s: float


def check_stopped(
    parts: Parts, scenario: Scenario, cycle: int, stops: Stops, fail: Callable[[str, str, str], None]
) -> None:
    """The stopped cap and each stopped machine's deadline; `fail(check, message, subject)` for each broken."""
    settings = scenario.settings
    stopped = [i for i in parts.cloud.instances.values() if i.state in STOPPED]
    if len(stopped) > settings.max_stopped_instances:
        fail(
            STOPPED_CAP,
            f"{len(stopped)} machines stopping or stopped, max_stopped_instances={settings.max_stopped_instances}",
            "cap",
        )
    now_s, aws_now = parts.world.now_s, parts.world.epoch()
    tolerance_s = settings.max_clock_skew_s + settings.busy_resync_interval_s + SLACK_S
    # A recycled machine stripped to the buffer's tags and stopped until its scrub boot (plan/recycle.py) took a
    # buffer place, hot or warm (recycle._room), and waits for its boot while owners' work comes first: it counts
    # against the buffer's places (hot, warm, reserved), not the warm ones alone (correction of seed 67, issue 33).
    buffered = [i for i in stopped if whose_instance(i) == BUFFER and not owes_scrub(i)]
    scrubbing = [i for i in stopped if whose_instance(i) == BUFFER and owes_scrub(i)]
    slots = sum(settings.warm_buffer.values()) * len(settings.zones())
    # A reservation's sessions are hot places too (the buffers hold machines for them): seed 210's recycled machine
    # took one.
    reserved = sum(b.sessions for b in scenario.bookings if b.made_cycle <= cycle)
    places = slots + sum(settings.hot_buffer.values()) * len(settings.zones()) + reserved
    if len(buffered) > slots:
        fail(DEADLINE, f"{len(buffered)} buffer machines kept stopped, the buffer holds {slots}", "buffer")
    if len(buffered) + len(scrubbing) > places:
        fail(
            DEADLINE,
            f"{len(buffered) + len(scrubbing)} buffer machines kept stopped ({len(scrubbing)} awaiting their scrub"
            f" boot), the buffers hold {places}",
            "buffer places",
        )
    for instance in stopped:
        if whose_instance(instance) == BUFFER:
            continue
        warm_until = parse_timestamp(instance.tags.get(INSTANCE_WARM_UNTIL_TAG, ""))
        if warm_until is None:
            since_s = max(stops.stopped_since.get(instance.id, now_s), stops.term_started_s)
            limit_s = settings.max_start_s + settings.resync_interval_s + tolerance_s
            if now_s - since_s > limit_s:
                fail(
                    DEADLINE,
                    f"machine {instance.id} of {whose_instance(instance)} stopped {now_s - since_s:.0f} s with no"
                    f" warm-until (terminated within max_start_s={settings.max_start_s:g})",
                    instance.id,
                )
            continue
        claimed = instance.tags.get(INSTANCE_BUFFER_TAG) == "true"
        ttl = instance.tags.get(INSTANCE_WARM_TTL_TAG, "0")
        tier_s = float(int(ttl)) if ttl.isdigit() else 0.0
        if claimed:
            tier_s = max(tier_s, float(settings.max_start_s))
        if warm_until - aws_now > tier_s + tolerance_s:
            fail(
                DEADLINE,
                f"machine {instance.id} of {whose_instance(instance)} is kept warm until"
                f" {warm_until - aws_now:.0f} s from now by AWS's clock, beyond its tier of {tier_s:g} s",
                instance.id,
            )
        # Kept no longer than its tier, by the world's clock, from its stop (a claimed buffer machine: its claim).
        since_s = max(stops.stopped_since.get(instance.id, now_s), stops.claimed_at.get(instance.id, 0.0))
        limit_s = tier_s + settings.resync_interval_s + tolerance_s + scenario.model.ec2.stop_s
        if now_s - since_s > limit_s:
            fail(
                DEADLINE,
                f"machine {instance.id} of {whose_instance(instance)} kept stopped {now_s - since_s:.0f} s, its"
                f" tier is {tier_s:g} s",
                instance.id + " kept",
            )


def owes_scrub(instance: SimInstance) -> bool:
    """Its scrub tag says its next boot owes a scrub (RecycleMachine wrote it; MarkScrubbed makes it done-), or cannot
    be read: the planner holds such a machine owed with a token no node proves (seed 30616: a stripped machine's tag
    garbled by hand waited for its scrub boot, then was terminated unproven, as the scrub token contract says)."""
    scrub = instance.tags.get(INSTANCE_SCRUB_TAG)
    return scrub is not None and not scrub.startswith(SCRUB_DONE_PREFIX)
