"""Benchmark: how long one plan() takes for clusters of thousands of nodes (in-memory snapshots, no I/O).

Run: .venv/bin/python benchmarks/bench_plan.py [--repeat 7]
Prints the median and spread per cluster size; machines here are shared, so read the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.readings import read_instance, read_node, read_task
from warmswarm_autoscaling.snapshot import InstanceType, Snapshot, Task
from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    Owner,
    Resources,
)

GIB = 2**30
NOW = 1_700_000_000.0
TYPES = {
    "t3.medium": InstanceType("t3.medium", Resources(2, 4 * GIB)),
    "m5.large": InstanceType("m5.large", Resources(2, 8 * GIB)),
    "m5.xlarge": InstanceType("m5.xlarge", Resources(4, 16 * GIB)),
}
POLICY = Policy(
    cluster="bench",
    allowed_instance_types=tuple(TYPES),
    price_per_hour={"t3.medium": 0.0416, "m5.large": 0.096, "m5.xlarge": 0.192},
    availability_zones=("us-east-1a", "us-east-1b", "us-east-1c"),
    node_overhead=Resources(0.1, 256 * 2**20),
    max_instances=100_000,
    max_launches_per_cycle=100,
    idle_grace_s=300,
)


def cluster(nodes: int, pending: int) -> Snapshot:
    """`nodes` labelled nodes of distinct owners, each running one task; `pending` new owners' tasks."""
    node_list, instances, tasks = [], [], []
    for n in range(nodes):
        owner = Owner(user_id=f"u{n}", project_id="p", node_id=f"n{n}")
        zone = POLICY.availability_zones[n % 3]
        instance = read_instance(
            id=f"i-{n:08x}",
            instance_type="t3.medium",
            availability_zone=zone,
            state="running",
            launched_at=NOW - 3600,
            tags={CLUSTER_TAG: "bench", **owner.labels()},
        )
        labels = {
            **owner.labels(),
            NODE_LABEL_INSTANCE_ID: instance.id,
            NODE_LABEL_INSTANCE_TYPE: "t3.medium",
            NODE_LABEL_AVAILABILITY_ZONE: zone,
        }
        node = read_node(
            id=f"node{n}",
            hostname=f"ip-{n}",
            state="ready",
            availability="active",
            role="worker",
            resources=Resources(2, 4 * GIB),
            labels=labels,
            engine_labels={ENGINE_LABEL_INSTANCE_ID: instance.id},
        )
        task = _task(f"t{n}", owner, node.id, "running", "")
        node_list.append(node)
        instances.append(instance)
        tasks.append(task)
    for p in range(pending):
        owner = Owner(user_id=f"new{p}", project_id="p", node_id=f"m{p}")
        tasks.append(
            _task(f"q{p}", owner, None, "pending", "no suitable node (scheduling constraints not satisfied on 5 nodes)")
        )
    return Snapshot(NOW, tuple(node_list), tuple(tasks), tuple(instances), TYPES)


def _task(task_id: str, owner: Owner, node_id: str | None, state: str, err: str) -> Task:
    return read_task(
        id=task_id,
        service_id=f"s{task_id}",
        service_name=f"svc{task_id}",
        state=state,
        desired_state="running",
        reservations=Resources(1, GIB),
        constraints=owner.constraints(),
        node_id=node_id,
        err=err,
        service_labels={},
        global_service=False,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    print(f"{'nodes':>6} {'pending':>8} {'median ms':>10} {'min ms':>8} {'max ms':>8} {'launches':>9}")
    for nodes, pending in ((100, 10), (1000, 50), (2000, 100), (5000, 100)):
        snapshot = cluster(nodes, pending)
        timings_ms = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = plan(snapshot, POLICY)
            timings_ms.append((time.perf_counter() - started) * 1000)
        launches = sum(1 for a in result.actions if type(a).__name__ == "Launch")
        print(
            f"{nodes:>6} {pending:>8} {statistics.median(timings_ms):>10.1f} {min(timings_ms):>8.1f}"
            f" {max(timings_ms):>8.1f} {launches:>9}"
        )


if __name__ == "__main__":
    main()
