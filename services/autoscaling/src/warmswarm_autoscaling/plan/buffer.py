"""The buffers: never-used machines per type and zone with their images, each claimed by one owner.

A buffer machine is launched anonymous (tag warmswarm:buffer=true, no owner), boots, pulls the buffer's
images and joins drained and unlabelled: it runs nothing and nobody's data is on it. A machine of the warm
buffer is then stopped; one of the hot buffer (buffer-kind "hot") stays running. An owner's session that
would otherwise need a cold launch claims one instead, a hot one first: the machine gets the owner's tags and
the owner's cache volume's id. A stopped claim becomes that owner's warm machine (a warm-until a start
timeout away), started by tiers.py as any other; a hot claim gets the volume attached while it runs, and its
node takes the owner's work once it says the volume is mounted (Cluster.mounting, lifecycle.label_joined).
Owner tags are never removed, so a claimed machine never returns to a buffer and no owner's data can reach
another; the buffer refills, to targets the settings fix or recent demand sizes (demand.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import Owner, Resources, format_timestamp
from warmswarm_models.tier import WITH_DISKS_STATES

from warmswarm_autoscaling.actions import (
    AttachVolume,
    ClaimBufferMachine,
    CreateVolume,
    DetachVolume,
    Launch,
    Stop,
    Terminate,
)
from warmswarm_autoscaling.plan.backoff import MAX_BACKOFF_FACTOR
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Buffers, Part, Target, Waiting
from warmswarm_autoscaling.plan.room import NeedsLaunch
from warmswarm_autoscaling.plan.surplus import surplus
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES, StopBudget
from warmswarm_autoscaling.plan.tokens import launch_token
from warmswarm_autoscaling.plan.volumes import CACHE_DEVICE, VolumeChoice, new_volume
from warmswarm_autoscaling.snapshot import NOBODY, Instance


def stop_joined(cluster: Cluster, budget: StopBudget) -> list[Stop | Terminate]:
    """A buffer machine whose node joined has its images (its boot pulls them before it joins): stopped, within the
    one budget of stopped machines (tiers.StopBudget); past it, terminated: the buffer never exceeds the cap."""
    done: dict[str, Stop | Terminate] = {}
    # A buffer node joined drained; work on one means someone activated it: its machine is not stopped under
    # that work (any node of it: a machine may show twice while a stale registration lingers).
    working = {t.node_id for t in cluster.snapshot.tasks if t.node_id and t.is_active and not t.global_service}
    busy = {node.engine_instance_id for node in cluster.ours if node.id in working}
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        if instance is None or not instance.in_buffer or instance.state != "running" or node.state != "ready":
            continue
        if instance.hot:
            continue  # the hot buffer's: kept running, joined and drained, for a claim
        if instance.id in busy or instance.id in done:
            continue
        where = f"buffer machine {instance.id} ({instance.instance_type} in {instance.availability_zone}) joined"
        if budget.take():
            done[instance.id] = Stop(
                instance.id, None, f"{where} with its images pulled: stopped until an owner's first session claims it"
            )
        else:
            done[instance.id] = Terminate(
                instance.id,
                f"{where}, but max_stopped_instances={cluster.policy.max_stopped_instances} machines are stopped (or"
                " about to be) already: terminated, it never ran anyone's work",
                cause="buffer_surplus",
            )
    return list(done.values())


def half_claims(cluster: Cluster) -> list[DetachVolume]:
    """A cache volume attached to a buffer machine nobody claimed (a claim whose tags never landed, a hand edit) is
    detached: the machine is nobody's, and the next owner it went to would find another's data on it. The volume
    stays its owner's; their next session claims or launches afresh."""
    unclaimed = {i.id for i in cluster.snapshot.instances if i.in_buffer}
    return [
        DetachVolume(
            volume.id,
            attachment.instance_id,
            False,
            f"cache volume {volume.id} of {volume.owner} is {attachment.state} to buffer machine"
            f" {attachment.instance_id}, which nobody claimed: detached, it stays its owner's",
        )
        for volume in cluster.snapshot.volumes
        for attachment in volume.attachments
        if attachment.instance_id in unclaimed and attachment.state in ("attaching", "attached")
    ]


