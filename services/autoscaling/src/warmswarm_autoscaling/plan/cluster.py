"""The snapshot indexed once for the decisions: our nodes, which instances joined, which are late or on the way."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_models import Resources

from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Node, Snapshot, Task


@dataclass(frozen=True, slots=True)
class Cluster:
    snapshot: Snapshot
    policy: Policy
    instances: dict[str, Instance]
    ours: list[Node]  # nodes we booted
    our_ids: frozenset[str]
    # Instances that are part of the swarm: their node is ready or carries our labels.
    joined: frozenset[str]
    # Instances whose node is ready right now.
    joined_ready: frozenset[str]
    live: list[Instance]  # pending or running
    late: list[Instance]  # live, not joined, past max_start_s: terminated by this plan
    booting: list[Instance]  # live, not joined, still within max_start_s
    # Live instances that are not late: every machine a volume or a task may still count on.
    on_the_way: dict[str, Instance]
    reserved: dict[str, Resources]  # node id -> what its active tasks reserve
    # (instance type, zone) -> until when not to try it; late instances' offerings included
    unavailable: dict[tuple[str, str], float]
    # Nodes that claim one of our instances but are not seen at its address: never labelled, never used.
    impostors: list[Node]
    offerings: Offerings  # the allowed types, their room, which fit a demand

    @property
    def now(self) -> float:
        return self.snapshot.now

    def instance_of(self, node: Node) -> Instance | None:
        return self.instances.get(node.engine_instance_id or "")

    @classmethod
    def of(cls, snapshot: Snapshot, policy: Policy) -> Cluster:
        now = snapshot.now
        instances = {i.id: i for i in snapshot.instances}
        ours = [n for n in snapshot.nodes if is_ours(n, instances)]
        impostors = [n for n in snapshot.nodes if n.engine_instance_id in instances and not is_ours(n, instances)]
        # An instance has joined once its node is ready or carries our labels (we label only ready nodes).
        # Until then it is on its way, whatever its node shows: a joining node is "unknown" or "down" first.
        # A machine claimed from the buffer joined once, before it was stopped: its start is a return (timed
        # by its down node), not a first boot timed from its launch long ago.
        joined = frozenset(
            n.engine_instance_id
            for n in ours
            if n.engine_instance_id
            and (n.state == "ready" or n.is_labelled or _claimed_from_buffer(instances.get(n.engine_instance_id)))
        )
        joined_ready = frozenset(n.engine_instance_id for n in ours if n.engine_instance_id and n.state == "ready")
        live = [i for i in snapshot.instances if i.is_live]
        late = [i for i in live if i.id not in joined and now - i.launched_at > policy.max_start_s]
        unavailable = {k: until for k, until in snapshot.carried.unavailable_offerings.items() if until > now}
        # A late instance is terminated: no task waits for it, and its offering is avoided right away.
        for instance in late:
            unavailable[(instance.instance_type, instance.availability_zone)] = now + policy.capacity_backoff_s
        late_ids = {i.id for i in late}
        booting = [i for i in live if i.id not in joined and i.id not in late_ids]
        return cls(
            snapshot=snapshot,
            policy=policy,
            instances=instances,
            ours=ours,
            our_ids=frozenset(n.id for n in ours),
            joined=joined,
            joined_ready=joined_ready,
            live=live,
            late=late,
            booting=booting,
            on_the_way={i.id: i for i in live if i.id not in late_ids},
            reserved=reserved_by_node(snapshot.tasks),
            unavailable=unavailable,
            impostors=impostors,
            offerings=Offerings(snapshot.instance_types, policy),
        )


def is_ours(node: Node, instances: dict[str, Instance]) -> bool:
    """A node we booted: its daemon names one of our instances and the manager sees it at that instance's
    private address, or (its instance gone) we labelled it for that instance earlier.

    The daemon's word alone is not enough: any machine that can join the swarm can claim any instance id,
    and the node we label for an owner is the one that gets the owner's work and cache.
    """
    if node.engine_instance_id is None:
        return False
    instance = instances.get(node.engine_instance_id)
    if instance is None:
        return node.labelled_instance_id == node.engine_instance_id
    return bool(instance.private_ip) and node.addr == instance.private_ip


def _claimed_from_buffer(instance: Instance | None) -> bool:
    return instance is not None and instance.claimed_from_buffer


def reserved_by_node(tasks: tuple[Task, ...]) -> dict[str, Resources]:
    reserved: dict[str, Resources] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active:
            earlier = reserved.get(task.node_id)
            # Most nodes run one task: its reservations are the sum, with nothing to add.
            reserved[task.node_id] = task.reservations if earlier is None else earlier + task.reservations
    return reserved
