"""Room that pending tasks can use without a launch: active nodes, drained nodes of ours, machines on their way.

Each unplaced task is matched to the first slot of its owner that fits it; what is left needs a launch
(or cannot be placed by any, and says why).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import CachePolicy, Owner, Resources

from warmswarm_autoscaling.actions import Activate
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.constraints import (
    all_hold,
    first_unmet_on_new_node,
    new_node_attributes,
    node_attributes,
    owner_fits,
)
from warmswarm_autoscaling.plan.result import Waiting
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Task

# Swarm's Status.Err for a task no node can take; the rest of the text says why per node.
NO_SUITABLE_NODE = "no suitable node"


@dataclass(slots=True)
class Slot:
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


@dataclass(frozen=True, slots=True)
class NeedsLaunch:
    task: Task
    owner: Owner
    cache: CachePolicy


@dataclass(slots=True)
class Matching:
    slots: list[Slot]
    to_launch: list[NeedsLaunch] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)

    def activations(self) -> list[Activate]:
        return [
            Activate(s.node.id, f"{s.owner} has pending work for node {s.node.id} again")
            for s in self.slots
            if s.drained and s.claimed and s.node is not None
        ]

    def claimed_nodes(self) -> set[str]:
        return {s.node.id for s in self.slots if s.claimed and s.node is not None}


def match(cluster: Cluster) -> Matching:
    """Match unplaced tasks to existing room first, then to machines on their way."""
    policy = cluster.policy
    slots = find_slots(cluster)
    # Active nodes first, then drained nodes of ours (an Activate beats waiting for a boot, and it
    # keeps the owner's node from being terminated under them), then machines on their way.
    slots.sort(key=lambda s: (s.node is None, s.drained))
    # Indexed by user: a task can only use its own user's room (or, unowned, unowned room), and a
    # scan of every slot per task would make a cycle quadratic in the cluster's size.
    by_user: dict[str | None, list[Slot]] = {}
    for each in slots:
        by_user.setdefault(each.owner.user_id, []).append(each)

    result = Matching(slots)
    for task in sorted(unplaced(cluster.snapshot.tasks), key=_size_key, reverse=True):
        owner = task.owner
        if owner is None:
            if needs_capacity(task):
                result.waiting.append(Waiting(task.id, task.service_name, Owner(), task.owner_problem, True))
            continue
        cache, problem = _cache_policy(task, owner)
        candidates = slots if not owner.is_nobody and owner.user_id is None else by_user.get(owner.user_id, [])
        slot = _find_slot(candidates, task, owner, cache.enabled)
        if slot is not None:
            slot.take(task)
            if needs_capacity(task):
                result.waiting.append(Waiting(task.id, task.service_name, owner, _slot_reason(slot), starting=True))
            continue
        if not needs_capacity(task):
            continue  # the scheduler has not tried it yet; launching for it would be a guess
        problem = problem or _unsatisfiable(task, owner, policy, cluster.snapshot.instance_types)
        if problem:
            result.waiting.append(Waiting(task.id, task.service_name, owner, problem, unschedulable=True))
        else:
            result.to_launch.append(NeedsLaunch(task, owner, cache))
    return result


def unplaced(tasks: tuple[Task, ...]) -> list[Task]:
    # Desired "ready": a restart (during its delay) or an update's new task, about to be set to running.
    # A global service's tasks are each bound to a node already; none ever needs a new machine.
    return [
        t
        for t in tasks
        if t.node_id is None and t.is_active and t.desired_state in ("running", "ready") and not t.global_service
    ]


def needs_capacity(task: Task) -> bool:
    return task.state == "pending" and NO_SUITABLE_NODE in task.err


def find_slots(cluster: Cluster) -> list[Slot]:
    policy = cluster.policy
    types = cluster.snapshot.instance_types
    slots: list[Slot] = []
    for node in cluster.snapshot.nodes:
        if node.state != "ready":
            continue
        ours = node.id in cluster.our_ids
        instance = cluster.instance_of(node) if ours else None
        if ours and (instance is None or not instance.is_live):
            continue  # its machine is going or gone: no room to count on
        if ours and not cache_in_place(node, instance):
            continue  # launched for its owner's volume, which this boot did not mount: no work goes there
        if ours and not node.is_labelled:
            assert instance is not None
            if instance.owner is None:
                continue  # its owner tags were edited into ids we cannot use: place nothing there
            # Joined drained and about to be labelled (lifecycle.py): room for its owner.
            slots.append(
                Slot(
                    instance.owner,
                    machine_room(instance, types, policy),
                    instance=instance,
                    has_volume=instance.volume_id is not None,
                )
            )
            continue
        drained = node.availability != "active"
        if drained and not ours:
            continue  # drained by ops: not ours to bring back
        if node.owner is None:
            continue  # labelled (by someone else) with ids we cannot match an owner to
        room = node.resources.minus(cluster.reserved.get(node.id, Resources()))
        has_volume = instance is not None and instance.volume_id is not None
        slots.append(Slot(node.owner, room, node=node, instance=instance, drained=drained, has_volume=has_volume))

    for instance in cluster.booting:
        if instance.owner is not None:
            room = machine_room(instance, types, policy)
            slots.append(Slot(instance.owner, room, instance=instance, has_volume=instance.volume_id is not None))
    return slots


def cache_in_place(node: Node, instance: Instance | None) -> bool:
    """The node's boot mounted the volume its instance was launched for (or it was launched for none)."""
    return instance is None or instance.volume_id is None or node.mounted_volume_id == instance.volume_id


