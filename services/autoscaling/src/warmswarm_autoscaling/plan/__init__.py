"""Every autoscaling decision, as one pure function of a Snapshot: no clock, no I/O, no randomness.

One file per kind of decision, each returning values with reasons:
cluster.py    the snapshot indexed once (our nodes, joined, late and booting instances)
room.py       pending tasks matched to room that exists or is on its way
launch.py     new machines, one owner each, cheapest fitting offering (and the volume they carry)
volumes.py    which volume a launch carries; attach, release, the janitor; an operator's expiry
grow.py       a cache volume grown online as its data fills it (its node's fill, its owner's max, AWS's six hours)
lifecycle.py  label what joined; drain, terminate and remove what is idle, down or gone
tiers.py      the warm tier: stop an idle owner's machine, resume it for the owner, expire it
buffer.py     the buffers: anonymous machines (stopped or running), each claimed by one owner's first session
refill.py     the buffers' refill against their targets, and the notice when their machines do not join
recycle.py    an idle owner's machine recycled for the buffers: stopped, detached, stripped, scrubbed, proven
surplus.py    which buffer machines go: beyond their target, or giving their place to owners at max_instances
demand.py     the buffers' targets per type and zone: the settings' counts, or sized by recent arrivals
reservations.py  the buffer decision, once per plan (targets, holds, what is claimable); ops' reservations
result.py     what plan() answers, and the buffer decision's types
carried.py    what a cycle leaves the next (clocks, capacity marks), and what applying it taught
backoff.py    failures that repeat the same way back off, growing, over every type and zone
constraints.py  swarm's placement rules; deadline.py  when to look again

plan() runs them in phases, in this order: bind what joined, scale up, the janitor and growth, scale down; then the
notices for ops. One budget of stopped machines spans the phases. Apply sends the calls in the order AWS needs, not this
one: volumes created, claims tagged, volumes attached, then the rest (apply.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import CachePolicy, Owner

from warmswarm_autoscaling.actions import Action, ClaimBufferMachine
from warmswarm_autoscaling.plan import recycle
from warmswarm_autoscaling.plan.buffer import claim, half_claims, stop_joined
from warmswarm_autoscaling.plan.carried import planned
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.deadline import in_motion, next_deadline
from warmswarm_autoscaling.plan.grow import grow_volumes
from warmswarm_autoscaling.plan.launch import launches
from warmswarm_autoscaling.plan.lifecycle import (
    Clocks,
    busy_nodes,
    drain_without_cache,
    foreign_tasks,
    impostor_notice,
    label_joined,
    node_steps,
    owner_label_conflicts,
    tag_bound,
    terminate_late,
    terminate_unmounted,
)
from warmswarm_autoscaling.plan.offerings import unknown_types_notices
from warmswarm_autoscaling.plan.refill import buffer_notices, refill
from warmswarm_autoscaling.plan.reservations import decide_buffers, reservation_notices
from warmswarm_autoscaling.plan.result import Buffers, Plan, Waiting
from warmswarm_autoscaling.plan.room import Matching, match
from warmswarm_autoscaling.plan.tiers import StopBudget, outgrown, resumptions, stopped_steps
from warmswarm_autoscaling.plan.volumes import VolumeChoice, held_volumes, volume_actions, volume_choices
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Snapshot

__all__ = ["Plan", "Waiting", "plan"]


def plan(snapshot: Snapshot, policy: Policy) -> Plan:
    """Decide what to launch, label, drain, terminate and remove, and why tasks wait."""
    cluster = Cluster.of(snapshot, policy)
    # The buffer decision, once: claims, the refill, its surplus, the notices and the status all read it.
    buffers = decide_buffers(cluster)
    # A returning owner whose machine recycles goes hot where a hot machine takes them: their warm one is not resumed.
    cluster = dataclasses.replace(cluster, hot_returns=recycle.hot_returns(cluster, buffers))
    matching = match(cluster)
    bound = matching.bound()
    # One budget of stopped machines for the whole plan: the buffer's stops (scale up) and the warm tier's.
    stops = StopBudget.of(cluster)
    actions: list[Action] = bind(cluster, matching, bound)
    up = scale_up(cluster, buffers, matching, stops)
    actions += up.actions
    actions += janitor(cluster, up)
    # The volumes' other decision: one full while its owner works grows, online (plan/grow.py).
    growth = grow_volumes(cluster)
    actions += growth.actions
    clocks = Clocks()
    actions += scale_down(cluster, buffers, matching, bound, clocks, stops)
    return Plan(
        actions=tuple(actions),
        waiting=(*matching.waiting, *up.waiting),
        carried=planned(
            snapshot,
            idle_since=clocks.idle_since,
            down_since=clocks.down_since,
            stopped_since=clocks.stopped_since,
            unavailable_offerings=cluster.unavailable,
            volume_backoffs=cluster.volume_backoffs,
            buffer_backoff=cluster.buffer_backoff,
            arrivals=dict(buffers.arrivals),
        ),
        notices=(*notices(cluster, buffers), *growth.notices),
        in_flight=tuple(i.id for i in snapshot.instances if i.is_live and i.id not in cluster.joined),
        busy=in_motion(cluster),
        deadline=next_deadline(cluster, clocks.idle_since, clocks.stopped_since, buffers.holds),
        buffers=buffers.parts,
        holds=buffers.holds,
    )


def bind(cluster: Cluster, matching: Matching, bound: Mapping[str, Owner]) -> list[Action]:
    """Nodes that joined get their owner's labels (a batch machine the owner this plan binds it to) and machines
    their owner's tags; drained nodes that pending work was matched to come back; a node without its owner's
    cache is drained."""
    return [
        *label_joined(cluster, bound),
        *tag_bound(cluster),
        *matching.activations(),
        *drain_without_cache(cluster),
    ]


@dataclass(slots=True)
class ScaleUp:
    """What scaling up decided: its actions and waits, and what the janitor must know of them."""

    actions: list[Action] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    # Each owner's volume as the launches chose it (carried, waited for, or to be created).
    choices: Mapping[Owner, VolumeChoice] = field(default_factory=dict)
    # The cache policy of the owner each launched volume goes back to.
    volume_policies: Mapping[str, CachePolicy] = field(default_factory=dict)


def scale_up(cluster: Cluster, buffers: Buffers, matching: Matching, stops: StopBudget) -> ScaleUp:
    """Work with no room gets machines: its owner's warm machine resumed, a buffer machine claimed (only as many as
    this plan can start, its owner's volume attached), or a launch (with the owner's cache volume, created first if
    there is none); then the buffer refills, a buffer machine that joined is stopped, a half-done claim is undone."""
    wanting_cache = {need.owner for need in matching.to_launch if need.cache.enabled}
    choices = volume_choices(cluster.snapshot.volumes, wanting_cache, cluster.on_the_way, cluster.mount_failed)
    starts = resumptions(cluster, matching.resumed())
    start_budget = cluster.policy.max_instances - len(cluster.live) - len(starts)
    claims = claim(cluster, buffers, matching.to_launch, choices, start_budget=start_budget)
    # A claimed machine is started next cycle: it counts against max_instances like a resume or a launch.
    new = launches(cluster, claims.left, choices, resuming=len(starts) + claims.starts)
    claimed = frozenset(a.instance_id for a in claims.actions if isinstance(a, ClaimBufferMachine))
    return ScaleUp(
        actions=[
            *starts,
            *claims.actions,
            *new.actions,
            *refill(
                cluster,
                buffers,
                launching=bool(starts or new.actions or claims.actions),
                claimed=claimed,
                waiting_at_cap=new.at_cap,
                owed_to_owners=new.unserved_owners,
            ),
            *stop_joined(cluster, stops),
            *half_claims(cluster),
            *recycle.steps(cluster, buffers, stops, launching=bool(starts or new.actions or claims.actions)),
        ],
        waiting=[*claims.waiting, *new.waiting],
        choices=choices,
        volume_policies=new.volume_policies,
    )


def janitor(cluster: Cluster, up: ScaleUp) -> list[Action]:
    """Volumes: attached where machines wait for them, released when their machine is gone, renewed when their owner
    is back, deleted once expired; never one this plan's launches or a machine may still use, and, while this
    replica's clock disagrees with AWS's, no release (a deadline) and no delete."""
    snapshot = cluster.snapshot
    return volume_actions(
        snapshot.volumes,
        cluster.awaiting_volume,
        held_volumes(snapshot.instances, up.choices),
        up.volume_policies,
        cluster.policy,
        cluster.clock,
        clock_untrusted=bool(cluster.clock_skew),
    )


def scale_down(
    cluster: Cluster,
    buffers: Buffers,
    matching: Matching,
    bound: Mapping[str, Owner],
    clocks: Clocks,
    stops: StopBudget,
) -> list[Action]:
    """Idle nodes are drained, then stopped (warm, within `stops`) or terminated; down, late, unmounted and
    stopped machines end by their clocks (kept in `clocks` for the next cycle). An owner's machine whose group recycles
    is recycled instead of terminated where the buffers have room for it (recycle.py)."""
    return recycle.instead_of(
        cluster,
        buffers,
        [
            *node_steps(cluster, busy_nodes(cluster, matching.matched_nodes()), clocks, bound, stops),
            *terminate_late(cluster),
            *terminate_unmounted(cluster),
            *stopped_steps(
                cluster,
                cluster.snapshot.carried.stopped_since,
                clocks.stopped_since,
                outgrown(cluster, matching.launch_demands(), {i.id for i in matching.resumed()}),
            ),
        ],
        stops,
    )


def notices(cluster: Cluster, buffers: Buffers) -> tuple[str, ...]:
    """What ops should know that is no task's reason to wait: impostors, foreign work, labels someone else wrote,
    a part of the buffer that does not join, a reservation nothing is held for, allowed instance types EC2 does not
    know, a clock that disagrees with AWS's."""
    found = [impostor_notice(node, cluster) for node in cluster.impostors]
    found += foreign_tasks(cluster)
    found += owner_label_conflicts(cluster)
    found += buffer_notices(cluster)
    found += reservation_notices(cluster, buffers.holds)
    found += unknown_types_notices(cluster.snapshot.instance_types, cluster.policy.allowed_instance_types)
    if cluster.clock_skew:
        found.append(cluster.clock_skew)
    return tuple(found)
