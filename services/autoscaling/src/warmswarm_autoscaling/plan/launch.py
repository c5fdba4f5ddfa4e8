"""New machines: tasks packed into one machine per owner, the cheapest fitting offering, within the limits.

A task whose owner's cache is on goes to the zone of the owner's volume; an owner without a volume first
gets one created (the launch follows in the next cycle, in the volume's zone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import CachePolicy, Owner, Resources

from warmswarm_autoscaling.actions import CreateVolume, Launch
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Waiting
from warmswarm_autoscaling.plan.room import NeedsLaunch, fits_type
from warmswarm_autoscaling.plan.tokens import launch_token, volume_token
from warmswarm_autoscaling.plan.volumes import VolumeChoice
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import InstanceType, Task, Volume


@dataclass(slots=True)
class _Bin:
    """A machine this cycle decides to launch, filled first-fit."""

    owner: Owner
    instance_type: InstanceType
    availability_zone: str
    room: Resources
    tasks: list[Task] = field(default_factory=list)
    volume: Volume | None = None  # the owner's cache volume this machine carries


@dataclass(slots=True)
class Launches:
    actions: list[Launch | CreateVolume] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)

    @property
    def launches(self) -> list[Launch]:
        return [a for a in self.actions if isinstance(a, Launch)]


def launches(cluster: Cluster, to_launch: list[NeedsLaunch], choices: Mapping[Owner, VolumeChoice]) -> Launches:
    policy = cluster.policy
    types = cluster.snapshot.instance_types
    result = Launches()
    bins: list[_Bin] = []
    creates: dict[Owner, CreateVolume] = {}
    by_price = sorted(
        (t for t in policy.allowed_instance_types if t in types and t in policy.price_per_hour),
        key=lambda t: (policy.price_per_hour[t], t),
    )
    per_zone = {zone: 0 for zone in policy.availability_zones}
    for instance in cluster.live:
        if instance.availability_zone in per_zone:
            per_zone[instance.availability_zone] += 1
    budget = min(policy.max_instances - len(cluster.live), policy.max_launches_per_cycle)

    # An owner gets one machine, and it carries their volume when any of their pending work keeps a
    # cache: otherwise a larger cache-off task would open a machine without it and take the rest along.
    owner_cache: dict[Owner, CachePolicy] = {}
    for need in to_launch:
        if need.cache.enabled:
            owner_cache.setdefault(need.owner, need.cache)

    for need in to_launch:  # already largest first
        task, owner = need.task, need.owner
        cache = owner_cache.get(owner, need.cache)

        def wait(reason: str, *, starting: bool = False, task: Task = task, owner: Owner = owner) -> None:
            result.waiting.append(Waiting(task.id, task.service_name, owner, reason, starting=starting))

        choice = choices.get(owner, VolumeChoice(create=True)) if cache.enabled else VolumeChoice()
        if choice.wait_reason:
            wait(choice.wait_reason)
            continue
        if owner in creates:
            wait(f"creating its cache volume in {creates[owner].availability_zone}", starting=True)
            continue
        open_bin = next((b for b in bins if b.owner == owner and task.reservations.fits_in(b.room)), None)
        if open_bin is not None:
            open_bin.tasks.append(task)
            open_bin.room = open_bin.room.minus(task.reservations)
            continue
        if cache.enabled and any(b.owner == owner for b in bins):
            wait("its owner's cache volume goes with one machine, which is full; waiting for room on it")
            continue
        if len(bins) >= budget:
            wait(_limit_reason(policy, len(cluster.live), len(bins)))
            continue
        if choice.volume is not None and choice.volume.availability_zone not in per_zone:
            # Its data is there and only there: launching elsewhere would run the session without it.
            wait(
                f"its cache volume {choice.volume.id} is in {choice.volume.availability_zone}, which is not in"
                f" AUTOSCALING_AVAILABILITY_ZONES {list(policy.availability_zones)}: add that zone (and its"
                " subnet) to launch there"
            )
            continue
        zones = (choice.volume.availability_zone,) if choice.volume else policy.availability_zones
        offering = _cheapest_offering(task.reservations, by_price, types, policy, cluster.unavailable, per_zone, zones)
        if offering is None:
            if choice.volume is not None:
                wait(
                    f"no fitting instance type has capacity in {choice.volume.availability_zone}, where the cache"
                    f" volume {choice.volume.id} of {owner} is; waiting, and retrying each type after"
                    f" capacity_backoff_s={policy.capacity_backoff_s:g}"
                )
            else:
                wait(
                    "every instance type that fits is out of capacity in every allowed availability zone;"
                    f" retrying each after capacity_backoff_s={policy.capacity_backoff_s:g}"
                )
            continue
        instance_type, zone = offering
        if choice.create:
            creates[owner] = CreateVolume(
                owner=owner,
                availability_zone=zone,
                size_gib=cache.size_gib,
                volume_type=cache.volume_type,
                ttl_s=cache.ttl_s,
                client_token=volume_token(policy.cluster, owner, cluster.snapshot.spent_tokens),
                reason=f"{owner} needs a cache and has no volume: {cache.size_gib} GiB {cache.volume_type} in {zone}",
            )
            wait(f"creating its cache volume in {zone}", starting=True)
            continue
        per_zone[zone] += 1
        room = instance_type.resources.minus(policy.node_overhead).minus(task.reservations)
        bins.append(_Bin(owner, instance_type, zone, room, [task], choice.volume))

    result.actions.extend(creates.values())
    for b in bins:
        _launch(b, policy, cluster.snapshot.spent_tokens, result)
    return result


def _launch(b: _Bin, policy: Policy, spent_tokens: frozenset[str], result: Launches) -> None:
    task_ids = tuple(sorted(t.id for t in b.tasks))
    demand = sum((t.reservations for t in b.tasks), Resources())
    price = policy.price_per_hour[b.instance_type.name]
    with_volume = f", with cache volume {b.volume.id}" if b.volume else ""
    result.actions.append(
        Launch(
            instance_type=b.instance_type.name,
            availability_zone=b.availability_zone,
            owner=b.owner,
            task_ids=task_ids,
            demand=demand,
            # The decision: a machine for this owner's first task (the bin's largest, taken first).
            client_token=launch_token(policy.cluster, b.owner, b.tasks[0].id, spent_tokens),
            reason=(
                f"{len(task_ids)} pending task(s) of {b.owner} need {demand.describe()}:"
                f" {b.instance_type.name} in {b.availability_zone} is the cheapest fit (${price:g}/h){with_volume}"
            ),
            volume_id=b.volume.id if b.volume else None,
        )
    )
    result.waiting.extend(
        Waiting(
            t.id,
            t.service_name,
            b.owner,
            f"launching a {b.instance_type.name} in {b.availability_zone}{with_volume}",
            starting=True,
        )
        for t in b.tasks
    )


def _limit_reason(policy: Policy, live_count: int, launching: int) -> str:
    if live_count + launching >= policy.max_instances:
        return f"max_instances={policy.max_instances} reached ({live_count} running or starting)"
    return f"max_launches_per_cycle={policy.max_launches_per_cycle} reached; launching in a later cycle"


def _cheapest_offering(
    demand: Resources,
    by_price: list[str],
    types: Mapping[str, InstanceType],
    policy: Policy,
    unavailable: Mapping[tuple[str, str], float],
    per_zone: Mapping[str, int],
    allowed_zones: tuple[str, ...],
) -> tuple[InstanceType, str] | None:
    # Within a type, the zone with the fewest of our machines: spreads the cluster across zones.
    zones = sorted(allowed_zones, key=lambda z: (per_zone.get(z, 0), allowed_zones.index(z)))
    for name in by_price:
        if not fits_type(demand, types[name], policy):
            continue
        for zone in zones:
            if (name, zone) not in unavailable:
                return types[name], zone
    return None
