"""Room that pending tasks can use without a launch: active nodes, drained nodes of ours, machines on their way.

Each unplaced task is matched to the first slot of its owner that fits it; what is left needs a launch
(or cannot be placed by any, and says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from warmswarm_models import CachePolicy, Owner, Resources

from warmswarm_autoscaling.actions import Activate
from warmswarm_autoscaling.plan.cluster import Cluster, cache_in_place
from warmswarm_autoscaling.plan.constraints import (
    all_hold,
    first_unmet_on_new_node,
    new_node_attributes,
    node_attributes,
    owner_fits,
)
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.plan.result import Waiting
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES, resumable
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Node, Task

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
    matched: bool = False  # pending work was matched to it this plan
    has_volume: bool = False  # the machine boots (or booted) with its owner's cache volume mounted
    # A machine launched in a batch, not yet anyone's: the first owner whose task it takes gets it whole.
    unbound: bool = False
    # A node of ours that dropped out of the swarm while its machine runs, expected back (re-integration).
    returning: bool = False
    # A warm machine (stopped by us for its owner): matching it means StartInstances (tiers.py).
    resume: bool = False
    # A machine claimed from a buffer whose node has yet to say the owner's volume is mounted (Cluster.mounting).
    mounting: bool = False

    def take(self, task: Task) -> None:
        self.room = self.room.minus(task.reservations)
        self.matched = True


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
                result.waiting.append(Waiting(task.id, task.service_name, owner, _slot_reason(slot), starting=True))
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


def find_slots(cluster: Cluster) -> list[Slot]:
    slots: list[Slot] = []
    resuming: set[str] = set()  # one slot per warm machine, however many registrations its node left behind
    for node in cluster.snapshot.nodes:
        # A node still "ready" while its machine is stopped or stopping is one the swarm has not yet missed (its
        # heartbeats time out seconds after the stop): a warm machine all the same, to resume for its owner.
        if node.state != "ready" or _stopped_under(cluster, node):
            back = _returning(cluster, node)
            if back is not None and back.resume and back.instance is not None:
                if back.instance.id in resuming:
                    continue
                resuming.add(back.instance.id)
            if back is not None:
                slots.append(back)
            continue
        ours = node.id in cluster.our_ids
        instance = cluster.instance_of(node) if ours else None
        if ours and (instance is None or not instance.is_live):
            continue  # its machine is going or gone: no room to count on
        if instance is not None and instance.id in cluster.mounting:
            assert instance.owner is not None  # claimed: an owner's
            # Its owner's room once the node says the volume is mounted; no work before (lifecycle.label_joined).
            slots.append(
                Slot(instance.owner, cluster.machine_room(instance), instance=instance, has_volume=True, mounting=True)
            )
            continue
        if ours and not cache_in_place(node, instance):
            continue  # launched for its owner's volume, which this boot did not mount: no work goes there
        if ours and not node.is_labelled:
            assert instance is not None
            if instance.owner is None or instance.in_buffer:
                continue  # its owner tags were edited into ids we cannot use: place nothing there
            if node.claims_another_owner(None if instance.unbound else instance.owner):
                continue  # someone labelled it for another owner (lifecycle.owner_label_conflicts): nobody's room
            # Joined drained and about to be labelled (lifecycle.py): room for its owner.
            slots.append(
                Slot(
                    instance.owner,
                    cluster.machine_room(instance),
                    instance=instance,
                    has_volume=instance.volume_id is not None,
                    unbound=instance.unbound,
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
        if instance.owner is not None and not instance.in_buffer:
            room = cluster.machine_room(instance)
            slots.append(
                Slot(
                    instance.owner,
                    room,
                    instance=instance,
                    has_volume=instance.volume_id is not None,
                    unbound=instance.unbound,
                )
            )
    return slots


def _returning(cluster: Cluster, node: Node) -> Slot | None:
    """A labelled node of ours that dropped out (network, reboot) while its machine runs, or whose machine we
    stopped for its owner (warm): its owner's work waits for it to come back, with its labels and its cache,
    rather than launching a second machine. After `max_start_s` down while running it is terminated
    (lifecycle.py) and the work launches anew; a warm machine is started for the work (tiers.py)."""
    if node.id not in cluster.our_ids:
        return None
    instance = cluster.instance_of(node)
    if instance is None:
        return None  # gone
    if instance.state not in STOPPED_STATES and node.engine_instance_id in cluster.joined_ready:
        return None  # back already as another node (which is the room)
    resume = resumable(cluster, instance)
    # Its owner: the node's labels; for a buffer machine just claimed (its node joined unlabelled, as
    # nobody's), the instance's new owner tags.
    owner = node.owner if node.is_labelled else instance.owner if instance.claimed_from_buffer else None
    if owner is None or owner.is_nobody or (not node.is_labelled and node.claims_another_owner(owner)):
        return None  # nobody's; or someone labelled its node for another owner (lifecycle.owner_label_conflicts)
    if not resume and not instance.is_live:
        return None  # going, or stopped by someone else (terminated after max_start_s)
    down_s = cluster.now - cluster.snapshot.carried.down_since.get(node.id, cluster.now)
    if not resume and down_s >= cluster.policy.max_start_s:
        return None
    room = node.resources.minus(cluster.reserved.get(node.id, Resources()))
    return Slot(
        owner,
        room,
        node=node,
        instance=instance,
        has_volume=instance.volume_id is not None,
        returning=True,
        resume=resume,
    )


def _stopped_under(cluster: Cluster, node: Node) -> bool:
    instance = cluster.instance_of(node) if node.id in cluster.our_ids else None
    return instance is not None and instance.state in STOPPED_STATES


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


def _slot_reason(slot: Slot) -> str:
    if slot.mounting and slot.instance is not None:
        machine = f"{slot.instance.id} ({slot.instance.instance_type} in {slot.instance.availability_zone})"
        if slot.instance.hot:
            return (
                f"machine {machine} of the hot buffer, running with its images pulled, is yours: your cache volume"
                f" {slot.instance.volume_id} is attached to it while it runs, and it takes your work once its node"
                " says the volume is mounted"
            )
        return f"machine {machine}, claimed for you, comes back with your cache volume {slot.instance.volume_id}"
    if slot.resume and slot.instance is not None:
        return (
            f"resuming your machine {slot.instance.id} ({slot.instance.state}, kept warm for {slot.owner}): the same"
            " node comes back with its labels and cache"
        )
    if slot.node is not None and slot.returning:
        assert slot.instance is not None  # a returning slot is its machine's
        machine = slot.instance.id
        return (
            f"node {slot.node.hostname} of {slot.owner} is {slot.node.state} while {machine} runs: waiting for it"
            " to come back (terminated and replaced after max_start_s)"
        )
    if slot.node is not None and slot.drained:
        return f"node {slot.node.hostname} of {slot.owner} is brought back from drain"
    if slot.node is not None:
        return f"fits on node {slot.node.hostname}; waiting for the swarm scheduler"
    assert slot.instance is not None
    return f"waiting for instance {slot.instance.id} ({slot.instance.instance_type}) to join the swarm"


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
