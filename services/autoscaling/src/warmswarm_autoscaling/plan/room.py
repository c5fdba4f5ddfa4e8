"""Room that pending tasks can use without a launch: active nodes, drained nodes of ours, machines on their way.

Each unplaced task is matched to the first slot of its owner that fits it; what is left needs a launch
(or cannot be placed by any, and says why).
"""

from __future__ import annotations

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
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.result import Waiting
from warmswarm_autoscaling.plan.slots import Slot, find_slots, slot_reason
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Task

# Swarm's Status.Err for a task no node can take; the rest of the text says why per node.
NO_SUITABLE_NODE = "no suitable node"


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
    # Each matched task and the room it took (what the property test checks against the owners' rules).
    placed: list[tuple[Task, Slot]] = field(default_factory=list)

    def activations(self) -> list[Activate]:
        return [
            Activate(s.node.id, f"{s.owner} has pending work for node {s.node.id} again")
            for s in self.slots
            if s.drained and s.matched and s.node is not None
        ]

    def matched_nodes(self) -> set[str]:
        return {s.node.id for s in self.slots if s.matched and s.node is not None}

    def resumed(self) -> list[Instance]:
        """Warm machines this plan gives their owner's pending work: each is started (tiers.resumptions)."""
        return [s.instance for s in self.slots if s.resume and s.matched and s.instance is not None]

    def launch_demands(self) -> dict[Owner, list[Resources]]:
        """What each task this plan launches for reserves, by owner."""
        demands: dict[Owner, list[Resources]] = {}
        for need in self.to_launch:
            demands.setdefault(need.owner, []).append(need.task.reservations)
        return demands

    def bound(self) -> dict[str, Owner]:
        """Machines launched in a batch that this plan gives to an owner: instance id -> owner."""
        return {
            s.instance.id: s.owner
            for s in self.slots
            if s.instance is not None and s.instance.unbound and s.matched and not s.unbound
        }


def match(cluster: Cluster) -> Matching:
    """Match unplaced tasks to existing room first, then to machines on their way."""
    policy = cluster.policy
    pending = unplaced(cluster.snapshot.tasks)
    if not pending:
        return Matching([])  # an idle cluster: no room to count
    slots = find_slots(cluster)
    # Active nodes first, then drained nodes of ours (an Activate beats waiting for a boot, and it
    # keeps the owner's node from being terminated under them), then machines on their way.
    slots.sort(key=lambda s: (s.node is None, s.drained))
    # Indexed by each owner id: a task can only use room of an owner whose ids include its own (or,
    # unowned, unowned room), and a scan of every slot per task would make a cycle quadratic in the
    # cluster's size.
    index = _SlotIndex(slots)

    result = Matching(slots)
    for task in sorted(pending, key=_size_key, reverse=True):
        owner = task.owner
        if owner is None:
            if needs_capacity(task):
                result.waiting.append(Waiting(task.id, task.service_name, Owner(), task.owner_problem, True))
            continue
        cache, problem = _cache_policy(task, owner)
        slot = index.find(task, owner, cache.enabled)
        if slot is not None:
            slot.take(task)
            result.placed.append((task, slot))
            if needs_capacity(task):
                result.waiting.append(Waiting(task.id, task.service_name, owner, slot_reason(slot), starting=True))
            continue
        if not needs_capacity(task):
            continue  # the scheduler has not tried it yet; launching for it would be a guess
        problem = problem or _unsatisfiable(task, owner, policy, cluster.offerings)
        if problem:
            result.waiting.append(Waiting(task.id, task.service_name, owner, problem, unschedulable=True))
        else:
            result.to_launch.append(NeedsLaunch(task, owner, cache))
    return result


