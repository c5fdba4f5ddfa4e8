"""The buffers' refill: what each part (type, zone, hot or warm) lacks against its target is launched, anonymous, while
no owner waits for a place; and what ops should know when the buffers' machines do not join."""

from __future__ import annotations

from warmswarm_models import Resources, format_timestamp
from warmswarm_models.tier import WITH_DISKS_STATES

from warmswarm_autoscaling.actions import Launch, Terminate
from warmswarm_autoscaling.plan.backoff import MAX_BACKOFF_FACTOR
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Buffers, Part, Target
from warmswarm_autoscaling.plan.surplus import surplus
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES
from warmswarm_autoscaling.plan.tokens import launch_token
from warmswarm_autoscaling.snapshot import NOBODY


def refill(
    cluster: Cluster,
    buffers: Buffers,
    *,
    launching: bool,
    claimed: frozenset[str],
    waiting_at_cap: int = 0,
    owed_to_owners: int = 0,
) -> list[Launch | Terminate]:
    """Launch what the buffer lacks per type and zone against its target (demand.py; surplus idle machines go),
    while no owner waits.

    Owners' launches come first: nothing is added to the buffer in a cycle that launches, claims or starts a machine
    for pending work.
    Buffer machines count against max_instances while they boot and against max_stopped_instances after; a
    reservation's (reservations.py) raise its part's hot target, within max_instances alone.
    `claimed`: machines this plan claims for owners, which are no longer the buffer's (never its surplus).
    `waiting_at_cap`: owners' tasks this plan could not launch for because the fleet is at max_instances (surplus.py:
    idle hot machines give way to them); `owed_to_owners`: owners whose work got no machine this plan, for whatever
    reason (a cap, a back-off): the refill leaves each a place, so that it need not take one back from the buffer.
    """
    policy = cluster.policy
    targets = buffers.targets
    # In the buffer: on its way (booting, pulling) or stopped; a stopped one whose node was removed could never
    # come back as a node, so it is no part of it (terminated here).
    kept = [
        i for i in cluster.snapshot.instances if i.in_buffer and i.state in WITH_DISKS_STATES and i.id not in claimed
    ]
    orphans = [i for i in kept if i.state == "stopped" and i.id not in cluster.with_node]
    buffered = [i for i in kept if i not in orphans]
    actions: list[Launch | Terminate] = [
        *(
            Terminate(
                i.id,
                f"buffer machine {i.id} ({i.instance_type} in {i.availability_zone}) is stopped and its swarm node"
                " was removed: it could never serve a session; it never ran anyone's work",
                cause="node_down",
            )
            for i in orphans
        ),
        # Unless the reservations could not be read: a held machine is not let go for a store that did not answer.
        *([] if cluster.snapshot.reservations_unread else surplus(cluster, buffers, buffered, waiting_at_cap)),
    ]
    backoff = cluster.buffer_backoff
    if launching or not targets or (backoff is not None and backoff.until > cluster.now):
        return actions  # owners first; or the buffers' machines do not join (buffer_notices says until when)
    stopped = sum(1 for i in cluster.snapshot.instances if i.state in STOPPED_STATES)
    booting = sum(1 for i in buffered if i.is_live and not i.hot)
    # A claimed machine not yet started keeps its place: the refill taking it would leave the claim unstarted. So does
    # an owner still waiting for a machine: taken now, it would be given back to them later (surplus.py), a boot lost.
    # And a recycled machine stopped for its scrub boot (recycle.steps starts it): a place within max_instances.
    scrub_boots = sum(1 for i in cluster.snapshot.instances if i.scrub_owed and i.in_buffer and i.state == "stopped")
    owed = len(cluster.owed_starts) + owed_to_owners + scrub_boots
    live_budget = min(policy.max_instances - len(cluster.live) - owed, policy.max_launches_per_cycle)
    if backoff is not None:
        # The back-off is over but no boot has worked since its last failure: one machine probes, of the first part
        # that lacks one, and the others follow once it joins (which forgets the back-off). Relaunching every part
        # at once would cost a machine per part at each try.
        if any(i.launched_at >= backoff.since and i.is_live and i.id not in cluster.joined for i in buffered):
            return actions
        live_budget = min(live_budget, 1)
    # A warm machine is stopped once joined (within max_stopped_instances); a hot one stays live (max_instances).
    budgets = {False: min(policy.max_stopped_instances - stopped - booting, live_budget), True: live_budget}
    launched = 0
    zones = policy.availability_zones
    # The hot buffer first, then by type and in the zones' order (as the settings name them).
    for part in sorted(
        (p for p in targets if p.availability_zone in zones),
        key=lambda p: (not p.hot, p.instance_type, zones.index(p.availability_zone)),
    ):
        instance_type, zone, hot = part
        if instance_type not in cluster.snapshot.instance_types:
            continue  # EC2 does not know it (a typo, another region): the settings name it, ops see none
        if (instance_type, zone) in cluster.unavailable:
            continue  # no capacity now
        target = targets[part]
        have = [i for i in buffered if buffers.part_of[i.id] == part]
        coming = sum(1 for into in buffers.recycling_into.values() if into == part)  # being recycled into it
        # Every machine ever launched for this part of the buffer that is still listed, claimed ones included:
        # the launch that made a machine since claimed must not be replayed (its token would answer with that
        # machine, now an owner's, and launch nothing, cycle after cycle).
        listed = [i.id for i in cluster.snapshot.instances if i.buffer and buffers.part_of[i.id] == part]
        for _ in range(target.machines - len(have) - coming):
            if min(budgets[hot], live_budget - launched) <= 0:
                break
            budgets[hot] -= 1
            launched += 1
            actions.append(_buffer_launch(cluster, part, target, len(have), listed, len(actions)))
    return actions


