"""`make demo`: a narrated scale-up and scale-down on the local cloud, with the time each step took."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import aiodocker
import httpx
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import (
    FAST_AUTOSCALING,
    StartedDirector,
    new_ops_token,
    start_autoscaler,
    start_director,
)

from warmswarm_demos.workload import create_service, wait_for

GIB = 2**30
POLL_S = 0.1
STEP_TIMEOUT_S = 90.0


class Narrator:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: dict[str, float] = {}

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f} s] {text}", flush=True)

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    def between(self, first: str, second: str) -> float:
        return self.marks[second] - self.marks[first]


async def _instance(ec2: Any, instance_id: str | None = None) -> dict[str, Any] | None:
    instances = await asyncio.to_thread(aws.all_instances, ec2)
    if instance_id is not None:
        return instances.get(instance_id)
    return next(iter(instances.values()), None)


async def _node_of(docker: aiodocker.Docker, instance_id: str) -> dict[str, Any] | None:
    for node in await docker.nodes.list():
        if node["Description"].get("Engine", {}).get("Labels", {}).get("warmswarm.instance-id") == instance_id:
            return dict(node)
    return None


async def _task(docker: aiodocker.Docker, service_id: str) -> dict[str, Any] | None:
    tasks = await docker.tasks.list(filters={"service": service_id, "desired-state": "running"})
    return dict(tasks[0]) if tasks else None


def _decisions(url: str, ops_token: str) -> list[dict[str, Any]]:
    # The status names every owner: the autoscaler shows it to the ops token only.
    request = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {ops_token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        decisions: list[dict[str, Any]] = json.load(response)["decisions"]
        return decisions


async def scenario(sandbox: Sandbox, autoscaler_url: str, ops_token: str, say: Narrator) -> None:
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        nodes = await docker.nodes.list()
        say.say(f"the swarm has {len(nodes)} node: the manager, drained (it manages, it does not run work)")

        owner = {"user_id": "alice", "project_id": "p1", "node_id": "n1"}
        say.say("alice starts a service reserving 1 CPU and 1 GiB, pinned by node.labels.user_id==alice, …")
        say.mark("created")
        service_id = await create_service(
            docker, "alice-notebook", endpoints.sandbox_image, owner=owner, cpus=1, memory_bytes=GIB
        )

        async def pending() -> dict[str, Any] | None:
            task = await _task(docker, service_id)
            return task if task and task["Status"].get("Err") else None

        task, _ = await wait_for("task pending", pending, STEP_TIMEOUT_S, POLL_S)
        say.mark("pending")
        say.say(f"its task is pending: {task['Status']['Err']!r}")

        instance, _ = await wait_for("a launch", lambda: _instance(ec2), STEP_TIMEOUT_S, POLL_S)
        say.mark("launched")
        instance_id = instance["InstanceId"]
        launch = next((d for d in _decisions(autoscaler_url, ops_token) if d["action"].startswith("Launch")), None)
        say.say(
            f"autoscaler launched {instance_id}: {launch['reason'] if launch else instance['InstanceType']}"
            f"   (pending → launch call {say.between('pending', 'launched'):.1f} s)"
        )

        node, _ = await wait_for("node joined", lambda: _node_of(docker, instance_id), STEP_TIMEOUT_S, POLL_S)
        say.mark("joined")
        say.say(
            f"instance booted and its daemon joined the swarm as node {node['Description']['Hostname']},"
            f" drained until labelled   (launch → node joined {say.between('launched', 'joined'):.1f} s)"
        )

        async def labelled() -> dict[str, Any] | None:
            found = await _node_of(docker, instance_id)
            return found if found and found["Spec"].get("Labels", {}).get("user_id") == "alice" else None

        node, _ = await wait_for("node labelled", labelled, STEP_TIMEOUT_S, POLL_S)
        say.mark("labelled")
        labels = ", ".join(f"{k}={v}" for k, v in sorted(node["Spec"]["Labels"].items()))
        say.say(f"node labelled and activated: {labels}")

        async def running() -> dict[str, Any] | None:
            task = await _task(docker, service_id)
            return task if task and task["Status"]["State"] == "running" else None

        task, _ = await wait_for("task running", running, STEP_TIMEOUT_S, POLL_S)
        say.mark("running")
        say.say(
            f"alice's task is running on that node   (label → running {say.between('labelled', 'running'):.1f} s;"
            f" created → running {say.between('created', 'running'):.1f} s)"
        )

        grace_s = FAST_AUTOSCALING["AUTOSCALING_IDLE_GRACE_S"]
        say.say(f"alice stops her service; her node is idle (idle grace in this demo: {grace_s} s)")
        await docker.services.delete(service_id)
        say.mark("idle")

        async def drained() -> dict[str, Any] | None:
            found = await _node_of(docker, instance_id)
            return found if found and found["Spec"]["Availability"] == "drain" else None

        await wait_for("node drained", drained, STEP_TIMEOUT_S, POLL_S)
        say.mark("drained")
        say.say(f"node drained after {say.between('idle', 'drained'):.1f} s idle")

        async def terminated() -> dict[str, Any] | None:
            found = await _instance(ec2, instance_id)
            return found if found and found["State"]["Name"] in ("shutting-down", "terminated") else None

        await wait_for("instance terminated", terminated, STEP_TIMEOUT_S, POLL_S)
        say.mark("terminated")
        say.say(f"instance {instance_id} terminated   (idle → terminated {say.between('idle', 'terminated'):.1f} s)")

        async def removed() -> bool:
            return await _node_of(docker, instance_id) is None

        await wait_for("node removed", removed, STEP_TIMEOUT_S, POLL_S)
        say.mark("removed")
        say.say(f"node removed from the swarm   (terminated → removed {say.between('terminated', 'removed'):.1f} s)")

    print()
    print("step                      seconds")
    for label, first, second in (
        ("pending → launch call", "pending", "launched"),
        ("launch → node joined", "launched", "joined"),
        ("node joined → labelled", "joined", "labelled"),
        ("label → running", "labelled", "running"),
        ("idle → terminated", "idle", "terminated"),
        ("terminated → node removed", "terminated", "removed"),
    ):
        print(f"{label:<25} {say.between(first, second):7.1f}")


async def cache_scenario(sandbox: Sandbox, director: StartedDirector, say: Narrator) -> None:
    """Act 2: a user's data outlives their machine, comes back with them, and expires after its TTL."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    owner = {"user_id": "bea", "project_id": "thesis", "node_id": "notebook-1"}
    ttl_s = 10
    ops_token = director.ops_token
    # The platform's client: every call to /v1/services presents the director's API token.
    platform = {"Authorization": f"Bearer {director.api_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as api:
        say.say(f"ops turn the EBS cache on for group 'researchers' (TTL {ttl_s} s) — PUT with the ops token")
        answer = await api.put(
            "/v1/groups/researchers/properties",
            json={"ebs_cache_enabled": True, "cache_ttl_s": ttl_s, "cache_size_gib": 1},
            headers={"Authorization": f"Bearer {ops_token}"},
        )
        answer.raise_for_status()

        async def session(label: str, script: str) -> dict[str, Any]:
            request = {
                **owner,
                "image": endpoints.sandbox_image,
                "command": ["sh", "-c", script],
                "resources": {"cpus": 0.5, "memory_bytes": 256 * 2**20},
                "groups": ["researchers"],
            }
            (await api.post("/v1/services", json=request)).raise_for_status()
            say.mark(f"{label}-requested")
            seen: set[str] = set()

            async def running() -> dict[str, Any] | None:
                status: dict[str, Any] = (await api.get(f"/v1/services/{owner['node_id']}")).json()
                if status["status"] not in seen:
                    seen.add(status["status"])
                    reason = f": {status['reason']}" if status.get("reason") else ""
                    say.say(f"  director says {status['status']}{reason}")
                return status if status["status"] == "running" else None

            status, _ = await wait_for(f"{label} running", running, STEP_TIMEOUT_S, POLL_S)
            say.mark(f"{label}-running")
            return status

        async def end(label: str, instance_id: str) -> None:
            (await api.delete(f"/v1/services/{owner['node_id']}")).raise_for_status()

            async def terminated() -> dict[str, Any] | None:
                found = await _instance(ec2, instance_id)
                return found if found and found["State"]["Name"] in ("shutting-down", "terminated") else None

            await wait_for(f"{label} machine terminated", terminated, STEP_TIMEOUT_S, POLL_S)

        async def released(volume_id: str) -> dict[str, Any] | None:
            volumes = await asyncio.to_thread(aws.all_volumes, ec2)
            found = volumes.get(volume_id)
            tags = {t["Key"]: t["Value"] for t in (found or {}).get("Tags", [])}
            return found if found and found["State"] == "available" and "warmswarm:expires-at" in tags else None

        say.say("bea starts session 1 through the director; it writes a file to her cache (first time: cache miss)")
        first = await session("first", "echo 'draft chapter 3, 42 pages' > /cache/notes.txt; sleep 100000")
        say.say(
            f"session 1 runs on {first['instance_id']} with a new volume {first['volume_id']}"
            f"   (request → running {say.between('first-requested', 'first-running'):.1f} s)"
        )
        say.say("bea stops; her machine goes away, her volume stays")
        await end("session 1", first["instance_id"])
        volume, _ = await wait_for("volume released", lambda: released(first["volume_id"]), STEP_TIMEOUT_S, POLL_S)
        tags = {t["Key"]: t["Value"] for t in volume["Tags"]}
        say.say(
            f"volume {first['volume_id']} is available in {volume['AvailabilityZone']},"
            f" expires at {tags['warmswarm:expires-at']}"
        )

        say.say("bea comes back before the TTL; session 2 reads the file")
        second = await session("second", "cat /cache/notes.txt; sleep 100000")
        placed = await _instance(ec2, second["instance_id"])
        zone = placed["Placement"]["AvailabilityZone"] if placed else "?"
        say.say(
            f"session 2 runs on a new machine {second['instance_id']} in {zone} with the same volume"
            f" {second['volume_id']}   (request → running {say.between('second-requested', 'second-running'):.1f} s)"
        )
        (machine,) = [i for i in sandbox.status()["instances"] if i["instance_id"] == second["instance_id"]]
        async with aiodocker.Docker(url=machine["docker_host"]) as node_docker:
            containers = await node_docker.containers.list()
            output = "".join(await containers[0].log(stdout=True)) if containers else ""
        say.say(f"her container printed: {output.strip()!r} — the data survived the machine")

        say.say(f"bea stops again and does not come back; the janitor deletes the volume after {ttl_s} s")
        await end("session 2", second["instance_id"])
        await wait_for("volume released", lambda: released(second["volume_id"]), STEP_TIMEOUT_S, POLL_S)
        say.mark("released")

        async def deleted() -> bool:
            return second["volume_id"] not in await asyncio.to_thread(aws.all_volumes, ec2)

        await wait_for("volume deleted", deleted, STEP_TIMEOUT_S + ttl_s, POLL_S)
        say.mark("deleted")
        say.say(f"volume {second['volume_id']} deleted {say.between('released', 'deleted'):.1f} s after its release")

    print()
    print("cache step                         seconds")
    print(f"first session: request → running  {say.between('first-requested', 'first-running'):7.1f}")
    print(f"returning user: request → running {say.between('second-requested', 'second-running'):7.1f}")
    print(f"released → deleted (TTL {ttl_s} s)     {say.between('released', 'deleted'):7.1f}")


def main() -> int:
    say = Narrator()
    print("warmswarm demo: a real swarm on this machine; moto (behind a strict AWS layer) plays EC2\n")
    with tempfile.TemporaryDirectory(prefix="wsdemo-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=1.0)
        try:
            say.say("starting the local cloud: moto + strict EC2 layer, Redis, a swarm manager, the boot watcher")
            sandbox.start()
            say.say("starting the autoscaler as its own process")
            ops_token = new_ops_token()
            url = start_autoscaler(sandbox, settings={"WARMSWARM_CLUSTER": "demo"}, ops_token=ops_token)
            director = start_director(sandbox, autoscaling_url=url, ops_token=ops_token)
            say.say(f"autoscaler ready at {url}, director at {director.url}")
            print("\n— act 1: a pending service gets a machine, and the machine goes away after —")
            asyncio.run(scenario(sandbox, url, ops_token, say))
            print("\n— act 2: a user's data outlives her machine and comes back with her —")
            asyncio.run(cache_scenario(sandbox, director, say))
        except (TimeoutError, OSError, httpx.HTTPError) as error:
            print(f"\ndemo failed: {error}; logs are in {state}/cloud/logs", file=sys.stderr)
            return 1
        finally:
            say.say("stopping everything the demo started")
            sandbox.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
