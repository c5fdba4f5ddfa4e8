"""Benchmark: a class of 500 opening sessions at once, launched against AWS's API buckets, with a restart mid-way.

Run: .venv/bin/python benchmarks/bench_burst.py [--students 500]      (part of `make bench`)
A moto server behind the sandbox's strict EC2 layer, with AWS's buckets (RunInstances 5 burst and 2 a second,
its resource bucket 1000 instances and 2 a second, mutating calls 50 and 5, Describe 100 and 20) and instances
that run at once (boot time 0), drives the real reconciler through the aiobotocore adapter. The swarm is a
fake of the Swarm port: the node of a running instance joins at once, drained and unlabelled, at the
instance's address; a node labelled for an owner takes that owner's task. When half the class has machines,
the autoscaler restarts: a new reconciler, nothing carried over. Cycles follow each other as the busy loop
paces them (the busy resync, 3 s by default, is what an idle event stream leaves; here 1 s).

Prints: seconds from all pending to all launch calls accepted and to all nodes labelled; RunInstances calls;
RequestLimitExceeded answers (each retried by botocore or the next cycle) and those that failed an action;
duplicate machines (instances beyond one per student), and owners with two machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import LAUNCH_CLIENT_ATTEMPTS, ec2_client
from warmswarm_autoscaling.ports import JoinInfo, LaunchRequest
from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.snapshot import Node, Task
from warmswarm_autoscaling.wiring import build_reconciler
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_ID, Owner, Resources
from warmswarm_sandbox import procs
from warmswarm_sandbox.services import SANDBOX_IMAGE_ID

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CLUSTER = "burst"
TYPE = "t3.medium"
NODE_SUBNET = 77  # instances get 10.77.H.L addresses from the strict layer, as sandbox machines do
BUSY_PAUSE_S = 1.0


def student(n: int) -> Owner:
    return Owner(user_id=f"s{n}", project_id="course", node_id=f"nb{n}")


@dataclass
class FakeSwarm:
    """ports.Swarm in memory: a node joins for each running instance; a labelled node takes its owner's task."""

    ec2: AiobotocoreEc2
    tasks: dict[Owner, Task]
    nodes: dict[str, Node] = field(default_factory=dict)  # node id -> node
    label_updates: int = 0

    async def list_nodes(self) -> list[Node]:
        for instance in await self.ec2.list_instances(CLUSTER):
            node_id = f"node-{instance.id}"
            if instance.state == "running" and node_id not in self.nodes:
                self.nodes[node_id] = _node(node_id, instance.id, instance.private_ip, {}, "drain")
        return list(self.nodes.values())

    async def list_tasks(self) -> list[Task]:
        return list(self.tasks.values())

    async def join_info(self) -> JoinInfo:
        return JoinInfo("10.77.0.2:2377", "SWMTKN-1-burst")

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        node = self.nodes[node_id]
        kept = {key: value for key, value in node.labels.items() if key not in remove_labels}
        merged = {**kept, **(labels or {})}
        self.nodes[node_id] = _node(
            node_id, node.engine_instance_id or "", node.addr, merged, availability or node.availability
        )
        self.label_updates += 1
        owner = Owner.from_labels(merged)
        if owner in self.tasks and availability == "active":
            self.tasks[owner] = _task(owner, node_id)  # swarm places the owner's task on its node

    async def remove_node(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)

    async def events(self) -> AsyncIterator[str]:
        await asyncio.Event().wait()
        yield "node"

    def labelled(self) -> dict[str, Owner]:
        return {n.labels[NODE_LABEL_INSTANCE_ID]: n.owner for n in self.nodes.values() if n.is_labelled and n.owner}


def _node(node_id: str, instance_id: str, addr: str, labels: Mapping[str, str], availability: str) -> Node:
    return read_node(
        id=node_id,
        hostname=node_id,
        state="ready",
        availability=availability,
        role="worker",
        resources=Resources(2.0, 4 * 2**30),
        labels=labels,
        engine_labels={ENGINE_LABEL_INSTANCE_ID: instance_id},
        addr=addr,
    )


def _task(owner: Owner, node_id: str | None) -> Task:
    return read_task(
        id=f"task-{owner.user_id}",
        service_id=f"svc-{owner.user_id}",
        service_name=f"ws-{owner.user_id}",
        state="pending" if node_id is None else "running",
        desired_state="running",
        reservations=Resources(1.0, 2**30),
        constraints=owner.constraints(),
        node_id=node_id,
        err="" if node_id else "no suitable node (scheduling constraints not satisfied on 1 node)",
        service_labels={},
        global_service=False,
    )


class DyingEc2(AiobotocoreEc2):
    """The first leader's EC2: once its second RunInstances is answered, the leader's cycle dies (cancelled)
    with its other calls in flight: sent or not, answered or not, their answers never reach it."""

    cycle: asyncio.Task[Any] | None = None
    answered = 0

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        made = await super().run_instances(request)
        self.answered += 1
        if self.answered == 2 and self.cycle is not None:
            self.cycle.cancel()
        return made