def machine_room(instance: Instance, types: Mapping[str, InstanceType], policy: Policy) -> Resources:
    known = types.get(instance.instance_type)
    return known.resources.minus(policy.node_overhead) if known else Resources()


def _find_slot(slots: list[Slot], task: Task, owner: Owner, needs_volume: bool) -> Slot | None:
    for slot in slots:
        if not owner_fits(owner, slot.owner) or not task.reservations.fits_in(slot.room):
            continue
        if needs_volume and not slot.has_volume:
            continue  # the task's data would not be there: it needs a machine that carries the volume
        attributes = node_attributes(slot.node) if slot.node is not None else new_node_attributes(slot.owner)
        if not all_hold(task.constraints, attributes):
            continue
        return slot
    return None


def _cache_policy(task: Task, owner: Owner) -> tuple[CachePolicy, str]:
    """The task's cache policy, or why it cannot be used."""
    if task.cache is None:
        return CachePolicy(), task.cache_problem
    if task.cache.enabled and None in (owner.user_id, owner.project_id, owner.node_id):
        return task.cache, (
            "the cache is on but the service is not pinned to one owner: it needs the constraints"
            " node.labels.user_id==…, node.labels.project_id==… and node.labels.node_id==…"
        )
    return task.cache, ""


def _slot_reason(slot: Slot) -> str:
    if slot.node is not None and slot.drained:
        return f"node {slot.node.hostname} of {slot.owner} is brought back from drain"
    if slot.node is not None:
        return f"fits on node {slot.node.hostname}; waiting for the swarm scheduler"
    assert slot.instance is not None
    return f"waiting for instance {slot.instance.id} ({slot.instance.instance_type}) to join the swarm"


def _size_key(task: Task) -> tuple[int, float, int, str]:
    r = task.reservations
    return (r.gpus, r.cpus, r.memory_bytes, task.id)


def _unsatisfiable(task: Task, owner: Owner, policy: Policy, types: Mapping[str, InstanceType]) -> str:
    """Why no launch can place this task, or "" when one can."""
    unmet = first_unmet_on_new_node(task.constraints, owner)
    if unmet is not None:
        return f"constraint {str(unmet)!r} cannot be met by a node warmswarm launches"
    fitting = [
        t for t in policy.allowed_instance_types if t in types and fits_type(task.reservations, types[t], policy)
    ]
    if not fitting:
        return (
            f"needs {task.reservations.describe()} but no allowed instance type fits it after the per-node"
            f" overhead ({policy.node_overhead.describe()}); the largest offers {_largest_offer(policy, types)}"
        )
    return ""


def _largest_offer(policy: Policy, types: Mapping[str, InstanceType]) -> str:
    offers = [(types[t].resources.minus(policy.node_overhead), t) for t in policy.allowed_instance_types if t in types]
    if not offers:
        return "nothing (no allowed type is known to EC2)"
    room, name = max(offers, key=lambda o: (o[0].cpus, o[0].memory_bytes, o[0].gpus))
    return f"{room.describe()} ({name})"


def fits_type(demand: Resources, instance_type: InstanceType, policy: Policy) -> bool:
    return demand.fits_in(instance_type.resources.minus(policy.node_overhead))
