"""Small builders of plain values for the planner's tests: nodes, tasks, instances, snapshots, a policy.

Figures are real: t3.medium 2 vCPU/4 GiB, m5.large 2/8 GiB, m5.xlarge 4/16 GiB, g4dn.xlarge 4/16 GiB/1 GPU,
at their on-demand prices (USD per hour).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

from warmswarm_autoscaling.actions import Action, Launch
from warmswarm_autoscaling.plan import Plan, Waiting, plan
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Snapshot, Task
from warmswarm_models import (
    CLUSTER_TAG,
    GPU,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    ROLE_TAG,
    ROLE_WORKER,
    Owner,
    Resources,
)

GIB: Final = 2**30
MIB: Final = 2**20
# Epoch seconds; 1_699_999_800 is a multiple of the default max_start_s (600), so NOW is 200 s into a window.
NOW: Final = 1_700_000_000.0
CLUSTER: Final = "test"
ZONE_A: Final = "eu-west-1a"
ZONE_B: Final = "eu-west-1b"

# Status.Err of a task the swarm scheduler could not place (verbatim from swarmkit).
ERR_RESOURCES: Final = "no suitable node (insufficient resources on 1 node)"
ERR_CONSTRAINTS: Final = "no suitable node (scheduling constraints not satisfied on 2 nodes)"

T3_MEDIUM: Final = InstanceType("t3.medium", Resources(2.0, 4 * GIB))
M5_LARGE: Final = InstanceType("m5.large", Resources(2.0, 8 * GIB))
M5_XLARGE: Final = InstanceType("m5.xlarge", Resources(4.0, 16 * GIB))
G4DN_XLARGE: Final = InstanceType("g4dn.xlarge", Resources(4.0, 16 * GIB, {GPU: 1}))
INSTANCE_TYPES: Final[Mapping[str, InstanceType]] = {t.name: t for t in (T3_MEDIUM, M5_LARGE, M5_XLARGE, G4DN_XLARGE)}
PRICES: Final[Mapping[str, float]] = {"t3.medium": 0.0416, "m5.large": 0.096, "m5.xlarge": 0.192, "g4dn.xlarge": 0.526}
OVERHEAD: Final = Resources(0.1, 256 * MIB)

ALICE: Final = Owner(user_id="alice")
BOB: Final = Owner(user_id="bob")
NOBODY: Final = Owner()

_DEFAULT_POLICY: Final = Policy(
    cluster=CLUSTER,
    allowed_instance_types=("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge"),
    price_per_hour=PRICES,
    availability_zones=(ZONE_A, ZONE_B),
    node_overhead=OVERHEAD,
    max_instances=10,
    max_launches_per_cycle=5,
    idle_grace_s=300.0,
    max_start_s=600.0,
    capacity_backoff_s=600.0,
)

A = TypeVar("A")


def make_policy(**changes: Any) -> Policy:
    """The default policy (all four types, two zones, 0.1 CPU + 256 MiB overhead) with `changes` applied."""
    return dataclasses.replace(_DEFAULT_POLICY, **changes)


def resources(cpus: float = 1.0, memory_gib: float = 1.0, gpus: int = 0) -> Resources:
    return Resources(cpus, int(memory_gib * GIB), {GPU: gpus} if gpus else {})


def pending_task(
    task_id: str,
    owner: Owner = NOBODY,
    *,
    cpus: float = 1.0,
    memory_gib: float = 1.0,
    gpus: int = 0,
    constraints: Iterable[str] = (),
    err: str = ERR_RESOURCES,
    state: str = "pending",
    desired_state: str = "running",
) -> Task:
    """An unassigned task of `owner` (its placement constraints pin it), by default one swarm could not place."""
    return Task(
        id=task_id,
        service_id=f"svc-{task_id}",
        service_name=f"service-{task_id}",
        state=state,
        desired_state=desired_state,
        reservations=resources(cpus, memory_gib, gpus),
        constraints=(*owner.constraints(), *constraints),
        node_id=None,
        err=err,
    )


def running_task(
    task_id: str,
    node: Node,
    owner: Owner = NOBODY,
    *,
    cpus: float = 1.0,
    memory_gib: float = 1.0,
    state: str = "running",
    desired_state: str = "running",
) -> Task:
    """A task assigned to `node` (by default running there)."""
    return Task(
        id=task_id,
        service_id=f"svc-{task_id}",
        service_name=f"service-{task_id}",
        state=state,
        desired_state=desired_state,
        reservations=resources(cpus, memory_gib),
        constraints=tuple(owner.constraints()),
        node_id=node.id,
    )


def instance(
    instance_id: str,
    owner: Owner = NOBODY,
    *,
    instance_type: str = "t3.medium",
    zone: str = ZONE_A,
    state: str = "running",
    launched_at: float = NOW - 60.0,
    tags: Mapping[str, str] | None = None,
) -> Instance:
    """An EC2 instance of this cluster, tagged as apply tags what it launches (owner ids as tags)."""
    all_tags = {CLUSTER_TAG: CLUSTER, ROLE_TAG: ROLE_WORKER, **owner.labels(), **(tags or {})}
    return Instance(instance_id, instance_type, zone, state, launched_at, all_tags)


def instance_from_launch(launch: Launch, instance_id: str, *, launched_at: float, state: str = "pending") -> Instance:
    """What apply creates for a Launch: the type and zone it names, tagged with its owner."""
    return instance(
        instance_id,
        launch.owner,
        instance_type=launch.instance_type,
        zone=launch.availability_zone,
        state=state,
        launched_at=launched_at,
    )


def our_labels(of: Instance) -> dict[str, str]:
    """The labels plan writes on the node of `of`: its owner's ids and the three warmswarm keys."""
    labels = Owner.from_labels(of.tags).labels()
    labels[NODE_LABEL_INSTANCE_ID] = of.id
    labels[NODE_LABEL_INSTANCE_TYPE] = of.instance_type
    labels[NODE_LABEL_AVAILABILITY_ZONE] = of.availability_zone
    return labels


