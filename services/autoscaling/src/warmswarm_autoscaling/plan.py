"""Every autoscaling decision, as one pure function of a Snapshot: no clock, no I/O, no randomness."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warmswarm_models import (
    INSTANCE_VOLUME_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    CachePolicy,
    InvalidCachePolicy,
    InvalidOwner,
    Owner,
    Resources,
    parse_constraints,
)

from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    CreateVolume,
    Drain,
    LabelNode,
    Launch,
    RemoveNode,
    Terminate,
)
from warmswarm_autoscaling.plan_volumes import (
    VolumeChoice,
    choose_volume,
    volume_actions,
    volume_client_token,
    volumes_by_owner,
)
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Snapshot, Task, Volume

# Swarm's Status.Err for a task no node can take; the rest of the text says why per node.
NO_SUITABLE_NODE = "no suitable node"
# What a new node of ours looks like to a placement constraint before it exists.
_NEW_NODE_ATTRIBUTES: Mapping[str, str] = {
    "node.role": "worker",
    "node.platform.os": "linux",
    "node.platform.arch": "x86_64",
}


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a task is still pending, as the autoscaler sees it."""

    task_id: str
    service_name: str
    owner: Owner
    reason: str
    # True when no launch can help: the request itself must change.
    unschedulable: bool = False
    # True while its machine is on the way: booting, being labelled, or its cache volume being readied.
    starting: bool = False


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    waiting: tuple[Waiting, ...]
    # Bookkeeping for the next cycle: may be lost without harm (the grace restarts).
    idle_since: Mapping[str, float]
    unavailable_offerings: Mapping[tuple[str, str], float]


@dataclass(slots=True)
class _Slot:
    """Room on a node or a machine on its way, that pending tasks can be matched to."""

    owner: Owner
    room: Resources
    node: Node | None = None  # None while the instance has not joined
    instance: Instance | None = None
    drained: bool = False  # a drained node of ours: matching it means Activate
    claimed: bool = False
    has_volume: bool = False  # the machine boots (or booted) with its owner's cache volume mounted

    def take(self, task: Task) -> None:
        self.room = self.room.minus(task.reservations)
        self.claimed = True


@dataclass(slots=True)
class _Bin:
    """A machine this cycle decides to launch, filled first-fit."""

    owner: Owner
    instance_type: InstanceType
    availability_zone: str
    room: Resources
    tasks: list[Task] = field(default_factory=list)
    volume: Volume | None = None  # the owner's cache volume this machine carries
    cache: CachePolicy | None = None


