"""Every autoscaling decision, as one pure function of a Snapshot: no clock, no I/O, no randomness.

One file per kind of decision, each returning values with reasons:
cluster.py    the snapshot indexed once (our nodes, joined, late and booting instances)
room.py       pending tasks matched to room that exists or is on its way
launch.py     new machines, one owner each, cheapest fitting offering (and the volume they carry)
volumes.py    which volume a launch carries; attach, release, the janitor; an operator's expiry
lifecycle.py  label what joined; drain, terminate and remove what is idle, down or gone
tiers.py      the warm tier: stop an idle owner's machine, resume it for the owner, expire it
buffer.py     the warm buffer: stopped anonymous machines, each claimed by one owner's first session
constraints.py  swarm's placement rules; deadline.py  when to look again
"""

from __future__ import annotations

from warmswarm_models import CachePolicy
from warmswarm_models.tier import WITH_DISKS_STATES

from warmswarm_autoscaling.actions import Action, TagInstance
from warmswarm_autoscaling.plan.buffer import claim, refill, stop_joined
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.deadline import in_motion, next_deadline
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
)
from warmswarm_autoscaling.plan.result import Plan, Waiting
from warmswarm_autoscaling.plan.room import match
from warmswarm_autoscaling.plan.tiers import resumptions, stopped_steps
from warmswarm_autoscaling.plan.volumes import clock_ahead_notice, volume_actions, volume_choices
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Snapshot

__all__ = ["Plan", "Waiting", "plan"]


def plan(snapshot: Snapshot, policy: Policy) -> Plan:
    """Decide what to launch, label, drain, terminate and remove, and why tasks wait."""
    cluster = Cluster.of(snapshot, policy)
    matching = match(cluster)
    bound = matching.bound()
    actions: list[Action] = [*label_joined(cluster, bound), *tag_bound(cluster)]
    waiting = list(matching.waiting)
    actions += matching.activations()
    actions += drain_without_cache(cluster)

    on_the_way = cluster.on_the_way
    cache_of = {need.task.id: need.cache for need in matching.to_launch if need.cache.enabled}
    choices = volume_choices(
        snapshot.volumes, {need.owner for need in matching.to_launch if need.cache.enabled}, on_the_way
    )
    starts = resumptions(cluster, matching.resumed())
    actions += starts
    claims = claim(cluster, matching.to_launch, choices)
    actions += claims.actions
    waiting += claims.waiting
    new = launches(cluster, claims.left, choices, resuming=len(starts))
    actions += new.actions
    waiting += new.waiting
    claimed = frozenset(a.instance_id for a in claims.actions if isinstance(a, TagInstance))
    actions += refill(cluster, launching=bool(new.actions or claims.actions), claimed=claimed)
    actions += stop_joined(cluster)
    # Volumes the janitor never releases nor deletes this cycle: one a launch of this cycle names; a
    # returning owner's while no launch can carry it yet (no capacity in its zone, a limit); and one a
    # machine may still mount (running, late and terminated this cycle, or stopped: someone may start it).
    # (Every launch's volume is its owner's choice.)
    held = {choice.volume.id for choice in choices.values() if choice.volume is not None}
    held |= {i.volume_id for i in snapshot.instances if i.state in WITH_DISKS_STATES and i.volume_id}
    returning: dict[str, CachePolicy] = {}
    for launch in new.launches:
        cache = next((cache_of[t] for t in launch.task_ids if t in cache_of), None)
        if launch.volume_id and cache is not None:
            returning[launch.volume_id] = cache
    clock_ahead = clock_ahead_notice(snapshot.aws_now, snapshot.now, policy)
    actions += volume_actions(
        snapshot.volumes, on_the_way, held, returning, policy, snapshot.now, deletes_refused=bool(clock_ahead)
    )

    clocks = Clocks()
    actions += node_steps(cluster, busy_nodes(cluster, matching.claimed_nodes()), clocks, bound)
    actions += terminate_late(cluster)
    actions += stopped_steps(cluster, snapshot.stopped_since, clocks.stopped_since)

    joined = cluster.joined
    notices = [impostor_notice(node, cluster) for node in cluster.impostors]
    notices += foreign_tasks(cluster)
    notices += owner_label_conflicts(cluster)
    if clock_ahead:
        notices.append(clock_ahead)
    return Plan(
        actions=tuple(actions),
        waiting=tuple(waiting),
        idle_since=clocks.idle_since,
        unavailable_offerings=cluster.unavailable,
        down_since=clocks.down_since,
        stopped_since=clocks.stopped_since,
        notices=tuple(notices),
        in_flight=tuple(i.id for i in snapshot.instances if i.is_live and i.id not in joined),
        busy=in_motion(cluster),
        deadline=next_deadline(cluster, clocks.idle_since, clocks.stopped_since),
    )
