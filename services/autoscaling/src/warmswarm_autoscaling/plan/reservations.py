"""The buffer decision (decide_buffers), and reservations for a known burst: the hot buffer raised before one.

Ops declare "group G, N sessions of this size at T, in zone Z or any" (the autoscaler's API, its Redis). A
reservation is active from `at - lead_s` to `at + release_after_s`, where

    lead_s = buffer_refill_s × reservation_lead_margin

(buffer_refill_s is the refill time demand sizing already uses: a machine's launch, boot, image pull and join;
the margin covers a slow boot, a cycle's wait and a launch spread over cycles by max_launches_per_cycle).
While active, the hot-buffer target of the cheapest allowed type one session fits, in Z (or spread evenly over the
allowed zones, the first zones taking the remainder, when any), is at least the sessions still to come: N less the
machines of that part claimed since `at` (its sessions, come; a claim before `at` is someone else's and is
refilled). Reservations of one part add up; the part's target is the larger of that sum and the buffers' own
(demand.py), so an explicit ops intent is not cut by the demand budget, only by max_instances (the refill's own
bound). After `at + release_after_s` the extra target goes, and buffer._surplus terminates what is left unclaimed
(idle, joined, nobody's); a claimed machine is an owner's and never a buffer's surplus.

Claims are not changed: any session may claim a reservation's machine (the director writes no group on a
service, so group G is not enforced at claim time; it names the reservation for ops).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from warmswarm_models import Resources, format_timestamp
from warmswarm_models.reservation import Reservation

from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.demand import buffer_targets
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.result import BufferPart, Buffers, Hold, Part, Target
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Node


def lead_s(policy: Policy) -> float:
    """How long before its moment a reservation's machines start being launched."""
    return policy.buffer_refill_s * policy.reservation_lead_margin


def fill_from(reservation: Reservation, policy: Policy) -> float:
    return reservation.at - lead_s(policy)


def is_active(reservation: Reservation, policy: Policy, now: float) -> bool:
    return fill_from(reservation, policy) <= now < reservation.released_at


def fitting_type(offerings: Offerings, size: Resources) -> str | None:
    """The cheapest allowed, known, priced type one session of `size` fits on a fresh node; None: none does."""
    return next((name for name in offerings.by_price if size.fits_in(offerings.room_of(name))), None)


def spread(sessions: int, zones: Sequence[str]) -> dict[str, int]:
    """Sessions per zone, as even as can be, the first zones taking one more."""
    if not zones:
        return {}
    share, extra = divmod(sessions, len(zones))
    return {zone: share + (1 if i < extra else 0) for i, zone in enumerate(zones) if share + (i < extra) > 0}


def describe(reservation: Reservation) -> str:
    return (
        f"reservation {reservation.id} for group {reservation.group}: {reservation.sessions} sessions at"
        f" {format_timestamp(reservation.at)}"
    )


def decide_buffers(cluster: Cluster) -> Buffers:
    """The buffer decision, once per plan: which machines a session may claim, the reservations' holds, and each
    part's target (the buffers' own, raised per hot part to what active reservations still need)."""
    part_of = {i.id: Part(i.instance_type, i.availability_zone, i.hot) for i in cluster.snapshot.instances if i.buffer}
    stale = stale_machines(cluster)
    claimable = _claimable(cluster, stale)
    found = _holds(cluster, claimable, part_of)
    buffers_own, seen = buffer_targets(cluster)
    targets = dict(buffers_own)
    wanted: dict[Part, int] = {}
    said: dict[Part, list[str]] = {}
    for hold in found:
        if not hold.active or hold.instance_type is None:
            continue
        for zone, count in hold.still_to_come.items():
            part = Part(hold.instance_type, zone, True)
            wanted[part] = wanted.get(part, 0) + count
            said.setdefault(part, []).append(describe(hold.reservation))
    # The larger per part: an explicit ops intent is not cut by the demand budget, nor the buffers' own by it.
    for part, count in wanted.items():
        own = targets.get(part)
        if own is None or count > own.machines:
            kept = f"the hot buffer keeps {count} running {part.instance_type} in {part.availability_zone}"
            targets[part] = Target(count, f"{'; '.join(said[part])}: {kept}")
    held: dict[Part, int] = {}
    for instance in cluster.snapshot.instances:
        if instance.in_buffer and instance.state not in ("shutting-down", "terminated"):
            held[part_of[instance.id]] = held.get(part_of[instance.id], 0) + 1
    recycling_into = _recycling_into(cluster, targets, held)
    for part in recycling_into.values():
        held[part] = held.get(part, 0) + 1
    parts = tuple(
        BufferPart(
            instance_type=part.instance_type,
            availability_zone=part.availability_zone,
            hot=part.hot,
            target=targets[part].machines if part in targets else 0,
            held=held.get(part, 0),
            said=targets[part].said if part in targets else "not named by the settings: its machines go",
        )
        for part in sorted({*targets, *held})
    )
    return Buffers(
        targets=targets,
        holds=tuple(found),
        claimable=claimable,
        part_of=part_of,
        parts=parts,
        arrivals=seen,
        stale=stale,
        recycling_into=recycling_into,
    )