def plan(snapshot: Snapshot, policy: Policy) -> Plan:
    """Decide what to launch, label, drain, terminate and remove, and why tasks wait."""
    now = snapshot.now
    unavailable = {k: until for k, until in snapshot.unavailable_offerings.items() if until > now}
    instances = {i.id: i for i in snapshot.instances}
    actions: list[Action] = []
    waiting: list[Waiting] = []

    ours = _our_nodes(snapshot.nodes, instances)
    # An instance has joined once its node is ready or carries our labels (we label only ready nodes).
    # Until then it is on its way, whatever its node shows: a joining node is "unknown" or "down" first.
    joined = {n.engine_instance_id for n in ours if n.engine_instance_id and (n.state == "ready" or _is_labelled(n))}
    live = [i for i in snapshot.instances if i.is_live]
    late = [i for i in live if i.id not in joined and now - i.launched_at > policy.max_start_s]
    # A late instance is terminated below: no task waits for it, and its offering is avoided right away.
    for late_instance in late:
        unavailable[(late_instance.instance_type, late_instance.availability_zone)] = now + policy.capacity_backoff_s
    late_ids = {i.id for i in late}
    booting = [i for i in live if i.id not in joined and i.id not in late_ids]

    reserved = _reserved_by_node(snapshot.tasks)
    slots, labels_to_write = _slots(snapshot, policy, ours, booting, instances, reserved)
    actions.extend(labels_to_write)
    # Active nodes first, then drained nodes of ours (an Activate beats waiting for a boot, and it
    # keeps the owner's node from being terminated under them), then machines on their way.
    slots.sort(key=lambda s: (s.node is None, s.drained))
    # Indexed by user: a task can only use its own user's room (or, unowned, unowned room), and a
    # scan of every slot per task would make a cycle quadratic in the cluster's size.
    slots_by_user: dict[str | None, list[_Slot]] = {}
    for each in slots:
        slots_by_user.setdefault(each.owner.user_id, []).append(each)

    # Match unplaced tasks to existing room first, then to machines on their way.
    # Desired "ready": a restart (during its delay) or an update's new task, about to be set to running.
    # A global service's tasks are each bound to a node already; none ever needs a new machine.
    unplaced = [
        t
        for t in snapshot.tasks
        if t.node_id is None and t.is_active and t.desired_state in ("running", "ready") and not t.global_service
    ]
    to_launch: list[tuple[Task, Owner, CachePolicy]] = []
    for task in sorted(unplaced, key=_size_key, reverse=True):
        try:
            owner, rest = parse_constraints(task.constraints)
        except InvalidOwner as error:
            if _needs_capacity(task):
                waiting.append(Waiting(task.id, task.service_name, Owner(), str(error), unschedulable=True))
            continue
        cache, problem = _cache_policy(task, owner)
        slot = _find_slot(_candidates(slots_by_user, slots, owner), task, owner, rest, cache.enabled)
        if slot is not None:
            slot.take(task)
            if _needs_capacity(task):
                waiting.append(Waiting(task.id, task.service_name, owner, _slot_reason(slot), starting=True))
            continue
        if not _needs_capacity(task):
            continue  # the scheduler has not tried it yet; launching for it would be a guess
        problem = problem or _unsatisfiable(task, owner, rest, policy, snapshot.instance_types)
        if problem:
            waiting.append(Waiting(task.id, task.service_name, owner, problem, unschedulable=True))
        else:
            to_launch.append((task, owner, cache))

    for slot in slots:
        if slot.drained and slot.claimed and slot.node is not None:
            actions.append(Activate(slot.node.id, f"{slot.owner} has pending work for node {slot.node.id} again"))
    actions.extend(_drain_nodes_without_the_cache(ours, instances, snapshot.tasks))

    on_the_way = {i.id: i for i in live if i.id not in late_ids}
    choices = {
        owner: choose_volume(owner, owned, on_the_way) for owner, owned in volumes_by_owner(snapshot.volumes).items()
    }
    launches, launch_waits = _launches(to_launch, policy, snapshot.instance_types, unavailable, live, now, choices)
    actions.extend(launches)
    waiting.extend(launch_waits)
    launching_with = {a.volume_id for a in launches if isinstance(a, Launch) and a.volume_id}
    # An owner who is back keeps their volume while no launch can carry it yet (no capacity in its
    # zone, a limit): the janitor must not delete it under them.
    launching_with |= {
        choice.volume.id
        for owner, choice in choices.items()
        if choice.volume is not None and any(o == owner and c.enabled for _, o, c in to_launch)
    }
    returning: dict[str, CachePolicy] = {}
    for launch in launches:
        if isinstance(launch, Launch) and launch.volume_id:
            returning_cache = _cache_of_launch(launch, to_launch)
            if returning_cache is not None:
                returning[launch.volume_id] = returning_cache
    actions.extend(volume_actions(snapshot.volumes, on_the_way, launching_with, returning, policy, now))

    # A node is busy while it has work: a task in any non-terminal state (a restarting one included),
    # or a task this plan just matched to it. A global service's task is not work: it is there
    # because the node is, and would otherwise keep every node of the cluster forever.
    busy_nodes = {t.node_id for t in snapshot.tasks if t.node_id is not None and t.is_active and not t.global_service}
    busy_nodes |= {s.node.id for s in slots if s.claimed and s.node is not None}
    idle_since: dict[str, float] = {}
    joined_ready = {n.engine_instance_id for n in ours if n.state == "ready"}
    for node in ours:
        instance = instances.get(node.engine_instance_id or "")
        action = _node_lifecycle(node, instance, busy_nodes, joined_ready, snapshot, policy, idle_since)
        if action is not None:
            actions.append(action)

    for late_instance in late:
        offering = f"{late_instance.instance_type} in {late_instance.availability_zone}"
        actions.append(
            Terminate(
                late_instance.id,
                f"instance {late_instance.id} ({offering}) did not join the swarm within"
                f" max_start_s={policy.max_start_s:g}; that offering is avoided for {policy.capacity_backoff_s:g} s",
                cause="start_timeout",
            )
        )

    return Plan(tuple(actions), tuple(waiting), idle_since, unavailable)