def node_of(
    of: Instance,
    *,
    node_id: str | None = None,
    labelled: bool = True,
    state: str = "ready",
    availability: str | None = None,
    hostname: str | None = None,
) -> Node:
    """The swarm node the daemon on `of` registers. Unlabelled, it has just joined (and so is drained)."""
    return Node(
        id=node_id or f"node-{of.id}",
        hostname=hostname or f"ip-10-0-0-{of.id[-2:]}",
        state=state,
        availability=availability or ("active" if labelled else "drain"),
        role="worker",
        resources=INSTANCE_TYPES[of.instance_type].resources,
        labels=our_labels(of) if labelled else {},
        engine_instance_id=of.id,
    )


def foreign_node(
    node_id: str,
    *,
    role: str = "worker",
    state: str = "ready",
    availability: str = "active",
    labels: Mapping[str, str] | None = None,
    engine_instance_id: str | None = None,
    cpus: float = 4.0,
    memory_gib: float = 16.0,
) -> Node:
    """A node warmswarm did not boot (a manager, or a worker ops added by hand)."""
    return Node(
        id=node_id,
        hostname=f"host-{node_id}",
        state=state,
        availability=availability,
        role=role,
        resources=resources(cpus, memory_gib),
        labels=labels or {},
        engine_instance_id=engine_instance_id,
    )


def snapshot(
    *,
    nodes: Iterable[Node] = (),
    tasks: Iterable[Task] = (),
    instances: Iterable[Instance] = (),
    now: float = NOW,
    idle_since: Mapping[str, float] | None = None,
    unavailable: Mapping[tuple[str, str], float] | None = None,
    instance_types: Mapping[str, InstanceType] = INSTANCE_TYPES,
) -> Snapshot:
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        tasks=tuple(tasks),
        instances=tuple(instances),
        instance_types=instance_types,
        idle_since=dict(idle_since or {}),
        unavailable_offerings=dict(unavailable or {}),
    )


def next_snapshot(
    previous: Plan,
    *,
    now: float,
    nodes: Iterable[Node] = (),
    tasks: Iterable[Task] = (),
    instances: Iterable[Instance] = (),
) -> Snapshot:
    """The next cycle's snapshot, carrying the bookkeeping the previous plan left (as the loop does)."""
    return snapshot(
        nodes=nodes,
        tasks=tasks,
        instances=instances,
        now=now,
        idle_since=previous.idle_since,
        unavailable=previous.unavailable_offerings,
    )


def run(snap: Snapshot, policy: Policy | None = None) -> Plan:
    return plan(snap, policy or make_policy())


def actions_of(result: Plan, kind: type[A]) -> list[A]:
    return [a for a in result.actions if isinstance(a, kind)]


def only(result: Plan, kind: type[A]) -> A:
    """The one action of `kind` in the plan; fails when there is none or more than one."""
    found = actions_of(result, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {result.actions}"
    return found[0]


def waiting_for(result: Plan, task_id: str) -> Waiting:
    """The one Waiting entry for `task_id`; fails when there is none or more than one."""
    found = [w for w in result.waiting if w.task_id == task_id]
    assert len(found) == 1, f"expected one Waiting for {task_id}, got {result.waiting}"
    return found[0]


def names(action: Action) -> set[str]:
    """The node and instance ids an action acts on."""
    named = set()
    for attribute in ("node_id", "instance_id"):
        value = getattr(action, attribute, None)
        if isinstance(value, str):
            named.add(value)
    return named
