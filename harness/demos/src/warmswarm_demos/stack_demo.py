"""`make stack-demo`: docker-compose.yml deployed as a stack on the local cloud, a leader elected, a session served."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.narration import Narrator
from warmswarm_demos.stack import DeployedStack, deploy_stack
from warmswarm_demos.workload import wait_for

REPO = Path(__file__).resolve().parents[4]
GROUP = 7
# As the platform sends them: integers.
SESSION = {"user_id": 42, "project_id": 3, "node_id": 9001, "groups": [GROUP]}
STEP_TIMEOUT_S = 120.0
MIB = 2**20


async def leader_of(http: httpx.AsyncClient, stack: DeployedStack) -> dict[str, bool] | None:
    """Each replica's answer to "do you lead?", once every replica answers and exactly one leads."""
    flags = {}
    for url in stack.autoscaler_urls:
        try:
            answer = await http.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {stack.ops_token}"})
        except httpx.HTTPError:
            return None
        flags[url] = answer.status_code == 200 and answer.json()["leader"] is True
    return flags if sum(flags.values()) == 1 else None


async def scenario(sandbox: Sandbox, stack: DeployedStack, say: Narrator) -> None:
    platform = {"Authorization": f"Bearer {stack.api_token}"}
    ops = {"Authorization": f"Bearer {stack.ops_token}"}
    ec2 = aws.ec2_client(sandbox.endpoints.ec2_endpoint_url, sandbox.endpoints.aws_region)
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
        flags, took = await wait_for("one leader", lambda: leader_of(http, stack), timeout_s=STEP_TIMEOUT_S)
        leader = next(url for url, leads in flags.items() if leads)
        slot = stack.autoscaler_urls.index(leader) + 1
        say.say(
            f"{len(flags)} autoscaler replicas answer; replica {slot} holds the Redis lock and leads ({took:.1f} s)"
        )
        follower = next(url for url in flags if url != leader)
        ready = (await http.get(f"{follower}/ready")).json()
        say.say(f"  the other follows: /ready {ready} (ready, so it can take over)")

        await http.put(
            f"{stack.director_url}/v1/groups/{GROUP}/properties", json={"ebs_cache_enabled": False}, headers=ops
        )
        body = {**SESSION, "image": sandbox.endpoints.sandbox_image, "command": ["sleep", "100000"]}
        body["resources"] = {"cpus": 1, "memory_bytes": 512 * MIB}
        say.say(f"the platform asks the stack's director for a session: {SESSION} (ids as JSON integers)")
        say.mark("asked")
        created = await http.post(f"{stack.director_url}/v1/services", json=body, headers=platform)
        say.say(f"  HTTP {created.status_code}: {created.json()}")
        node_id = created.json()["node_id"]
        seen: set[str] = set()

        async def running() -> dict[str, Any] | None:
            status: dict[str, Any] = (
                await http.get(f"{stack.director_url}/v1/services/{node_id}", headers=platform)
            ).json()
            line = f"{status['status']}: {status['reason']}" if status["reason"] else status["status"]
            if line not in seen:
                seen.add(line)
                say.say(f"  the director says {line}")
            return status if status["status"] == "running" else None

        status, _ = await wait_for("the session running", running, timeout_s=STEP_TIMEOUT_S, interval_s=0.5)
        say.mark("running")
        instance = aws.all_instances(ec2)[status["instance_id"]]
        say.say(
            f"running on {instance['InstanceType']} {status['instance_id']}"
            f" {say.between('asked', 'running'):.1f} s after the request"
        )

        # Launched in a batch, the machine was bound to the owner when it joined; its tags follow a cycle later.
        async def owner_tags() -> dict[str, str] | None:
            found = aws.all_instances(ec2)[status["instance_id"]]
            tags = {tag["Key"]: tag["Value"] for tag in found.get("Tags", [])}
            return tags if "user_id" in tags else None

        tags, tagged_s = await wait_for("the owner's tags", owner_tags, timeout_s=STEP_TIMEOUT_S, interval_s=0.5)
        say.say(
            f"  its instance carries its owner's tags (user_id={tags['user_id']}, node_id={tags['node_id']})"
            f" {tagged_s:.1f} s later: the bill by owner"
        )

        await http.delete(f"{stack.director_url}/v1/services/{node_id}", headers=platform)
        say.say("the session ends: the director removes the service")

        async def terminated() -> bool:
            state = aws.all_instances(ec2)[status["instance_id"]]["State"]["Name"]
            return state in ("shutting-down", "terminated")

        _, gone_s = await wait_for("the machine terminated", terminated, timeout_s=STEP_TIMEOUT_S, interval_s=0.5)
        say.say(f"its machine goes away after the idle grace: instance terminated {gone_s:.1f} s later")


def main() -> int:
    say = Narrator()
    with tempfile.TemporaryDirectory(prefix="wsbx-") as state:
        sandbox = Sandbox(Path(state) / "cloud")
        say.say("starting the local cloud: moto behind the strict EC2 layer, Redis, a swarm manager")
        sandbox.start()
        try:
            stack = deploy_stack(sandbox, REPO, say=say.say)
            built = "loaded from the cache" if stack.images.from_cache else "built"
            steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in stack.images.steps_s.items())
            sizes = ", ".join(f"{name} {size / 1e6:.0f} MB" for name, size in stack.images.sizes_bytes.items())
            say.say(f"images {built} ({steps}); {sizes}")
            services = subprocess.run(
                ["docker", "stack", "services", stack.name, "--format", "{{.Name}} {{.Replicas}}"],
                env={"DOCKER_HOST": sandbox.endpoints.docker_host, "PATH": "/usr/local/bin:/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            say.say("docker stack services: " + "; ".join(services.split("\n")).strip("; "))
            asyncio.run(scenario(sandbox, stack, say))
        finally:
            say.say("stopping the local cloud")
            sandbox.stop()
    say.say(f"done in {time.monotonic() - say.started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