def _our_nodes(nodes: Iterable[Node], instances: Mapping[str, Instance]) -> list[Node]:
    """Nodes we booted: their daemon names one of our instances, or we labelled them earlier."""
    return [
        n
        for n in nodes
        if n.engine_instance_id is not None
        and (n.engine_instance_id in instances or n.labels.get(NODE_LABEL_INSTANCE_ID) == n.engine_instance_id)
    ]


def _reserved_by_node(tasks: Iterable[Task]) -> dict[str, Resources]:
    reserved: dict[str, Resources] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active:
            reserved[task.node_id] = reserved.get(task.node_id, Resources()) + task.reservations
    return reserved


def _declared_owner(labels: Mapping[str, str]) -> Owner | None:
    """The owner labels (or tags) declare; None when someone wrote an id we cannot use."""
    try:
        return Owner.from_labels(labels)
    except InvalidOwner:
        return None


def _desired_labels(instance: Instance, owner: Owner) -> dict[str, str]:
    labels = owner.labels()
    labels[NODE_LABEL_INSTANCE_ID] = instance.id
    labels[NODE_LABEL_INSTANCE_TYPE] = instance.instance_type
    labels[NODE_LABEL_AVAILABILITY_ZONE] = instance.availability_zone
    if INSTANCE_VOLUME_TAG in instance.tags:
        # The boot mounted it before joining: a node that carries this label has the data.
        labels[NODE_LABEL_VOLUME_ID] = instance.tags[INSTANCE_VOLUME_TAG]
    return labels


def _cache_policy(task: Task, owner: Owner) -> tuple[CachePolicy, str]:
    """The task's cache policy, or why it cannot be used."""
    try:
        cache = CachePolicy.from_labels(task.service_labels)
    except InvalidCachePolicy as error:
        return CachePolicy(), f"service {task.service_name}: {error}"
    if cache.enabled and None in (owner.user_id, owner.project_id, owner.node_id):
        return cache, (
            "the cache is on but the service is not pinned to one owner: it needs the constraints"
            " node.labels.user_id==…, node.labels.project_id==… and node.labels.node_id==…"
        )
    return cache, ""


def _cache_of_launch(launch: Launch, to_launch: list[tuple[Task, Owner, CachePolicy]]) -> CachePolicy | None:
    return next((c for t, _, c in to_launch if t.id in launch.task_ids and c.enabled), None)


def _is_labelled(node: Node) -> bool:
    return NODE_LABEL_INSTANCE_ID in node.labels


