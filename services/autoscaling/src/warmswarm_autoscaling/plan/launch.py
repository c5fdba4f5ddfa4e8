"""New machines: tasks packed into one machine per owner, the cheapest fitting offering, within the limits.

A task whose owner's cache is on goes to the zone of the owner's volume; an owner without a volume gets one
created, spread over the zones, and the machine for it launched in the same cycle and zone (apply creates the
volume first and gives the launch its id).

Machines that carry no volume are launched together, one RunInstances per type and zone (LaunchBatch):
AWS lets an account make about 2 RunInstances calls a second, and a class of 500 opening sessions at
once would wait minutes for 500 calls. Such machines start without an owner and each is bound to one
owner's pending work when its node joins (room.py, lifecycle.py). A machine that carries a volume is its
owner's from the start (Launch): the volume's id is in its boot script and its tags.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import CachePolicy, Owner, Resources, format_timestamp

from warmswarm_autoscaling.actions import CreateVolume, Launch, LaunchBatch
from warmswarm_autoscaling.plan.backoff import MAX_BACKOFF_FACTOR
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.result import Waiting
from warmswarm_autoscaling.plan.room import NeedsLaunch
from warmswarm_autoscaling.plan.tokens import batch_token, launch_token
from warmswarm_autoscaling.plan.volumes import VolumeChoice, new_volume
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import InstanceType, Repeated, Task, Volume

# Machines one RunInstances asks for at most: a bound on what one call (or one wrong decision) starts.
MAX_MACHINES_PER_CALL = 100


@dataclass(slots=True)
class _Bin:
    """A machine this cycle decides to launch, filled first-fit."""

    owner: Owner
    instance_type: InstanceType
    availability_zone: str
    room: Resources
    tasks: list[Task] = field(default_factory=list)
    volume: Volume | None = None  # the owner's cache volume this machine carries
    warm_ttl_s: int = 0  # its owner's warm tier, tagged at launch
    new_volume: CreateVolume | None = None  # the owner's cache volume this plan creates for it
    recyclable: bool = False  # its owner's group lets it be recycled once idle, tagged at launch

    @property
    def batched(self) -> bool:
        """Launched anonymously in a batch: it carries no volume, no warm tier and no recycle mark of an owner's
        (all are written at launch, and RunInstances tags every machine of a call alike)."""
        return self.volume is None and self.new_volume is None and self.warm_ttl_s == 0 and not self.recyclable


@dataclass(slots=True)
class Launches:
    actions: list[Launch | LaunchBatch | CreateVolume] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)
    # The cache policy of the owner each launched volume goes back to (the janitor renews it, and its TTL).
    volume_policies: dict[str, CachePolicy] = field(default_factory=dict)
    # Tasks that wait because the fleet is at max_instances (idle hot buffer machines give way: surplus.py).
    at_cap: int = 0
    # Owners whose pending work got no machine this plan (a cap, a back-off, a volume being readied): each is owed a
    # place under max_instances that the buffers' refill must not take.
    unserved_owners: int = 0


def launches(
    cluster: Cluster, to_launch: list[NeedsLaunch], choices: Mapping[Owner, VolumeChoice], *, resuming: int
) -> Launches:
    """`resuming`: warm machines this plan starts, which count against max_instances like launches."""
    policy = cluster.policy
    result = Launches()
    bins: list[_Bin] = []
    bins_of: dict[Owner, list[_Bin]] = {}
    creates: dict[Owner, CreateVolume] = {}
    offerings = cluster.offerings
    per_zone = {zone: 0 for zone in policy.availability_zones}
    for instance in cluster.live:
        if instance.availability_zone in per_zone:
            per_zone[instance.availability_zone] += 1
    budget = min(policy.max_instances - len(cluster.live) - resuming, policy.max_launches_per_cycle)
    calls = _Calls(policy.max_launch_calls_per_cycle)

    # An owner gets one machine, and it carries their volume when any of their pending work keeps a
    # cache: otherwise a larger cache-off task would open a machine without it and take the rest along.
    owner_cache: dict[Owner, CachePolicy] = {}
    for need in to_launch:
        if need.cache.enabled:
            owner_cache.setdefault(need.owner, need.cache)

    for need in to_launch:  # already largest first
        task, owner = need.task, need.owner
        cache = owner_cache.get(owner, need.cache)

        def wait(
            reason: str, *, starting: bool = False, until: float | None = None, task: Task = task, owner: Owner = owner
        ) -> None:
            result.waiting.append(Waiting(task.id, task.service_name, owner, reason, starting=starting, until=until))

        choice = choices.get(owner, VolumeChoice(create=True)) if cache.enabled else VolumeChoice()
        if choice.wait_reason:
            wait(choice.wait_reason)
            continue
        owners_bins = bins_of.get(owner, [])
        open_bin = next((b for b in owners_bins if task.reservations.fits_in(b.room)), None)
        if open_bin is not None:
            open_bin.tasks.append(task)
            open_bin.room = open_bin.room.minus(task.reservations)
            continue
        if cache.enabled and owners_bins:
            wait("its owner's cache volume goes with one machine, which is full; waiting for room on it")
            continue
        if len(bins) >= budget:
            result.at_cap += len(cluster.live) + resuming + len(bins) >= policy.max_instances
            wait(_limit_reason(policy, len(cluster.live) + resuming, len(bins)))
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
        missing = cluster.volume_backoffs.get(choice.volume.id) if choice.volume is not None else None
        if choice.volume is not None and missing is not None and missing.until > cluster.now:
            wait(volume_backoff_reason(choice.volume.id, missing), until=missing.until)
            continue
        offering = offerings.cheapest(task.reservations, avoided_for(cluster, missing), per_zone, zones)
        if offering is None and missing is not None:
            # Every fitting type failed it: the back-off is over, so the cheapest is tried again.
            offering = offerings.cheapest(task.reservations, cluster.unavailable, per_zone, zones)
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
        batched = not choice.create and choice.volume is None and cache.warm_ttl_s == 0 and not cache.recycle_machines
        if not calls.take(instance_type.name, zone, batched=batched):
            # No call left for a new batch here: a seat in a batch of the same type in another zone will do.
            seated = calls.open_zone(instance_type.name, zones, cluster.unavailable) if batched else None
            if seated is None:
                limit = policy.max_launch_calls_per_cycle
                wait(f"max_launch_calls_per_cycle={limit} reached; launching in a later cycle")
                continue
            zone = seated
            calls.take(instance_type.name, zone, batched=True)
        if choice.create:
            creates[owner] = new_volume(policy, owner, cache, zone, cluster.snapshot.carried.spent_tokens)
        per_zone[zone] += 1
        room = offerings.room_of(instance_type.name).minus(task.reservations)
        bins.append(
            _Bin(
                owner,
                instance_type,
                zone,
                room,
                [task],
                choice.volume,
                cache.warm_ttl_s,
                creates.get(owner),
                recyclable=cache.recycle_machines,
            )
        )
        bins_of.setdefault(owner, []).append(bins[-1])

    result.unserved_owners = len({need.owner for need in to_launch} - {b.owner for b in bins})
    result.actions.extend(creates.values())
    spent = cluster.snapshot.carried.spent_tokens
    batches: dict[tuple[str, str], list[Launch]] = {}
    for b in bins:
        launch = _launch(b, policy, spent, result)
        if b.batched:
            batches.setdefault((launch.instance_type, launch.availability_zone), []).append(launch)
        else:
            result.actions.append(launch)
    if batches:
        # A batch whose machines are listed is used: had they been free, these seats would have taken them,
        # not a new call. Its token, replayed, would return the same machines (now someone else's) and launch
        # nothing, forever: a listed batch's token counts as spent, and the same decision takes the next one.
        spent = spent | {i.batch for i in cluster.snapshot.instances if i.batch is not None}
    for (type_name, zone), seats in batches.items():
        for start in range(0, len(seats), MAX_MACHINES_PER_CALL):
            chunk = seats[start : start + MAX_MACHINES_PER_CALL]
            result.actions.append(_batch(type_name, zone, chunk, policy, spent))
    return result


def _launch(b: _Bin, policy: Policy, spent_tokens: frozenset[str], result: Launches) -> Launch:
    task_ids = tuple(sorted(t.id for t in b.tasks))
    demand = sum((t.reservations for t in b.tasks), Resources())
    price = policy.price_per_hour[b.instance_type.name]
    with_volume = f", with cache volume {b.volume.id}" if b.volume else ""
    if b.new_volume is not None:
        with_volume = f", with a new {b.new_volume.size_gib} GiB cache volume created first in this cycle"
    launch = Launch(
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
        warm_ttl_s=b.warm_ttl_s,
        volume_token=b.new_volume.client_token if b.new_volume is not None else None,
        recyclable=b.recyclable,
    )
    if b.volume is not None:
        # The policy its volume is kept by from now on: that of the first of its tasks (by id) that keeps a cache.
        by_id = sorted(b.tasks, key=lambda t: t.id)
        cache = next((t.cache for t in by_id if t.cache is not None and t.cache.enabled), None)
        if cache is not None:
            result.volume_policies[b.volume.id] = cache
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
    return launch


def _batch(instance_type: str, zone: str, seats: list[Launch], policy: Policy, spent: frozenset[str]) -> LaunchBatch:
    why = "; ".join(seat.reason for seat in seats[:3])
    if len(seats) > 3:
        why += f"; and {len(seats) - 3} more owner(s)"
    return LaunchBatch(
        instance_type=instance_type,
        availability_zone=zone,
        launches=tuple(seats),
        client_token=batch_token(policy.cluster, instance_type, zone, [seat.client_token for seat in seats], spent),
        reason=f"{len(seats)} machine(s) in one call, each for one owner's pending work, bound when it joins: {why}",
    )


class _Calls:
    """The launch calls (RunInstances, CreateVolume) this plan makes, within max_launch_calls_per_cycle.

    A machine without a volume takes a seat in its type and zone's batch: only a batch's first seat (and
    each MAX_MACHINES_PER_CALL-th after it) is a call.
    """

    def __init__(self, limit: int) -> None:
        self._left = limit
        self._seats: dict[tuple[str, str], int] = {}

    def open_zone(
        self, instance_type: str, zones: tuple[str, ...], unavailable: Mapping[tuple[str, str], float]
    ) -> str | None:
        """A zone whose batch of this type has a free seat (no new call needed), if any."""
        for zone in zones:
            seats = self._seats.get((instance_type, zone), 0)
            if seats % MAX_MACHINES_PER_CALL != 0 and (instance_type, zone) not in unavailable:
                return zone
        return None

    def take(self, instance_type: str, zone: str, *, batched: bool) -> bool:
        """Count a machine (or a volume) in; False when it would need a call and none is left."""
        seats = self._seats.get((instance_type, zone), 0) if batched else 0
        if seats % MAX_MACHINES_PER_CALL == 0:
            if self._left == 0:
                return False
            self._left -= 1
        if batched:
            self._seats[(instance_type, zone)] = seats + 1
        return True


def avoided_for(cluster: Cluster, missing: Repeated | None) -> Mapping[tuple[str, str], float]:
    """The offerings a launch with a volume avoids: those without capacity, and, while another fits, those its device
    did not appear on (a type whose devices the boot does not find, say)."""
    if missing is None:
        return cluster.unavailable
    return {**cluster.unavailable, **dict.fromkeys(missing.offerings, missing.until)}


def volume_backoff_reason(volume_id: str, missing: Repeated) -> str:
    types = ", ".join(sorted(f"{t} in {z}" for t, z in missing.offerings))
    return (
        f"its cache volume {volume_id} did not appear on the last {len(missing.failed)} machine(s) launched with it"
        f" ({types}; each boot waited for the device in vain): no machine is launched with it until"
        f" {format_timestamp(missing.until)}, on any type (the back-off doubles with each failure, from"
        f" capacity_backoff_s, at most {MAX_BACKOFF_FACTOR}x)"
    )


def _limit_reason(policy: Policy, live_count: int, launching: int) -> str:
    if live_count + launching >= policy.max_instances:
        return f"max_instances={policy.max_instances} reached ({live_count} running or starting)"
    return f"max_launches_per_cycle={policy.max_launches_per_cycle} reached; launching in a later cycle"
