"""The buffers: never-used machines per type and zone with their images, each claimed by one owner.

A buffer machine is launched anonymous (tag warmswarm:buffer=true, no owner), boots, pulls the buffer's
images and joins drained and unlabelled: it runs nothing and nobody's data is on it. A machine of the warm
buffer is then stopped; one of the hot buffer (buffer-kind "hot") stays running. An owner's session that
would otherwise need a cold launch claims one instead, a hot one first: the machine gets the owner's tags and
the owner's cache volume's id. A stopped claim becomes that owner's warm machine (a warm-until a start
timeout away), started by tiers.py as any other; a hot claim gets the volume attached while it runs, and its
node takes the owner's work once it says the volume is mounted (Cluster.mounting, lifecycle.label_joined).
A claimed machine returns to a buffer only through recycling (recycle.py: where its owner's group allows it, stopped,
detached, stripped and scrubbed, with the proof), and goes to an owner only if their groups accept recycled machines;
the buffer refills, to targets the settings fix or recent demand sizes (demand.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import Owner, Resources

from warmswarm_autoscaling.actions import (
    AttachVolume,
    ClaimBufferMachine,
    CreateVolume,
    DetachVolume,
    Stop,
    Terminate,
)
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Buffers, Waiting
from warmswarm_autoscaling.plan.room import NeedsLaunch
from warmswarm_autoscaling.plan.tiers import StopBudget
from warmswarm_autoscaling.plan.volumes import CACHE_DEVICE, VolumeChoice, new_volume
from warmswarm_autoscaling.snapshot import Instance


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
        if instance.hot or instance.scrub_owed:
            continue  # the hot buffer's: kept running, joined and drained, for a claim; or a scrub not yet proven
        if instance.id in busy or instance.id in done or instance.id in cluster.mount_failed:
            continue  # kept for its work; or terminated this plan for a mount it never had (terminate_unmounted)
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
        # A recycled machine (scrubbed, proven), or one of unknown count, only for owners whose groups all accept one.
        accepts = all(need.cache.accept_recycled for need in needs)
        startable = [m for m in free if (m.hot or result.starts < start_budget) and (accepts or not m.was_recycled)]
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
    recyclable = any(need.cache.recycle_machines for need in needs)
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
            recyclable=recyclable,
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
        recyclable=recyclable,
    )