def _slots(
    snapshot: Snapshot,
    policy: Policy,
    ours: list[Node],
    booting: list[Instance],
    instances: Mapping[str, Instance],
    reserved: Mapping[str, Resources],
) -> tuple[list[_Slot], list[LabelNode]]:
    """Room pending tasks could use without a launch, and the labels new nodes still need."""
    slots: list[_Slot] = []
    labels_to_write: list[LabelNode] = []
    our_ids = {n.id for n in ours}
    for node in snapshot.nodes:
        if node.state != "ready":
            continue
        instance = instances.get(node.engine_instance_id or "") if node.id in our_ids else None
        if node.id in our_ids and (instance is None or not instance.is_live):
            continue  # its machine is going or gone: no room to count on
        if node.id in our_ids and not _is_labelled(node):
            assert instance is not None
            owner = _declared_owner(instance.tags)
            if owner is None:
                continue  # its owner tags were edited into ids we cannot use: place nothing there
            # Nodes join drained, so nothing lands on them before they carry their owner's labels.
            labels_to_write.append(
                LabelNode(
                    node.id,
                    _desired_labels(instance, owner),
                    f"node {node.hostname} joined as {instance.id} ({instance.instance_type},"
                    f" {instance.availability_zone}) for {owner}",
                )
            )
            room = _machine_room(instance, snapshot.instance_types, policy)
            slots.append(_Slot(owner, room, node=None, instance=instance, has_volume=_carries_volume(instance)))
            continue
        drained = node.availability != "active"
        if drained and node.id not in our_ids:
            continue  # drained by ops: not ours to bring back
        node_owner = _declared_owner(node.labels)
        if node_owner is None:
            continue  # labelled (by someone else) with ids we cannot match an owner to
        room = node.resources.minus(reserved.get(node.id, Resources()))
        has_volume = instance is not None and _carries_volume(instance)
        slots.append(_Slot(node_owner, room, node=node, instance=instance, drained=drained, has_volume=has_volume))

    for instance in booting:
        owner = _declared_owner(instance.tags)
        if owner is not None:
            room = _machine_room(instance, snapshot.instance_types, policy)
            slots.append(_Slot(owner, room, instance=instance, has_volume=_carries_volume(instance)))
    return slots, labels_to_write


def _carries_volume(instance: Instance) -> bool:
    # Launched for a volume: its boot waits for it and mounts it before the node joins.
    return bool(instance.tags.get(INSTANCE_VOLUME_TAG))


def _wants_cache(task: Task) -> bool:
    try:
        return CachePolicy.from_labels(task.service_labels).enabled
    except InvalidCachePolicy:
        return False  # reported with the task's other problems when it waits


def _drain_nodes_without_the_cache(
    ours: Iterable[Node], instances: Mapping[str, Instance], tasks: Iterable[Task]
) -> list[Drain]:
    """Our active nodes running a cache-on task without carrying a volume: drained, so it moves.

    It happens when ops turn the cache on for a group while an owner's machine (launched without a
    volume) still runs: the owner's new service matches that machine's labels, and swarm places it
    there, where its cache path is no volume (the mount fails, or the data would be lost with the
    machine). Drained, the task waits for a machine that carries the owner's volume, which plan()
    launches; the old machine, idle, goes after its grace.
    """
    needy: dict[str, Task] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active and not task.global_service and _wants_cache(task):
            needy.setdefault(task.node_id, task)
    drains: list[Drain] = []
    for node in ours:
        instance = instances.get(node.engine_instance_id or "")
        placed = needy.get(node.id)
        if placed is None or instance is None or _carries_volume(instance) or not _is_labelled(node):
            continue
        if node.state == "ready" and node.availability == "active":
            drains.append(
                Drain(
                    node.id,
                    f"node {node.hostname} has no cache volume, and service {placed.service_name} on it asks for"
                    " the cache: drained so it moves to a machine with its owner's volume",
                )
            )
    return drains


def _machine_room(instance: Instance, types: Mapping[str, InstanceType], policy: Policy) -> Resources:
    known = types.get(instance.instance_type)
    return known.resources.minus(policy.node_overhead) if known else Resources()


def _candidates(by_user: Mapping[str | None, list[_Slot]], slots: list[_Slot], owner: Owner) -> list[_Slot]:
    if owner.is_nobody or owner.user_id is not None:
        return by_user.get(owner.user_id, [])
    return slots  # pinned by project or node only: any user's slot may match