class _SlotIndex:
    """Slots by each owner id they carry: the candidates for a task are those sharing one of its ids.

    A search resumes where the last one for the same kind of task stopped: matching only ever takes room,
    so a slot that could not take a task cannot take an equal one later. Without this, a thousand tasks
    pinned to one project would each scan past the project's nodes the earlier ones filled.
    Unbound machines (launched in a batch) come last, smallest first: an owner takes one only when none
    of its own has room, and then the one that fits best.
    """

    def __init__(self, slots: list[Slot]) -> None:
        self._unowned = [s for s in slots if s.owner.is_nobody and not s.unbound]
        self._unbound = sorted(
            (s for s in slots if s.unbound), key=lambda s: (s.room.gpus, s.room.cpus, s.room.memory_bytes)
        )
        self._by_key: dict[tuple[str, str], list[Slot]] = {}
        for slot in slots:
            for key in slot.owner.items():
                self._by_key.setdefault(key, []).append(slot)
        self._resume_at: dict[tuple[object, ...], int] = {}

    def candidates(self, owner: Owner) -> tuple[object, list[Slot]]:
        """The slots to check for the owner's work, and which list they are: a search resumes in the same list
        (which list is the shortest may change as batch machines are bound to owners)."""
        if owner.is_nobody:
            return "nobody", self._unowned
        # Every owner id of the task must match: the rarest of its ids gives the shortest list to check.
        key = min(owner.items(), key=lambda k: len(self._by_key.get(k, ())))
        return key, self._by_key.get(key, [])

    def find(self, task: Task, owner: Owner, wants_cache: bool) -> Slot | None:
        """The first slot that can take the task, or None. An unbound machine that takes it becomes the owner's."""
        demand = task.reservations
        kind = (owner, demand.cpus, demand.memory_bytes, tuple(demand.generic.items()), wants_cache, task.constraints)
        which, candidates = self.candidates(owner)
        found = self._first(("own", which, *kind), candidates, task, owner, wants_cache)
        if found is not None or owner.is_nobody or wants_cache:
            # Unowned work stays off machines launched for owners; cache work needs a machine with its volume.
            return found
        found = self._first(("unbound", *kind), self._unbound, task, owner, wants_cache)
        if found is not None:
            found.owner, found.unbound = owner, False
            for key in owner.items():
                self._by_key.setdefault(key, []).append(found)
        return found

    def _first(
        self, kind: tuple[object, ...], slots: list[Slot], task: Task, owner: Owner, wants_cache: bool
    ) -> Slot | None:
        for position in range(self._resume_at.get(kind, 0), len(slots)):
            slot = slots[position]
            # An unbound machine that another owner took this cycle is no longer free.
            if slot.unbound == (kind[0] == "unbound") and _can_take(slot, task, owner, wants_cache):
                self._resume_at[kind] = position
                return slot
        self._resume_at[kind] = len(slots)
        return None


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


def _can_take(slot: Slot, task: Task, owner: Owner, wants_cache: bool) -> bool:
    if not slot.unbound and not owner_fits(owner, slot.owner):
        return False
    if not task.reservations.fits_in(slot.room):
        return False
    if wants_cache and not slot.has_volume:
        return False  # the task's data would not be there: it needs a machine that carries the volume
    if slot.unbound:
        attributes = new_node_attributes(owner)  # what its node will say once labelled for this owner
    elif slot.node is not None:
        attributes = node_attributes(slot.node)
    else:
        attributes = new_node_attributes(slot.owner)
    return all_hold(task.constraints, attributes)


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


def _size_key(task: Task) -> tuple[int, float, int, str]:
    r = task.reservations
    return (r.gpus, r.cpus, r.memory_bytes, task.id)


def _unsatisfiable(task: Task, owner: Owner, policy: Policy, offerings: Offerings) -> str:
    """Why no launch can place this task, or "" when one can."""
    unmet = first_unmet_on_new_node(task.constraints, owner)
    if unmet is not None:
        return f"constraint {str(unmet)!r} cannot be met by a node warmswarm launches"
    if not offerings.fits_any(task.reservations):
        return (
            f"needs {task.reservations.describe()} but no allowed instance type fits it after the per-node"
            f" overhead ({policy.node_overhead.describe()}); the largest offers {_largest_offer(offerings)}"
        )
    return ""


def _largest_offer(offerings: Offerings) -> str:
    rooms = offerings.rooms()
    if not rooms:
        return "nothing (no allowed type is known to EC2)"
    name = max(rooms, key=lambda t: (rooms[t].cpus, rooms[t].memory_bytes, rooms[t].gpus))
    return f"{rooms[name].describe()} ({name})"
