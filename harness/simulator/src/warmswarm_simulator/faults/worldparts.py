"""One campaign's modelled world (clock, cloud, swarm, machines, platform) and whose each thing is, read from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from warmswarm_models import (
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    InvalidOwner,
    Owner,
    parse_constraints,
)

from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_values import SimInstance
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.platform import Platform
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.swarm_values import SimNode, SimTask
from warmswarm_simulator.world import World

BUFFER = "the buffer"  # whose a machine of the warm buffer is, until an owner claims it
BATCH = "a batch"  # whose a machine of a batch is, until it is bound to an owner


@dataclass(slots=True)
class Parts:
    world: World
    cloud: Cloud
    swarm: Swarm
    machines: Machines
    platform: Platform
    # Instances whose node a fault removed or lost for good: whatever becomes of them is the fault's doing.
    nodes_struck: set[str] = field(default_factory=set)

    def instance_of(self, node: SimNode) -> SimInstance | None:
        """The instance a node is, by the rule the autoscaler uses: its daemon's id, seen at that instance's address."""
        instance = self.cloud.instances.get(node.engine_labels.get(ENGINE_LABEL_INSTANCE_ID, ""))
        return instance if instance is not None and instance.private_ip == node.addr else None

    def node_of(self, instance_id: str) -> SimNode | None:
        node_id = self.machines.node_of.get(instance_id)
        return self.swarm.nodes.get(node_id) if node_id is not None else None

    def active_tasks_on(self, node: SimNode) -> list[SimTask]:
        return [t for t in self.swarm.tasks.values() if t.node_id == node.id and t.desired_state == "running"]


def owner_of(tags: dict[str, str]) -> Owner | None:
    """The owner tags or labels name (Owner() for none); None when they cannot be read."""
    try:
        return Owner.from_labels(tags)
    except InvalidOwner:
        return None


def whose_instance(instance: SimInstance) -> str:
    """Whose a machine is by its tags: an owner, the buffer, a batch, or nobody."""
    owner = owner_of(instance.tags)
    if owner is not None and not owner.is_nobody:
        return str(owner)
    if instance.tags.get(INSTANCE_BUFFER_TAG) == "true":
        return BUFFER
    if instance.tags.get(INSTANCE_BATCH_TAG):
        return BATCH
    return "nobody"


def task_owner(task: SimTask) -> Owner:
    """The owner a task's placement constraints pin it to (Owner() for none)."""
    try:
        owner, _ = parse_constraints(task.service.constraint_texts)
    except InvalidOwner:
        return Owner()
    return owner


def cache_in_place(node: SimNode, instance: SimInstance) -> bool:
    """The node's boot mounted the volume its machine was launched (or claimed) for, or it was for none."""
    wanted = instance.tags.get(INSTANCE_VOLUME_TAG)
    return wanted is None or node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME) == wanted