def _find_slot(slots: list[_Slot], task: Task, owner: Owner, rest: list[str], needs_volume: bool) -> _Slot | None:
    for slot in slots:
        if not _owner_fits(owner, slot.owner) or not task.reservations.fits_in(slot.room):
            continue
        if needs_volume and not slot.has_volume:
            continue  # the task's data would not be there: it needs a machine that carries the volume
        if slot.node is not None:
            if not all(_constraint_holds(c, _node_attributes(slot.node)) for c in rest):
                continue
        elif not all(_constraint_holds(c, _new_node_attributes(slot.owner)) for c in rest):
            continue
        return slot
    return None


def _owner_fits(task_owner: Owner, node_owner: Owner) -> bool:
    """Swarm's rule (every owner constraint matches a label), plus ours: unowned work stays off owned nodes."""
    if task_owner.is_nobody:
        return node_owner.is_nobody
    node_labels = node_owner.labels()
    return all(node_labels.get(key) == value for key, value in task_owner.items())


def _slot_reason(slot: _Slot) -> str:
    if slot.node is not None and slot.drained:
        return f"node {slot.node.hostname} of {slot.owner} is brought back from drain"
    if slot.node is not None:
        return f"fits on node {slot.node.hostname}; waiting for the swarm scheduler"
    assert slot.instance is not None
    return f"waiting for instance {slot.instance.id} ({slot.instance.instance_type}) to join the swarm"


def _needs_capacity(task: Task) -> bool:
    return task.state == "pending" and NO_SUITABLE_NODE in task.err


def _size_key(task: Task) -> tuple[int, float, int, str]:
    r = task.reservations
    return (r.gpus, r.cpus, r.memory_bytes, task.id)


def _unsatisfiable(task: Task, owner: Owner, rest: list[str], policy: Policy, types: Mapping[str, InstanceType]) -> str:
    """Why no launch can place this task, or "" when one can."""
    for constraint in rest:
        if not _constraint_holds(constraint, _new_node_attributes(owner)):
            return f"constraint {constraint!r} cannot be met by a node warmswarm launches"
    fitting = [
        t for t in policy.allowed_instance_types if t in types and _fits_type(task.reservations, types[t], policy)
    ]
    if not fitting:
        largest = _largest_offer(policy, types)
        return (
            f"needs {task.reservations.describe()} but no allowed instance type fits it after the per-node"
            f" overhead ({policy.node_overhead.describe()}); the largest offers {largest}"
        )
    return ""


def _largest_offer(policy: Policy, types: Mapping[str, InstanceType]) -> str:
    offers = [(types[t].resources.minus(policy.node_overhead), t) for t in policy.allowed_instance_types if t in types]
    if not offers:
        return "nothing (no allowed type is known to EC2)"
    room, name = max(offers, key=lambda o: (o[0].cpus, o[0].memory_bytes, o[0].gpus))
    return f"{room.describe()} ({name})"


def _fits_type(demand: Resources, instance_type: InstanceType, policy: Policy) -> bool:
    return demand.fits_in(instance_type.resources.minus(policy.node_overhead))