def reconciler(swarm: FakeSwarm, ec2: AiobotocoreEc2, students: int) -> Reconciler:
    settings = AutoscalingSettings.model_construct(
        cluster=CLUSTER,
        image_id=SANDBOX_IMAGE_ID,
        aws_region=ZONES[0][:-1],
        availability_zones=list(ZONES),
        allowed_instance_types=[TYPE],
        price_per_hour={TYPE: 0.0416},
        node_overhead_cpus=0.1,
        node_overhead_memory_bytes=256 * 2**20,
        max_instances=students + 50,
        max_launches_per_cycle=students,  # a class at once: the call budget below is what paces it
        max_launch_calls_per_cycle=5,  # the RunInstances bucket's burst
        idle_grace_s=3600.0,
        max_start_s=600.0,
    )
    return build_reconciler(settings, swarm=swarm, ec2=ec2)


async def strict_calls(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/strict/calls") as answer:
        found: dict[str, Any] = await answer.json()
        return found


async def run(ec2_url: str, students: int) -> None:
    async with (
        ec2_client(ec2_url, REGION, 5) as client,
        ec2_client(ec2_url, REGION, LAUNCH_CLIENT_ATTEMPTS) as launch_client,
    ):
        ec2 = AiobotocoreEc2(client, launch_client=launch_client)
        swarm = FakeSwarm(ec2, {student(n): _task(student(n), None) for n in range(students)})
        dying = DyingEc2(client, launch_client=launch_client)
        scaler = reconciler(swarm, dying, students)
        started = time.monotonic()
        launched_s = labelled_s = None
        restarted = False
        cycles = failed_by_throttling = 0
        while labelled_s is None and time.monotonic() - started < 600:
            cycle = asyncio.create_task(scaler.cycle())
            dying.cycle = cycle if not restarted else None
            try:
                report = await cycle
            except asyncio.CancelledError:
                made = len([i for i in await ec2.list_instances(CLUSTER) if i.is_live])
                if launched_s is None and made >= students:
                    launched_s = time.monotonic() - started
                print(
                    f"  the leader dies {time.monotonic() - started:.1f} s in, with {made} machines launched and the"
                    " rest of its calls in flight; a new one takes over with nothing carried"
                )
                scaler, restarted = reconciler(swarm, ec2, students), True
                continue
            cycles += 1
            failed_by_throttling += sum(
                1 for d in scaler.journal.decisions if d.error and "RequestLimitExceeded" in d.error
            )
            scaler.journal.decisions.clear()
            instances = [i for i in await ec2.list_instances(CLUSTER) if i.is_live]
            print(
                f"  cycle {cycles} took {report.duration_s:4.1f} s: {report.actions:3d} actions;"
                f" {len(instances):3d} machines, {len(swarm.labelled()):3d} labelled"
            )
            if launched_s is None and len(instances) >= students:
                launched_s = time.monotonic() - started
            if len(swarm.labelled()) >= students:
                labelled_s = time.monotonic() - started
            else:
                await asyncio.sleep(BUSY_PAUSE_S)

        instances = [i for i in await ec2.list_instances(CLUSTER) if i.is_live]
        owners = Counter(swarm.labelled().values())
        answers = (await strict_calls(ec2_url))["answers"]
        run_calls = answers.get("RunInstances", {})
        throttled = sum(counts.get("RequestLimitExceeded", 0) for counts in answers.values())
        print(f"  cycles {cycles}; RunInstances answers {dict(run_calls)}")
        print(f"  all {students} launch calls accepted after  {_s(launched_s)}   (target ≤ 60 s)")
        print(f"  all {students} nodes labelled after         {_s(labelled_s)}")
        print(f"  RequestLimitExceeded answers {throttled}; actions failed by one {failed_by_throttling}   (target 0)")
        print(
            f"  machines {len(instances)} for {students} students: duplicates {len(instances) - students}   (target 0)"
        )
        print(f"  owners with two machines {sum(1 for c in owners.values() if c > 1)}   (target 0)")


def _s(value: float | None) -> str:
    return "never (600 s)" if value is None else f"{value:6.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=500)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    env = {**os.environ, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}
    moto_port, strict_port = procs.free_tcp_port(), procs.free_tcp_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "warmswarm_sandbox", "moto-server", "--port", str(moto_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    strict = subprocess.Popen(
        [
            *(sys.executable, "-m", "warmswarm_sandbox.strict_ec2", "--upstream", f"http://127.0.0.1:{moto_port}"),
            *("--port", str(strict_port), "--node-subnet", str(NODE_SUBNET), "--log-level", "WARNING"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(os.environ.get("BURST_STRICT_LOG", os.devnull), "w"),  # noqa: SIM115 -- the child's for its life
    )
    try:
        url = f"http://127.0.0.1:{strict_port}"
        asyncio.run(_wait_for(url + "/strict/config"))
        print(f"a class of {args.students} opens sessions at once; AWS's buckets, boot time 0, a restart mid-way")
        asyncio.run(run(url, args.students))
    finally:
        for process in (strict, moto):
            process.terminate()
            process.wait(timeout=10)


async def _wait_for(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(300):
            try:
                async with http.get(url) as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


if __name__ == "__main__":
    main()
