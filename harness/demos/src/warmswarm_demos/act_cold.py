"""Act 1 of `make demo`: a plain swarm service gets a machine by a cold launch, and the machine goes once idle."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiodocker
from warmswarm_models import CLUSTER_TAG, INSTANCE_BUFFER_KIND_TAG, INSTANCE_BUFFER_TAG
from warmswarm_models.start import BufferKind, MachineFacts, start_path
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.narration import Narrator, check_start_path
from warmswarm_demos.stage import GIB, POLL_S, STEP_TIMEOUT_S, decisions, instance_in, node_of, tags_of
from warmswarm_demos.workload import create_service, wait_for

ACT = "act 1 (cold start)"
STEPS = (
    ("pending → launch call", "pending", "launched"),
    ("launch → node joined", "launched", "joined"),
    ("node joined → labelled", "joined", "labelled"),
    ("label → running", "labelled", "running"),
    ("created → running", "created", "running"),
    ("idle → terminated", "idle", "terminated"),
    ("terminated → node removed", "terminated", "removed"),
)


def derived_start_path(requested_at_s: float, machine: dict[str, Any]) -> str:
    """The start path by the director's own rule (warmswarm_models.start) on EC2's facts: this act's service is a
    plain swarm service, which the director does not answer for."""
    tags = tags_of(machine)
    kind: BufferKind | None = None
    if tags.get(INSTANCE_BUFFER_TAG) == "true":
        kind = "hot" if tags.get(INSTANCE_BUFFER_KIND_TAG) == "hot" else "warm"
    facts = MachineFacts(launched_at=machine["LaunchTime"].timestamp(), buffer_kind=kind)
    return start_path(requested_at_s, facts)


async def _task(docker: aiodocker.Docker, service_id: str) -> dict[str, Any] | None:
    tasks = await docker.tasks.list(filters={"service": service_id, "desired-state": "running"})
    return dict(tasks[0]) if tasks else None


async def cold_act(
    sandbox: Sandbox,
    autoscaler_url: str,
    ops_token: str,
    say: Narrator,
    *,
    cluster: str,
    idle_grace_s: float,
    suffix: str = "",
) -> None:
    """`suffix` makes the owner's ids and the service's name unique in a shared sandbox."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        nodes = await docker.nodes.list()
        say.say(f"the swarm has {len(nodes)} node: the manager, drained (it manages, it does not run work)")

        owner = {"user_id": f"alice{suffix}", "project_id": "p1", "node_id": f"n1{suffix}"}
        say.say("alice starts a service reserving 1 CPU and 1 GiB, pinned by node.labels.user_id==alice, …")
        say.say("  (a plain swarm service, no director: the autoscaler alone sees its task pending)")
        say.mark("created")
        requested_at_s = time.time()
        service_id = await create_service(
            docker, f"alice-notebook{suffix}", endpoints.sandbox_image, owner=owner, cpus=1, memory_bytes=GIB
        )

        async def pending() -> dict[str, Any] | None:
            task = await _task(docker, service_id)
            return task if task and task["Status"].get("Err") else None

        task, _ = await wait_for("task pending", pending, STEP_TIMEOUT_S, POLL_S)
        say.mark("pending")
        say.say(f"its task is pending: {task['Status']['Err']!r}")

        async def launched() -> dict[str, Any] | None:
            # The first machine of this autoscaler's cluster (a shared sandbox, in a test, has others).
            found = await asyncio.to_thread(aws.all_instances, ec2)
            return next((i for i in found.values() if tags_of(i).get(CLUSTER_TAG) == cluster), None)

        machine, _ = await wait_for("a launch", launched, STEP_TIMEOUT_S, POLL_S)
        say.mark("launched")
        instance_id = machine["InstanceId"]
        launch = next((d for d in decisions(autoscaler_url, ops_token) if d["action"].startswith("Launch")), None)
        say.say(
            f"autoscaler launched {instance_id}: {launch['reason'] if launch else machine['InstanceType']}"
            f"   (pending → launch call {say.between('pending', 'launched'):.1f} s)"
        )
        path = check_start_path(ACT, "cold_launch", derived_start_path(requested_at_s, machine))
        say.say(f"  start path, by the director's rule on EC2's facts: {path} (launched after the request)")

        node, _ = await wait_for("node joined", lambda: node_of(docker, instance_id), STEP_TIMEOUT_S, POLL_S)
        say.mark("joined")
        say.say(
            f"instance booted and its daemon joined the swarm as node {node['Description']['Hostname']},"
            f" drained until labelled   (launch → node joined {say.between('launched', 'joined'):.1f} s)"
        )

        async def labelled() -> dict[str, Any] | None:
            found = await node_of(docker, instance_id)
            return found if found and found["Spec"].get("Labels", {}).get("user_id") == owner["user_id"] else None

        node, _ = await wait_for("node labelled", labelled, STEP_TIMEOUT_S, POLL_S)
        say.mark("labelled")
        labels = ", ".join(f"{k}={v}" for k, v in sorted(node["Spec"]["Labels"].items()))
        say.say(f"node labelled and activated: {labels}")

        async def running() -> dict[str, Any] | None:
            task = await _task(docker, service_id)
            return task if task and task["Status"]["State"] == "running" else None

        await wait_for("task running", running, STEP_TIMEOUT_S, POLL_S)
        say.mark("running")
        say.say(
            f"alice's task is running on that node   (label → running {say.between('labelled', 'running'):.1f} s;"
            f" created → running {say.between('created', 'running'):.1f} s)"
        )

        say.say(f"alice stops her service; her node is idle (idle grace in this demo: {idle_grace_s:g} s)")
        await docker.services.delete(service_id)
        say.mark("idle")

        async def drained() -> dict[str, Any] | None:
            found = await node_of(docker, instance_id)
            return found if found and found["Spec"]["Availability"] == "drain" else None

        await wait_for("node drained", drained, STEP_TIMEOUT_S, POLL_S)
        say.mark("drained")
        say.say(f"node drained after {say.between('idle', 'drained'):.1f} s idle")

        await instance_in(ec2, instance_id, "shutting-down", "terminated")
        say.mark("terminated")
        say.say(f"instance {instance_id} terminated   (idle → terminated {say.between('idle', 'terminated'):.1f} s)")

        async def removed() -> bool:
            return await node_of(docker, instance_id) is None

        await wait_for("node removed", removed, STEP_TIMEOUT_S, POLL_S)
        say.mark("removed")
        say.say(f"node removed from the swarm   (terminated → removed {say.between('terminated', 'removed'):.1f} s)")

    say.table("act 1: cold start and scale-down", say.steps(STEPS))