def _launches(
    to_launch: list[tuple[Task, Owner, CachePolicy]],
    policy: Policy,
    types: Mapping[str, InstanceType],
    unavailable: Mapping[tuple[str, str], float],
    live: list[Instance],
    now: float,
    volume_choices: Mapping[Owner, VolumeChoice],
) -> tuple[list[Launch | CreateVolume], list[Waiting]]:
    """Pack tasks into new machines (one owner per machine), cheapest fitting offering first, within limits.

    A task whose owner's cache is on goes to the zone of the owner's volume; an owner without a
    volume first gets one created (the launch follows in the next cycle, in the volume's zone).
    """
    bins: list[_Bin] = []
    waits: list[Waiting] = []
    creates: dict[Owner, CreateVolume] = {}
    by_type = sorted(
        (t for t in policy.allowed_instance_types if t in types and t in policy.price_per_hour),
        key=lambda t: (policy.price_per_hour[t], t),
    )
    per_zone = {zone: 0 for zone in policy.availability_zones}
    for instance in live:
        if instance.availability_zone in per_zone:
            per_zone[instance.availability_zone] += 1
    budget = min(policy.max_instances - len(live), policy.max_launches_per_cycle)

    # An owner gets one machine, and it carries their volume when any of their pending work keeps a
    # cache: otherwise a larger cache-off task would open a machine without it and take the rest along.
    owner_cache: dict[Owner, CachePolicy] = {}
    for _, owner, cache in to_launch:
        if cache.enabled:
            owner_cache.setdefault(owner, cache)

    for task, owner, task_cache in to_launch:  # already largest first
        cache = owner_cache.get(owner, task_cache)

        def wait(reason: str, *, starting: bool = False, task: Task = task, owner: Owner = owner) -> None:
            waits.append(Waiting(task.id, task.service_name, owner, reason, starting=starting))

        choice = volume_choices.get(owner, VolumeChoice(create=True)) if cache.enabled else VolumeChoice()
        if choice.wait_reason:
            wait(choice.wait_reason)
            continue
        if owner in creates:
            wait(f"creating its cache volume in {creates[owner].availability_zone}", starting=True)
            continue
        open_bin = next(
            (b for b in bins if b.owner == owner and task.reservations.fits_in(b.room)),
            None,
        )
        if open_bin is not None:
            open_bin.tasks.append(task)
            open_bin.room = open_bin.room.minus(task.reservations)
            continue
        if cache.enabled and any(b.owner == owner for b in bins):
            wait("its owner's cache volume goes with one machine, which is full; waiting for room on it")
            continue
        if len(bins) >= budget:
            wait(_limit_reason(policy, len(live), len(bins)))
            continue
        zones = (choice.volume.availability_zone,) if choice.volume else policy.availability_zones
        offering = _cheapest_offering(task.reservations, by_type, types, policy, unavailable, per_zone, zones)
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
                client_token=volume_client_token(policy, owner, zone, now),
                reason=f"{owner} needs a cache and has no volume: {cache.size_gib} GiB {cache.volume_type} in {zone}",
            )
            wait(f"creating its cache volume in {zone}", starting=True)
            continue
        per_zone[zone] += 1
        room = instance_type.resources.minus(policy.node_overhead).minus(task.reservations)
        bins.append(_Bin(owner, instance_type, zone, room, [task], choice.volume, cache if cache.enabled else None))

    actions: list[Launch | CreateVolume] = list(creates.values())
    for b in bins:
        task_ids = tuple(sorted(t.id for t in b.tasks))
        demand = sum((t.reservations for t in b.tasks), Resources())
        price = policy.price_per_hour[b.instance_type.name]
        with_volume = f", with cache volume {b.volume.id}" if b.volume else ""
        actions.append(
            Launch(
                instance_type=b.instance_type.name,
                availability_zone=b.availability_zone,
                owner=b.owner,
                task_ids=task_ids,
                demand=demand,
                client_token=_client_token(policy, b, task_ids, now),
                reason=(
                    f"{len(task_ids)} pending task(s) of {b.owner} need {demand.describe()}:"
                    f" {b.instance_type.name} in {b.availability_zone} is the cheapest fit (${price:g}/h){with_volume}"
                ),
                volume_id=b.volume.id if b.volume else None,
            )
        )
        waits.extend(
            Waiting(
                t.id,
                t.service_name,
                b.owner,
                f"launching a {b.instance_type.name} in {b.availability_zone}{with_volume}",
                starting=True,
            )
            for t in b.tasks
        )
    return actions, waits


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
        if not _fits_type(demand, types[name], policy):
            continue
        for zone in zones:
            if (name, zone) not in unavailable:
                return types[name], zone
    return None