def _recycling_into(cluster: Cluster, targets: Mapping[Part, Target], held: Mapping[Part, int]) -> dict[str, Part]:
    """The part each machine being recycled, still its owner's (recycle.py: marked, stopping, detaching), will join: the
    hot part of its type and zone while that has room, else the warm one. It counts there from its mark on, so the
    refill does not launch for a place it will take; its strip writes that part."""
    room = {part: target.machines - held.get(part, 0) for part, target in targets.items()}
    into: dict[str, Part] = {}
    for instance in sorted(cluster.snapshot.instances, key=lambda i: i.id):
        if not instance.scrub_owed or instance.in_buffer or instance.state in ("shutting-down", "terminated"):
            continue
        hot = Part(instance.instance_type, instance.availability_zone, True)
        warm = Part(instance.instance_type, instance.availability_zone, False)
        part = hot if room.get(hot, 0) > 0 else warm
        warm_tier = instance.warm_until is not None and instance.warm_until > cluster.now
        if room.get(part, 0) <= 0 and not warm_tier:
            # No place left for it (the buffers refilled or shrank since its mark): it joins no part, and is not
            # stripped into one with no place (the fault campaign's deadline, seed 172); recycle._owned ends it. One
            # whose warm tier still holds is a return gone hot, whose claim frees the hot place it takes.
            continue
        part = hot if room.get(part, 0) <= 0 and hot in targets else part
        room[part] = room.get(part, 0) - 1
        into[instance.id] = part
    return into


def stale_machines(cluster: Cluster) -> frozenset[str]:
    """Buffer machines no session may have any more (the leak bounds): launched with other launch settings than
    today's (an old AMI, boot scripts or network), recycled and older than recycle_max_age_s, or of a recycle count
    that cannot be known (it served an unknown number of owners: no bound holds). A machine whose launch
    settings are not known (no tag: launched by an earlier version) is not taken for stale; it is never recycled
    either (recycle.past_bounds asks for today's settings)."""
    policy = cluster.policy
    late = {i.id for i in cluster.late}
    return frozenset(
        i.id
        for i in cluster.snapshot.instances
        if i.in_buffer
        and not i.scrub_owed
        and i.id not in cluster.mount_failed  # terminated for its mount (lifecycle.terminate_unmounted)
        and i.id not in late  # terminated for its start timeout, which the buffers' back-off counts
        and (
            (i.launch_settings and i.launch_settings != policy.launch_settings)
            or i.recycled is None  # it served an unknown owner, how many: its bounds cannot be applied
            or (i.was_recycled and cluster.now - i.launched_at >= policy.recycle_max_age_s)
        )
    )


def unobserved(reservation: Reservation, policy: Policy, offerings: Offerings | None = None) -> Hold:
    """A reservation no plan has held against the machines (before a cycle, on a follower, just made): by the clock
    alone, with none held, and its type when the types are known; the next cycle's plan decides the rest."""
    zones = policy.availability_zones if reservation.zone is None else (reservation.zone,)
    shares = spread(reservation.sessions, [zone for zone in zones if zone in policy.availability_zones])
    instance_type = fitting_type(offerings, reservation.size) if offerings is not None else None
    moment = fill_from(reservation, policy)
    return Hold(reservation, instance_type, shares, False, {}, {}, dict(shares), moment, observed=False)


def _claimable(cluster: Cluster, stale: frozenset[str]) -> frozenset[str]:
    """The one rule of a buffer machine a session may claim now: unclaimed, not failed a mount; hot: running, its node
    ready, drained and unlabelled (nothing runs there, nobody's data); warm: stopped with its node still listed."""
    ready_nodes: dict[str, list[Node]] = {}
    for node in cluster.ours:
        if node.engine_instance_id and node.state == "ready":
            ready_nodes.setdefault(node.engine_instance_id, []).append(node)
    found = set()
    for instance in cluster.snapshot.instances:
        # One this plan terminates for its missing mount (it names a volume it never got) is no claim's either: the
        # surplus would terminate it a second time.
        if not instance.in_buffer or instance.id in cluster.mount_failed:
            continue
        if instance.scrub_owed or instance.id in stale:
            continue  # a recycled machine before its scrub is proven; one past its leak bounds (surplus.py lets it go)
        if instance.hot:
            nodes = ready_nodes.get(instance.id, [])
            taken = any(n.availability == "active" or n.is_labelled for n in nodes)
            if instance.state == "running" and instance.id in cluster.joined_ready and nodes and not taken:
                found.add(instance.id)
        elif instance.state == "stopped" and instance.id in cluster.with_node:
            found.add(instance.id)
    return frozenset(found)


