"""Where pending work may go without a launch: one slot per active node, drained node of ours, machine on its way,
warm machine to resume or buffer claim awaiting its mount; and what each slot tells the task that waits on it."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_models import Owner, Resources

from warmswarm_autoscaling.plan.cluster import Cluster, cache_in_place
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES, resumable
from warmswarm_autoscaling.snapshot import Instance, Node, Task


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


def slot_reason(slot: Slot) -> str:
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