@dataclass(slots=True)
class Claims:
    # A first session's cache volume is created in its claimed machine's zone, in the same plan (CreateVolume first);
    # an existing one is attached once the claim's tags landed (AttachVolume after its claim).
    actions: list[ClaimBufferMachine | CreateVolume | AttachVolume] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    left: list[NeedsLaunch] = field(default_factory=list)  # what still needs a launch

    @property
    def starts(self) -> int:
        """Claimed stopped machines, started next cycle: they count against max_instances like a launch (a hot
        claim runs already)."""
        return sum(1 for action in self.actions if isinstance(action, ClaimBufferMachine) and not action.hot)


def claim(
    cluster: Cluster,
    buffers: Buffers,
    to_launch: list[NeedsLaunch],
    choices: Mapping[Owner, VolumeChoice],
    *,
    start_budget: int,
) -> Claims:
    """Owners whose pending work fits a stopped buffer machine (in their volume's zone) claim one each.

    The claim is one action, applied in order (apply.py): a CreateTags with the owner's ids, the volume's id (the
    machine's per-boot script mounts it), the owner's warm tier and a warm-until `max_start_s` away; then, with
    the cache, the volume's attach to the stopped machine (AWS attaches to a stopped instance), so that its boot
    finds the device at once. No attach without the tags: an owner's volume never sits on an anonymous machine.
    From the next cycle on it is the owner's warm machine: started for this work, and terminated (volume kept) if
    nothing takes it by then. `start_budget`: machines this plan may still start within max_instances; a claim
    that could not be started would only expire (its warm-until passing) and burn the buffer, one machine after
    another. No claim while this replica's clock is untrusted: its warm-until would be wrong.
    """
    result = Claims()
    if cluster.clock_skew:
        result.left = list(to_launch)
        return result
    # Only machines of a type and zone the autoscaler would launch today: one left over from earlier settings
    # is no owner's to have (and _surplus terminates it). Hot ones first (no start, no boot), then the cheapest.
    # Only a claimable one (Buffers.claimable), and never one that holds an attachment (a half-done claim:
    # half_claims detaches it).
    attached = {a.instance_id for v in cluster.snapshot.volumes for a in v.attachments}
    offered = cluster.offerings.by_price
    free = sorted(
        (
            i
            for i in cluster.snapshot.instances
            if i.id in buffers.claimable
            and i.instance_type in offered
            and i.availability_zone in cluster.policy.availability_zones
            and i.id not in attached
        ),
        key=lambda i: (not i.hot, offered.index(i.instance_type), i.id),
    )
    by_owner: dict[Owner, list[NeedsLaunch]] = {}
    for need in to_launch:
        by_owner.setdefault(need.owner, []).append(need)
    for owner, needs in by_owner.items():
        # A stopped claim is started next cycle: only as many as this plan may still start.
        startable = [m for m in free if m.hot or result.starts < start_budget]
        fits = startable and not owner.is_nobody
        machine = _fitting(cluster, owner, needs, choices, startable) if fits else None
        if machine is None:
            result.left += needs
            continue
        free.remove(machine)
        created = _new_volume_for(cluster, machine, owner, needs, choices)
        if created is not None:
            result.actions.append(created)
        claimed = _claim(cluster, machine, owner, needs, choices, created)
        result.actions.append(claimed)
        if claimed.volume_id is not None:
            result.actions.append(_attach(machine, claimed.volume_id, owner))
        where = f"machine {machine.id} ({machine.instance_type} in {machine.availability_zone})"
        told = (
            f"starting hot: {where} of the hot buffer, running with its images pulled, is claimed for you"
            if machine.hot
            else f"starting from the buffer: {where} is claimed for you"
        )
        result.waiting += [Waiting(n.task.id, n.task.service_name, owner, told, starting=True) for n in needs]
    return result


def _fitting(
    cluster: Cluster,
    owner: Owner,
    needs: list[NeedsLaunch],
    choices: Mapping[Owner, VolumeChoice],
    free: list[Instance],
) -> Instance | None:
    """The cheapest free buffer machine that takes all the owner's pending work, where the owner's data is."""
    demand = sum((need.task.reservations for need in needs), Resources())
    zone: str | None = None
    if any(need.cache.enabled for need in needs):
        choice = choices.get(owner, VolumeChoice(create=True))
        if choice.wait_reason or (choice.volume is None and not choice.create):
            return None  # its volume is not ready (or is being made): no claim
        missing = cluster.volume_backoffs.get(choice.volume.id) if choice.volume is not None else None
        if missing is not None and missing.until > cluster.now:
            return None  # its device did not appear on its last machines: it backs off (launch.py says until when)
        # Where the data is; an owner without a volume gets one made where the machine is (_new_volume_for).
        zone = choice.volume.availability_zone if choice.volume is not None else None
    for machine in free:
        if zone is not None and machine.availability_zone != zone:
            continue
        if (machine.instance_type, machine.availability_zone) in cluster.unavailable:
            continue
        room = cluster.machine_room(machine)
        if demand.fits_in(room):
            return machine
    return None


