"""Large in-memory worlds for the benchmarks: snapshots of thousands of nodes, tasks, instances and volumes.

Built with the adapters' own readings (readings.py), so what the planner sees is what it would see in
production; a world is a function of its sizes alone (no randomness), so two runs plan the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.readings import read_instance, read_node, read_task, read_volume
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Snapshot, Task, Volume
from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_VOLUME_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    ROLE_CACHE,
    ROLE_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    Owner,
    Resources,
)

GIB = 2**30
NOW = 1_700_000_000.0
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ERR_CAPACITY = "no suitable node (insufficient resources on 5 nodes)"
CACHE_LABELS = CachePolicy(enabled=True, ttl_s=86_400, size_gib=10).to_labels()

Pinning = Literal["owner", "project", "unowned"]


def instance_types(count: int = 50) -> dict[str, InstanceType]:
    """`count` types from 2 to 64 CPUs and 4 to 256 GiB, a GPU on every fifth; names sort by price."""
    found = {}
    for n in range(count):
        cpus = 2.0 * (1 + n % 32)
        memory = int(cpus * (2 + n % 3 * 2) * GIB)
        gpus = {"gpu": 1} if n % 5 == 4 else {}
        found[f"x{n:02d}.large"] = InstanceType(f"x{n:02d}.large", Resources(cpus, memory, gpus))
    return found


def policy(types: dict[str, InstanceType], *, max_instances: int = 100_000, launches_per_cycle: int = 100) -> Policy:
    prices = {name: 0.02 * t.resources.cpus + 0.004 * t.resources.memory_bytes / GIB for name, t in types.items()}
    return Policy(
        cluster="bench",
        allowed_instance_types=tuple(types),
        price_per_hour=prices,
        availability_zones=ZONES,
        node_overhead=Resources(0.1, 256 * 2**20),
        max_instances=max_instances,
        max_launches_per_cycle=launches_per_cycle,
        idle_grace_s=300,
    )


def owner(n: int, prefix: str = "u") -> Owner:
    return Owner(user_id=f"{prefix}{n}", project_id=f"p{n % 97}", node_id=f"{prefix}n{n}")


@dataclass
class World:
    nodes: list[Node]
    tasks: list[Task]
    instances: list[Instance]
    volumes: list[Volume]

    def snapshot(self, types: dict[str, InstanceType]) -> Snapshot:
        return Snapshot(NOW, tuple(self.nodes), tuple(self.tasks), tuple(self.instances), types, tuple(self.volumes))


def world(
    *,
    nodes: int = 0,
    pending: int = 0,
    pinning: Pinning = "owner",
    cache: bool = False,
    volumes: int = 0,
    in_flight: int = 0,
) -> World:
    """`nodes` labelled nodes of distinct owners, each running one task; `pending` tasks of new owners (or pinned
    by project only, or unowned); with `cache`, the pending tasks keep a cache and `volumes` volumes exist (the
    first of them belong to pending owners, released and waiting in their zone); `in_flight` machines booting."""
    made = World([], [], [], [])
    for n in range(nodes):
        who = owner(n)
        zone = ZONES[n % 3]
        instance = _instance(f"i-{n:08x}", who, zone, "running", volume_id=None)
        made.instances.append(instance)
        node = _node(f"node{n}", instance, who)
        made.nodes.append(node)
        made.tasks.append(_task(f"t{n}", who, node.id, "running", "", cache=False))
    for n in range(pending):
        who = owner(n, "q")
        constraints: Owner | list[str]
        if pinning == "owner":
            constraints = who
        elif pinning == "project":
            constraints = [f"node.labels.project_id==p{n % 97}"]
        else:
            constraints = []
        made.tasks.append(_task(f"q{n}", constraints, None, "pending", ERR_CAPACITY, cache=cache))
    for n in range(volumes):
        who = owner(n, "q")
        made.volumes.append(_volume(f"vol-{n:08x}", who, ZONES[n % 3]))
    for n in range(in_flight):
        who = owner(n, "f")
        made.instances.append(_instance(f"i-f{n:07x}", who, ZONES[n % 3], "pending", volume_id=None))
    return made


def _instance(instance_id: str, who: Owner, zone: str, state: str, *, volume_id: str | None) -> Instance:
    tags = {CLUSTER_TAG: "bench", **who.labels()}
    if volume_id:
        tags[INSTANCE_VOLUME_TAG] = volume_id
    return read_instance(
        id=instance_id,
        instance_type="x00.large",
        availability_zone=zone,
        state=state,
        launched_at=NOW - 3600,
        tags=tags,
        private_ip=_address(instance_id),
    )


def _node(node_id: str, instance: Instance, who: Owner) -> Node:
    labels = {
        **who.labels(),
        NODE_LABEL_INSTANCE_ID: instance.id,
        NODE_LABEL_INSTANCE_TYPE: instance.instance_type,
        NODE_LABEL_AVAILABILITY_ZONE: instance.availability_zone,
    }
    engine = {ENGINE_LABEL_INSTANCE_ID: instance.id}
    if instance.volume_id:
        labels[NODE_LABEL_VOLUME_ID] = instance.volume_id
        engine[ENGINE_LABEL_CACHE_VOLUME] = instance.volume_id
    return read_node(
        id=node_id,
        hostname=f"ip-{node_id}",
        state="ready",
        availability="active",
        role="worker",
        resources=Resources(2, 4 * GIB),
        labels=labels,
        engine_labels=engine,
        addr=instance.private_ip,
    )


def _task(task_id: str, pinned: Owner | list[str], node_id: str | None, state: str, err: str, *, cache: bool) -> Task:
    constraints = pinned.constraints() if isinstance(pinned, Owner) else pinned
    return read_task(
        id=task_id,
        service_id=f"s{task_id}",
        service_name=f"svc-{task_id}",
        state=state,
        desired_state="running",
        reservations=Resources(1, GIB),
        constraints=constraints,
        node_id=node_id,
        err=err,
        service_labels=CACHE_LABELS if cache else {},
        global_service=False,
    )


def _volume(volume_id: str, who: Owner, zone: str) -> Volume:
    return read_volume(
        id=volume_id,
        availability_zone=zone,
        state="available",
        size_gib=10,
        volume_type="gp3",
        created_at=NOW - 86_400,
        tags={CLUSTER_TAG: "bench", ROLE_TAG: ROLE_CACHE, VOLUME_TTL_TAG: "86400", **who.labels()},
    )


def _address(instance_id: str) -> str:
    """A private address of the instance's own, derived from its (hex) id."""
    return f"10.{int(instance_id[-6:], 16) % 250}.{int(instance_id[-4:], 16) % 250}.{int(instance_id[-2:], 16)}"