def _client_token(policy: Policy, b: _Bin, task_ids: tuple[str, ...], now: float) -> str:
    # Same decision within one start window → same token, so a retried RunInstances returns the
    # same instance; a later window (after a failed start) may launch again.
    window = int(now // policy.max_start_s)
    key = "|".join([policy.cluster, b.instance_type.name, b.availability_zone, *task_ids, str(window)])
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def _node_lifecycle(
    node: Node,
    instance: Instance | None,
    busy_nodes: set[str],
    joined_ready: set[str | None],
    snapshot: Snapshot,
    policy: Policy,
    idle_since: dict[str, float],
) -> Action | None:
    """At most one step for one of our nodes: remove it, drain it, or terminate its instance."""
    instance_gone = instance is None or not instance.is_live
    if node.state != "ready":
        if instance_gone:
            return RemoveNode(node.id, f"node {node.hostname} is {node.state} and its instance is gone")
        if node.engine_instance_id in joined_ready:
            # The machine rejoined as a new node: this one is a stale registration of it.
            return RemoveNode(node.id, f"node {node.hostname} is {node.state}; its machine rejoined as another node")
        if not _is_labelled(node):
            return None  # still joining: the start timeout covers it
        # A machine that lost the swarm runs nothing and still costs money: after it has had as long
        # to come back as a machine has to boot, it goes (its tasks are rescheduled, its volume freed).
        down_s = _doing_nothing_for_s(node, snapshot, idle_since)
        if down_s < policy.max_start_s:
            return None
        assert instance is not None
        return Terminate(
            instance.id,
            f"node {node.hostname} has been {node.state} for {down_s:.0f} s while its instance runs"
            f" (max_start_s={policy.max_start_s:g})",
            cause="node_down",
        )
    if not _is_labelled(node) or instance_gone:
        return None
    if node.id in busy_nodes:
        return None
    idle_s = _doing_nothing_for_s(node, snapshot, idle_since)
    if idle_s < policy.idle_grace_s:
        return None
    assert instance is not None
    if node.availability == "active":
        return Drain(node.id, f"node {node.hostname} idle for {idle_s:.0f} s (idle_grace_s={policy.idle_grace_s:g})")
    return Terminate(instance.id, f"node {node.hostname} is drained and idle for {idle_s:.0f} s", cause="idle")


def _doing_nothing_for_s(node: Node, snapshot: Snapshot, idle_since: dict[str, float]) -> float:
    """How long the node has run nothing (idle, or down), carrying the clock into the next cycle."""
    since = snapshot.idle_since.get(node.id, snapshot.now)
    idle_since[node.id] = since
    return snapshot.now - since


def _node_attributes(node: Node) -> dict[str, str]:
    attributes = dict(_NEW_NODE_ATTRIBUTES)
    attributes["node.role"] = node.role
    attributes["node.hostname"] = node.hostname
    attributes["node.id"] = node.id
    attributes.update({f"node.labels.{k}": v for k, v in node.labels.items()})
    return attributes


def _new_node_attributes(owner: Owner) -> dict[str, str]:
    attributes = dict(_NEW_NODE_ATTRIBUTES)
    attributes.update({f"node.labels.{k}": v for k, v in owner.items()})
    return attributes


def _attribute_name(key: str) -> str:
    prefix = "node.labels."
    if key[: len(prefix)].lower() == prefix:
        return prefix + key[len(prefix) :]  # a label's own name keeps its case
    return key.lower()


def _constraint_holds(constraint: str, attributes: Mapping[str, str]) -> bool:
    """Swarm's placement constraint semantics for `key==value` and `key!=value`.

    As swarm does, values compare regardless of case, and so do the names of node attributes
    (`Node.Role`); a label's name is compared as written.
    """
    for op in ("==", "!="):
        if op in constraint:
            key, _, value = constraint.partition(op)
            actual = attributes.get(_attribute_name(key.strip()))
            matches = actual is not None and actual.casefold() == value.strip().casefold()
            return matches if op == "==" else not matches
    return False