def _buffer_launch(cluster: Cluster, part: Part, target: Target, have: int, listed: list[str], index: int) -> Launch:
    instance_type, zone, hot = part
    # The decision: "one more buffer machine of this type and zone, beside those listed": a lost answer
    # retried next cycle (the same machines listed) is the same call; once it is listed, the next differs.
    # (The warm buffer's decision reads as it always did: tokens of machines launched before stay the same.)
    decision = f"{'hot-' if hot else ''}buffer:{instance_type}:{zone}:{index}:" + ",".join(sorted(listed))
    if hot:
        reason = (
            f"{target.said} and has {have}: a machine pulls the buffer's images, joins drained and waits, running,"
            " for a session to claim it"
        )
    else:
        reason = (
            f"{target.said} and has {have}: a machine pulls the buffer's images and is stopped for an owner's first"
            " session"
        )
    return Launch(
        instance_type=instance_type,
        availability_zone=zone,
        owner=NOBODY,
        task_ids=(),
        demand=Resources(),
        client_token=launch_token(cluster.policy.cluster, NOBODY, decision, cluster.snapshot.carried.spent_tokens),
        reason=reason,
        purpose="hot_buffer" if hot else "buffer",
    )


def buffer_notices(cluster: Cluster) -> list[str]:
    """What ops should know of the buffers: their machines did not join, and when they refill again."""
    backoff = cluster.buffer_backoff
    if backoff is None or backoff.until <= cluster.now:
        return []
    where = ", ".join(sorted(f"{t} in {z}" for t, z in backoff.offerings))
    return [
        f"the last {len(backoff.failed)} buffer machine(s) launched ({where}) did not join the swarm within"
        f" max_start_s={cluster.policy.max_start_s:g} (their images may not pull: check AUTOSCALING_BUFFER_IMAGES):"
        f" the buffers launch nothing, of any type, until {format_timestamp(backoff.until)} (the back-off doubles"
        f" with each failure, from capacity_backoff_s, at most {MAX_BACKOFF_FACTOR}x); owners' launches are not"
        " held back"
    ]