def _new_volume_for(
    cluster: Cluster,
    machine: Instance,
    owner: Owner,
    needs: list[NeedsLaunch],
    choices: Mapping[Owner, VolumeChoice],
) -> CreateVolume | None:
    """A first session's cache volume, made in the claimed machine's zone in the same plan: no cycle lost."""
    cache = next((need.cache for need in needs if need.cache.enabled), None)
    if cache is None or choices.get(owner, VolumeChoice(create=True)).volume is not None:
        return None
    spent = cluster.snapshot.carried.spent_tokens
    return new_volume(cluster.policy, owner, cache, machine.availability_zone, spent)


def _attach(machine: Instance, volume_id: str, owner: Owner) -> AttachVolume:
    """The claimed machine's volume, attached once the claim's tags landed (an owner's volume never goes to a machine
    that is not theirs); a volume created in this plan is still "creating", and the janitor attaches it later."""
    if machine.hot:
        why = "which runs: attached now; its node takes their work once it says the volume is mounted"
    else:
        why = "which is stopped: attached before its start, so that its boot finds the device at once"
    said = f"cache volume {volume_id} of {owner} goes to buffer machine {machine.id} they claim, {why}"
    return AttachVolume(volume_id, machine.id, CACHE_DEVICE, said)


def _claim(
    cluster: Cluster,
    machine: Instance,
    owner: Owner,
    needs: list[NeedsLaunch],
    choices: Mapping[Owner, VolumeChoice],
    created: CreateVolume | None,
) -> ClaimBufferMachine:
    volume = choices[owner].volume if created is None and any(need.cache.enabled for need in needs) else None
    with_volume = f", with cache volume {volume.id}" if volume is not None else ""
    if created is not None:
        with_volume = f", with a new {created.size_gib} GiB cache volume created first in this cycle"
    volume_token = created.client_token if created is not None else None
    claimed = (
        f"{len(needs)} pending task(s) of {owner} claim {'hot ' if machine.hot else ''}buffer machine {machine.id}"
        f" ({machine.instance_type} in {machine.availability_zone}){with_volume}: it is theirs from now on"
    )
    warm_ttl_s = max(need.cache.warm_ttl_s for need in needs)
    if machine.hot:
        attached = ", attached while it runs" if volume is not None or created is not None else ""
        return ClaimBufferMachine(
            machine.id,
            owner,
            volume_id=volume.id if volume is not None else None,
            warm_ttl_s=warm_ttl_s,
            warm_until=None,
            reason=f"{claimed}{attached}; its node takes their work once it says the volume is mounted",
            hot=True,
            # AWS's clock: the start of hot_attach_s, read against the same clock (cluster.mount_deadline).
            claimed_at=cluster.now,
            volume_token=volume_token,
        )
    # The claim's moment on a warm one too: an arrival that demand.py counts (the simulator's LaunchTime is not reset
    # by the start that follows); cluster.mount_deadline reads it for hot machines only.
    return ClaimBufferMachine(
        machine.id,
        owner,
        volume_id=volume.id if volume is not None else None,
        warm_ttl_s=warm_ttl_s,
        # A start timeout away: if its work is gone before the start, it goes as a warm machine that expired.
        warm_until=cluster.clock.later + cluster.policy.max_start_s,
        reason=f"{claimed}, and started next",
        claimed_at=cluster.now,
        volume_token=volume_token,
    )


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
    owed = len(cluster.owed_starts) + owed_to_owners
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
        # Every machine ever launched for this part of the buffer that is still listed, claimed ones included:
        # the launch that made a machine since claimed must not be replayed (its token would answer with that
        # machine, now an owner's, and launch nothing, cycle after cycle).
        listed = [i.id for i in cluster.snapshot.instances if i.buffer and buffers.part_of[i.id] == part]
        for _ in range(target.machines - len(have)):
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
