"""Which buffer machines go: those past their leak bounds (stale), those beyond their part's target, and idle hot
ones that give their place under max_instances to owners' work no buffer machine fits.

Only a machine at rest goes (Buffers.claimable, or stale: idle, joined, nobody's, no scrub owed): none runs work.
"""

from __future__ import annotations

from warmswarm_autoscaling.actions import Terminate
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Buffers, Part
from warmswarm_autoscaling.snapshot import Instance


def surplus(cluster: Cluster, buffers: Buffers, buffered: list[Instance], waiting_at_cap: int) -> list[Terminate]:
    """`buffered`: the buffer's machines (no claimed one: an owner's tags, or this plan's claim); `waiting_at_cap`:
    owners' tasks this plan could not launch for because the fleet is at max_instances."""
    stale = [
        Terminate(
            i.id,
            f"buffer machine {i.id} ({i.instance_type} in {i.availability_zone}) was launched with other launch"
            " settings (AMI, network, boot scripts) than today's, is recycled and older than recycle_max_age_s, or its"
            " recycle count cannot be read (it served an unknown owner): no session gets it; terminated",
            cause="stale",
        )
        for i in buffered
        # At rest: stopped, or hot and running (a warm one that just joined is stopped first, by buffer.stop_joined).
        if i.id in buffers.stale and (i.state == "stopped" or (i.hot and i.state == "running"))
    ]
    fresh = [i for i in buffered if i.id not in buffers.stale]
    beyond = _beyond_target(cluster, buffers, fresh)
    going = {t.instance_id for t in beyond}
    return [*stale, *beyond, *_give_way(cluster, buffers, [i for i in fresh if i.id not in going], waiting_at_cap)]


def _give_way(cluster: Cluster, buffers: Buffers, buffered: list[Instance], waiting_at_cap: int) -> list[Terminate]:
    """Idle hot machines, one per task that waits at max_instances, the dearest first: a running buffer machine
    holds a place that an owner's work, which no buffer machine fits (a claim would have taken it), needs now.

    Machines an active reservation counts on stay (ops asked for them); booting ones stay (they may yet be claimed).
    """
    if waiting_at_cap <= 0:
        return []
    # Per (type, zone): the claimable hot machines the active reservations count on there.
    kept: dict[tuple[str, str], int] = {}
    for hold in buffers.holds:
        if hold.active and hold.instance_type is not None:
            for zone, held in hold.held.items():
                kept[(hold.instance_type, zone)] = kept.get((hold.instance_type, zone), 0) + held
    idle_hot = sorted(
        (i for i in buffered if i.hot and i.id in buffers.claimable),
        key=lambda i: (-cluster.policy.price_per_hour.get(i.instance_type, 0.0), i.id),
    )
    policy = cluster.policy
    going: list[Terminate] = []
    for instance in idle_hot:
        where = (instance.instance_type, instance.availability_zone)
        if kept.get(where, 0) > 0:
            kept[where] -= 1
            continue
        if len(going) == waiting_at_cap:
            break
        going.append(
            Terminate(
                instance.id,
                f"hot buffer machine {instance.id} ({instance.instance_type} in {instance.availability_zone}) gives"
                f" its place to owners' work: {waiting_at_cap} task(s) wait at max_instances={policy.max_instances}"
                " and none fits a buffer machine; it never ran anyone's work",
                cause="buffer_surplus",
            )
        )
    return going


def _beyond_target(cluster: Cluster, buffers: Buffers, buffered: list[Instance]) -> list[Terminate]:
    """Buffer machines beyond their part's target now (a buffer was shrunk, a type removed, demand fell): stopped
    ones of the warm buffer, and hot ones that joined (drained, nobody's: none has work or data). `buffered` holds
    no claimed machine (an owner's tags, or this plan's claim): a shrinking target never takes one."""
    policy = cluster.policy
    seen: dict[Part, int] = {}
    surplus: list[Terminate] = []
    for instance in sorted(buffered, key=lambda i: i.id):
        part = buffers.part_of[instance.id]
        seen[part] = seen.get(part, 0) + 1
        target = buffers.targets.get(part) if instance.availability_zone in policy.availability_zones else None
        keep = 0 if target is None else target.machines
        # Only one a session could claim (idle, joined, nobody's): a booting one may yet be.
        if seen[part] > keep and instance.id in buffers.claimable:
            which = "hot" if instance.hot else "warm"
            beyond = (
                f"is beyond its target: {target.said}"
                if policy.buffer_sizing == "demand" and target is not None
                else f"is beyond the {which} buffer's {keep} per zone for its type"
            )
            where = f"{part.instance_type} in {part.availability_zone}"
            surplus.append(
                Terminate(
                    instance.id,
                    f"buffer machine {instance.id} ({where}) {beyond}; it never ran anyone's work",
                    cause="buffer_surplus",
                )
            )
    return surplus
