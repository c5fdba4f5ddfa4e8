"""The stack for real: both images built (a local Debian base, no registry), docker-compose.yml deployed with
`docker stack deploy` onto the sandbox's swarm, two autoscaler replicas electing one leader, and a session created
through the stack's director with the platform's integer ids getting a machine, running, and going away."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as redis
from warmswarm_demos.stack import DeployedStack, deploy_stack
from warmswarm_demos.workload import wait_for
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.engine import Engine

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "e2e-stack"
MIB = 2**20


@pytest.fixture(scope="module")
def stack_sandbox(sandbox_dir: Path) -> Iterator[Sandbox]:
    # Its own sandbox: the stack makes its manager take work, which the other tests' manager never does.
    cloud = Sandbox(sandbox_dir / "stack")
    cloud.start()
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture(scope="module")
def stack(stack_sandbox: Sandbox, stack_inputs_prepared: str) -> DeployedStack:
    # The sandbox starts first, while the session's background preparation may still be making the base and wheels.
    print(f"background preparation: {stack_inputs_prepared.strip()}")
    deployed = deploy_stack(stack_sandbox, REPO, cluster=CLUSTER, say=print)
    built = "cached" if deployed.images.from_cache else "built"
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in deployed.images.steps_s.items())
    print(f"images {built} ({steps}); sizes {deployed.images.sizes_bytes}")
    return deployed


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=10.0) as client:
        yield client


async def test_the_stacks_two_autoscaler_replicas_elect_one_leader_on_the_sandboxs_redis(
    stack: DeployedStack, stack_sandbox: Sandbox, http: httpx.AsyncClient
) -> None:
    ops = {"Authorization": f"Bearer {stack.ops_token}"}
    assert len(stack.autoscaler_urls) == 2

    async def one_leader() -> dict[str, Any] | None:
        answers = {url: (await http.get(f"{url}/v1/status", headers=ops)).json() for url in stack.autoscaler_urls}
        leaders = [url for url, status in answers.items() if status["leader"] is True]
        followers = [url for url, status in answers.items() if status["leader"] is False]
        return {"leader": leaders[0], "follower": followers[0]} if len(leaders) == len(followers) == 1 else None

    roles, _ = await wait_for("exactly one leader", one_leader, timeout_s=60)
    leading = (await http.get(f"{roles['leader']}/v1/status", headers=ops)).json()
    assert leading["cluster"] == CLUSTER
    assert leading["last_cycle"]["ok"] is True
    # The follower is ready (it reaches Redis, so it can take over) and names the holder of the lock, which is
    # the key in the sandbox's own Redis: the stack uses it through the relay.
    follower = (await http.get(f"{roles['follower']}/ready")).json()
    assert follower["ready"] is True
    assert follower["leader"] is False
    store = redis.Redis.from_url(stack_sandbox.endpoints.redis_url, decode_responses=True)
    try:
        holder = await store.get(f"warmswarm:autoscaling:{CLUSTER}:leader")
    finally:
        await store.aclose()
    assert holder is not None
    assert holder == follower["leader_seen"]


async def test_a_session_with_integer_ids_gets_a_machine_runs_and_goes_away(
    stack: DeployedStack, stack_sandbox: Sandbox, http: httpx.AsyncClient
) -> None:
    platform = {"Authorization": f"Bearer {stack.api_token}"}
    ops = {"Authorization": f"Bearer {stack.ops_token}"}
    director = stack.director_url
    ec2 = aws.ec2_client(stack_sandbox.endpoints.ec2_endpoint_url, stack_sandbox.endpoints.aws_region)
    assert (
        await http.put(f"{director}/v1/groups/7/properties", json={"ebs_cache_enabled": False}, headers=ops)
    ).is_success

    body = {
        "user_id": 42,
        "project_id": 3,
        "node_id": 9001,
        "groups": [7],
        "image": stack_sandbox.endpoints.sandbox_image,
        "command": ["sleep", "100000"],
        "resources": {"cpus": 1, "memory_bytes": 512 * MIB},
    }
    created = await http.post(f"{director}/v1/services", json=body, headers=platform)
    assert created.status_code == 201, created.text
    assert created.json()["node_id"] == "9001"

    reasons: list[str] = []

    async def running() -> dict[str, Any] | None:
        status: dict[str, Any] = (await http.get(f"{director}/v1/services/9001", headers=platform)).json()
        reasons.append(str(status["reason"]))
        return status if status["status"] == "running" else None

    status, _ = await wait_for("the session running", running, timeout_s=120, interval_s=0.5)
    # The director reached the leader through the swarm's DNS and never had to give up on it.
    assert not [reason for reason in reasons if "unreachable" in reason or "only followers" in reason], reasons
    # A machine of the stack's cluster, its node labelled for the owner the integers name (as text).
    instance = aws.all_instances(ec2)[status["instance_id"]]
    assert {"Key": "warmswarm:cluster", "Value": CLUSTER} in instance["Tags"]
    node = Engine(stack_sandbox.endpoints.docker_host).get(f"/nodes/{status['node']}")
    labels = node["Spec"]["Labels"]
    assert (labels["user_id"], labels["project_id"], labels["node_id"]) == ("42", "3", "9001")

    deleted = await http.delete(f"{director}/v1/services/9001", headers=platform)
    assert deleted.status_code == 204

    async def terminated() -> bool:
        return aws.all_instances(ec2)[status["instance_id"]]["State"]["Name"] in ("shutting-down", "terminated")

    await wait_for("the machine terminated", terminated, timeout_s=90, interval_s=0.5)
    gone = await http.get(f"{director}/v1/services/9001", headers=platform)
    assert gone.status_code == 404