def _holds(cluster: Cluster, claimable: frozenset[str], part_of: Mapping[str, Part]) -> list[Hold]:
    """Every reservation of the snapshot with its part, its sessions come and the claimable machines it holds."""
    policy = cluster.policy
    # Per hot part, the moments its machines were claimed (AWS's clock), oldest first; and its claimable machines.
    claims: dict[Part, list[float]] = {}
    free: dict[Part, int] = {}
    for instance in cluster.snapshot.instances:
        if instance.claimed_from_buffer and instance.hot and instance.claimed_at is not None:
            claims.setdefault(part_of[instance.id], []).append(instance.claimed_at)
        if instance.hot and instance.id in claimable:
            free[part_of[instance.id]] = free.get(part_of[instance.id], 0) + 1
    for moments in claims.values():
        moments.sort()
    found: list[Hold] = []
    for reservation in sorted(cluster.snapshot.reservations, key=lambda r: (r.at, r.id)):
        instance_type = fitting_type(cluster.offerings, reservation.size)
        zones = policy.availability_zones if reservation.zone is None else (reservation.zone,)
        shares = spread(reservation.sessions, [z for z in zones if z in policy.availability_zones])
        active = is_active(reservation, policy, cluster.now) and instance_type is not None
        arrived: dict[str, int] = {}
        held: dict[str, int] = {}
        for zone, share in shares.items() if active else ():
            assert instance_type is not None
            part = Part(instance_type, zone, True)
            # Claims since its moment, taken in order (one claim is one reservation's session, not every one's).
            mine = [c for c in claims.get(part, []) if reservation.at <= c < reservation.released_at][:share]
            for moment in mine:
                claims[part].remove(moment)
            arrived[zone] = len(mine)
            held[zone] = min(share - len(mine), free.get(part, 0))
            free[part] = free.get(part, 0) - held[zone]
        to_come = {zone: max(0, share - arrived.get(zone, 0)) for zone, share in shares.items()}
        moment = fill_from(reservation, policy)
        found.append(Hold(reservation, instance_type, shares, active, arrived, held, to_come, moment))
    return found


def reservation_notices(cluster: Cluster, holds: Sequence[Hold]) -> list[str]:
    """Why a reservation holds nothing though it should: no type fits it, its zone is not allowed; the store's
    failure to answer."""
    policy = cluster.policy
    found = [cluster.snapshot.reservations_problem] if cluster.snapshot.reservations_problem else []
    for hold in holds:
        if not is_active(hold.reservation, policy, cluster.now):
            continue
        if hold.instance_type is None:
            size = hold.reservation.size
            found.append(
                f"{describe(hold.reservation)}: no allowed instance type fits one session ({size.cpus:g} CPUs,"
                f" {size.memory_bytes / 2**20:.0f} MiB{f', {size.gpus} GPUs' if size.gpus else ''}) once the"
                " node's overhead is taken: nothing is held for it"
            )
        elif not hold.shares:
            found.append(
                f"{describe(hold.reservation)}: its zone {hold.reservation.zone} is not one of"
                f" AUTOSCALING_AVAILABILITY_ZONES: nothing is held for it"
            )
    return found


def refusals(
    reservation: Reservation, policy: Policy, offerings: Offerings | None, now: float
) -> list[tuple[str, str]]:
    """Why a new reservation cannot be held as asked, as (field, why) (the API answers 422 with them); none: it can.
    `offerings`: the allowed types as the last cycle saw them (None before one: the size is then checked by the
    planner, whose notices and the reservation's status say when no type fits)."""
    found = []
    if reservation.at <= now:
        found.append(
            ("at", f"{format_timestamp(reservation.at)} is not in the future (now is {format_timestamp(now)})")
        )
    if reservation.zone is not None and reservation.zone not in policy.availability_zones:
        allowed = ", ".join(policy.availability_zones) or "none"
        found.append(("zone", f"{reservation.zone!r} is not one of the autoscaler's zones ({allowed}); null means any"))
    if reservation.sessions > policy.max_instances:
        found.append(
            (
                "sessions",
                f"{reservation.sessions} need as many machines, more than max_instances={policy.max_instances}",
            )
        )
    if offerings is not None and fitting_type(offerings, reservation.size) is None:
        size = reservation.size
        found.append(
            (
                "resources",
                f"no allowed instance type ({', '.join(offerings.by_price) or 'none known'}) fits one session of"
                f" {size.cpus:g} CPUs and {size.memory_bytes} bytes once the node's overhead is taken",
            )
        )
    return found
