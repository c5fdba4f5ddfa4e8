"""The read side: the status, volumes and reservations answers from the last snapshot, plan and journal; pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from warmswarm_models import OWNER_KEYS, format_timestamp
from warmswarm_models.answers import (
    AutoscalerStatusOut,
    BufferOut,
    CycleOut,
    DecisionOut,
    InstanceOut,
    LaunchOut,
    NodeOut,
    PendingOut,
    VolumeOut,
    VolumeOwner,
    VolumesOut,
)
from warmswarm_models.reservation import Reservation, ReservationOut, UnreadableRecordOut

from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.reservations import lead_s, unobserved
from warmswarm_autoscaling.plan.result import Hold
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Snapshot, Volume


def status(
    *,
    cluster: str,
    dry_run: bool,
    leader: bool,
    last_cycle: CycleOut | None,
    snapshot: Snapshot | None,
    plan: Plan | None,
    decisions: Iterable[DecisionOut],
    now: float,
    policy: Policy | None = None,
    unreadable: Sequence[UnreadableRecordOut] = (),
) -> AutoscalerStatusOut:
    """The world as the last cycle saw it, why tasks wait, and the decisions newest first; `unreadable`: the stored
    records the last read of the store skipped."""
    newest_first = list(decisions)[::-1]
    if snapshot is None or plan is None:
        return AutoscalerStatusOut(
            cluster=cluster,
            dry_run=dry_run,
            leader=leader,
            last_cycle=last_cycle,
            decisions=newest_first,
            unreadable_records=list(unreadable),
        )
    instances = {i.id: i for i in snapshot.instances}
    nodes = []
    for node in snapshot.nodes:
        since = plan.carried.idle_since.get(node.id)
        instance = instances.get(node.engine_instance_id or "")
        nodes.append(
            NodeOut(
                node_id=node.id,
                hostname=node.hostname,
                role=node.role,
                state=node.state,
                availability=node.availability,
                owner=_owner_as_written(node.labels),
                instance_id=node.labelled_instance_id or node.engine_instance_id,
                instance_type=instance.instance_type if instance else None,
                availability_zone=instance.availability_zone if instance else None,
                idle_s=round(now - since, 1) if since is not None else None,
            )
        )
    pending = [
        PendingOut(
            task_id=w.task_id,
            service=w.service_name,
            owner=w.owner.labels(),
            reason=w.reason,
            unschedulable=w.unschedulable,
            starting=w.starting,
        )
        for w in plan.waiting
    ]
    in_flight = [
        LaunchOut(
            instance_id=i.id,
            instance_type=i.instance_type,
            availability_zone=i.availability_zone,
            state=i.state,
            owner=_owner_as_written(i.tags),
            age_s=round(now - i.launched_at, 1),
        )
        for i in (instances[instance_id] for instance_id in plan.in_flight)
    ]
    node_of = {n.engine_instance_id: n.id for n in snapshot.nodes if n.engine_instance_id}
    volume_created = {v.id: v.created_at for v in snapshot.volumes}
    machines = []
    for i in sorted(snapshot.instances, key=lambda i: i.id):
        tier, until = tier_of(i)
        machines.append(
            InstanceOut(
                instance_id=i.id,
                instance_type=i.instance_type,
                availability_zone=i.availability_zone,
                state=i.state,
                owner=_owner_as_written(i.tags),
                tier=tier,
                tier_until=format_timestamp(until) if until is not None else None,
                node_id=node_of.get(i.id),
                launched_at=format_timestamp(i.launched_at),
                buffer_kind=("hot" if i.hot else "warm") if i.buffer else None,
                claimed_at=_moment(i.claimed_at),
                started_at=_moment(i.started_at),
                volume_created_at=_moment(volume_created.get(i.volume_id or "")),
            )
        )
    return AutoscalerStatusOut(
        cluster=cluster,
        dry_run=dry_run,
        leader=leader,
        last_cycle=last_cycle,
        nodes=nodes,
        pending=pending,
        launches_in_flight=in_flight,
        instances=machines,
        decisions=newest_first,
        notices=list(plan.notices),
        buffers=[
            BufferOut(
                instance_type=part.instance_type,
                availability_zone=part.availability_zone,
                kind="hot" if part.hot else "warm",
                target=part.target,
                held=part.held,
                said=part.said,
            )
            for part in plan.buffers
        ],
        reservations=reservations(policy, plan, snapshot.reservations, now) if policy is not None else [],
        unreadable_records=list(unreadable),
    )


def volumes(snapshot: Snapshot | None, user_id: str | None = None) -> VolumesOut | None:
    """This cluster's cache volumes as the last cycle saw them (None before the first), optionally one user's."""
    if snapshot is None:
        return None
    return VolumesOut(
        volumes=[
            _volume(v)
            for v in sorted(snapshot.volumes, key=lambda v: v.id)
            if user_id is None or v.tags.get("user_id") == user_id
        ]
    )


def _volume(volume: Volume) -> VolumeOut:
    return VolumeOut(
        volume_id=volume.id,
        # Every key, null when unset: a reader need not guess which of the three a volume lacks.
        owner=VolumeOwner(**{key: volume.tags.get(key) for key in OWNER_KEYS}),
        availability_zone=volume.availability_zone,
        state=volume.state,
        size_gib=volume.size_gib,
        volume_type=volume.volume_type,
        attached_to=volume.attachments[0].instance_id if volume.attachments else None,
        # A hand-edited value the janitor cannot read counts as unset for it, and so here.
        released_at=format_timestamp(volume.released_at) if volume.released_at is not None else None,
        expires_at=format_timestamp(volume.expires_at) if volume.expires_at is not None else None,
    )


def _moment(epoch_s: float | None) -> str | None:
    return format_timestamp(epoch_s) if epoch_s is not None else None


def _owner_as_written(labels: Mapping[str, str]) -> dict[str, str]:
    # The raw ids, not the parsed owner: a node someone labelled with an unusable id must not break the status.
    return {key: labels[key] for key in OWNER_KEYS if key in labels}


def reservations(
    policy: Policy,
    plan: Plan | None,
    chosen: Sequence[Reservation],
    now: float,
    offerings: Offerings | None = None,
) -> list[ReservationOut]:
    """Each reservation as the last plan holds it, formatted, never worked out again; one that plan did not see (none
    yet, a follower, one just made) by the clock alone, with none held (its type named when `offerings` are known)."""
    planned = {hold.reservation.id: hold for hold in plan.holds} if plan is not None else {}
    return [_reservation(planned.get(r.id) or unobserved(r, policy, offerings), policy, now) for r in chosen]


def _reservation(hold: Hold, policy: Policy, now: float) -> ReservationOut:
    r = hold.reservation
    state = hold.status(now)
    held, arrived = sum(hold.held.values()), sum(hold.arrived.values())
    kept = f"{hold.instance_type} in {', '.join(hold.shares)}" if hold.instance_type else ""
    if state == "released":
        reason = f"released at {format_timestamp(r.released_at)}: what it left unclaimed is the buffer's surplus"
    elif not hold.observed:
        reason = (
            "no plan of this replica has held it against the machines yet (it was just made, the replica starts, or"
            " it is not the leader)"
        )
    elif hold.instance_type is None:
        reason = "no allowed instance type fits one session: nothing is held for it"
    elif not hold.shares:
        reason = f"its zone {r.zone} is not one of the autoscaler's zones: nothing is held for it"
    elif state == "pending":
        reason = f"the hot buffer starts filling for it at {format_timestamp(hold.fill_from)}"
    else:
        reason = f"the hot buffer keeps {r.sessions - arrived} running {kept} for it; {held} ready, {arrived} claimed"
    return ReservationOut(
        id=r.id,
        group=r.group,
        sessions=r.sessions,
        resources=r.resources,
        at=format_timestamp(r.at),
        zone=r.zone,
        release_after_s=r.release_after_s,
        created_at=format_timestamp(r.created_at),
        status=state,
        machines_held=held,
        sessions_arrived=arrived,
        instance_type=hold.instance_type,
        zones=list(hold.shares),
        fill_from=format_timestamp(hold.fill_from),
        release_at=format_timestamp(r.released_at),
        lead_s=lead_s(policy),
        reason=reason,
    )
