"""Two autoscaler processes on one cluster and the sandbox's Redis: one acts; killed, the other takes over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiodocker
import httpx
import pytest
from warmswarm_demos.workload import create_service, running_task, wait_for
from warmswarm_models import CLUSTER_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import autoscaler_env, free_port, new_ops_token, wait_ready

pytestmark = pytest.mark.e2e

CLUSTER = "e2e-leader"
LOCK_TTL_S = 3.0
RENEW_INTERVAL_S = 0.5
# A dead leader's lock expires within the ttl; the follower tries every renew interval, and its
# first cycle needs a moment more to show in /v1/status.
TAKEOVER_TIMEOUT_S = LOCK_TTL_S + RENEW_INTERVAL_S + 30.0  # generous: a takeover that never comes, not a slow one
SETTINGS = {
    "WARMSWARM_CLUSTER": CLUSTER,
    "AUTOSCALING_LEADER_LOCK_TTL_S": str(LOCK_TTL_S),
    "AUTOSCALING_LEADER_RENEW_INTERVAL_S": str(RENEW_INTERVAL_S),
    "AUTOSCALING_IDLE_GRACE_S": "3",
}
GIB = 2**30
# Both replicas' ops token: their status names every owner, and is shown to it only.
OPS_TOKEN = new_ops_token()


@dataclass
class Replica:
    name: str
    url: str
    pid: int


@dataclass
class LeaderWatch:
    """Polls every replica's /v1/status together, all through the test: two leaders at once is a failure."""

    replicas: list[Replica]
    rounds: int = 0
    both: list[dict[str, bool]] = field(default_factory=list)
    leaders: dict[str, bool | None] = field(default_factory=dict)  # None: did not answer (dead)

    async def run(self, client: httpx.AsyncClient) -> None:
        while True:
            answers = await asyncio.gather(*(_leader_flag(client, r.url) for r in self.replicas))
            self.leaders = {r.name: flag for r, flag in zip(self.replicas, answers, strict=True)}
            if sum(bool(flag) for flag in answers) > 1:
                self.both.append({name: bool(flag) for name, flag in self.leaders.items()})
            self.rounds += 1
            await asyncio.sleep(0.05)

    def leader(self) -> Replica | None:
        """The one replica saying it leads while all others answer that they do not."""
        flags = self.leaders
        leading = [r for r in self.replicas if flags.get(r.name)]
        if len(leading) == 1 and all(flags.get(r.name) is not None for r in self.replicas if r is not leading[0]):
            return leading[0]
        return None


async def _leader_flag(client: httpx.AsyncClient, url: str) -> bool | None:
    try:
        response = await client.get(f"{url}/v1/status", timeout=2.0)
    except httpx.HTTPError:
        return None
    return bool(response.json()["leader"])


def start_replica(sandbox: Sandbox, name: str) -> Replica:
    # As services.start_autoscaler, keeping the pid: the test kills the leader with SIGKILL, not SIGTERM.
    port = free_port()
    env = autoscaler_env(sandbox.endpoints, port, SETTINGS, ops_token=OPS_TOKEN)
    pid = sandbox.spawn(name, [sys.executable, "-m", "warmswarm_autoscaling"], env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, 60)  # a follower is ready too: it reaches Redis
    return Replica(name, url, pid)


def cluster_instances(ec2: Any, *states: str) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


async def get_json(client: httpx.AsyncClient, url: str) -> dict[str, Any]:
    response = await client.get(url, timeout=5.0)
    body: dict[str, Any] = response.json()
    return body


async def run_instances_ok(client: httpx.AsyncClient, endpoints: Endpoints) -> int:
    """RunInstances calls the strict EC2 layer answered with success, since the sandbox started."""
    calls = await get_json(client, f"{endpoints.ec2_endpoint_url}/strict/calls")
    return int(calls["answers"].get("RunInstances", {}).get("ok", 0))


@pytest.fixture
def replicas(sandbox: Sandbox, ec2: Any) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    try:
        for name in ("leader-a", "leader-b"):
            started.append(start_replica(sandbox, name))
        yield started
    finally:
        for replica in started:
            sandbox.kill(replica.name)
        # Whatever a failed run left of this cluster's machines: nothing of ours outlives the test.
        leftovers = [i["InstanceId"] for i in cluster_instances(ec2, "pending", "running", "stopping", "stopped")]
        if leftovers:
            ec2.terminate_instances(InstanceIds=leftovers)


@pytest.fixture
async def docker(endpoints: Endpoints) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=endpoints.docker_host)
    yield client
    for service in await client.services.list():
        if service["Spec"]["Name"].startswith("e2e-leader-"):
            await client.services.delete(service["ID"])
    await client.close()


async def test_one_leader_acts_and_a_follower_takes_over_when_it_dies(
    sandbox: Sandbox, replicas: list[Replica], docker: aiodocker.Docker, ec2: Any, endpoints: Endpoints
) -> None:
    watch = LeaderWatch(replicas)
    # It presents the ops token to every URL it is given (the strict EC2 layer's /strict/calls ignores it).
    async with httpx.AsyncClient(trust_env=False, headers={"Authorization": f"Bearer {OPS_TOKEN}"}) as client:
        watcher = asyncio.create_task(watch.run(client))
        try:
            await _scenario(sandbox, watch, client, docker, ec2, endpoints)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    assert watch.rounds > 50, "the leader watch hardly polled"
    assert not watch.both, f"two leaders at once: {watch.both[:3]}"


async def _scenario(
    sandbox: Sandbox,
    watch: LeaderWatch,
    client: httpx.AsyncClient,
    docker: aiodocker.Docker,
    ec2: Any,
    endpoints: Endpoints,
) -> None:
    async def one_leader() -> Replica | None:
        return watch.leader()

    leader, _ = await wait_for("exactly one leader", one_leader, timeout_s=LOCK_TTL_S + 10)
    (follower,) = [r for r in watch.replicas if r is not leader]
    launched_before = await run_instances_ok(client, endpoints)
    assert cluster_instances(ec2, "pending", "running") == []

    # Work both replicas see: exactly one machine is launched for it, by the leader.
    owner = {"user_id": f"lea-{uuid.uuid4().hex[:6]}", "project_id": "p1"}
    service_id = await create_service(
        docker, f"e2e-leader-{uuid.uuid4().hex[:6]}", endpoints.sandbox_image, owner=owner, cpus=1, memory_bytes=GIB
    )
    task, _ = await wait_for("task running", lambda: running_task(docker, service_id), timeout_s=90)
    (instance,) = cluster_instances(ec2, "pending", "running")
    assert await run_instances_ok(client, endpoints) - launched_before == 1
    assert any(
        d["action"].startswith("Launch") for d in (await get_json(client, f"{leader.url}/v1/status"))["decisions"]
    )
    # A follower runs no cycles, so it decides nothing; it is ready because it reaches Redis.
    assert (await get_json(client, f"{follower.url}/v1/status"))["decisions"] == []
    follower_ready = await get_json(client, f"{follower.url}/ready")
    assert follower_ready["ready"] is True
    assert follower_ready["leader"] is False
    # An operator gives the CLI every replica's URL, the follower's first: it shows the leader's status.
    cli = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "warmswarm_cli", "status", "--json"),
        env={**os.environ, "AUTOSCALING_URL": f"{follower.url},{leader.url}", "OPS_TOKEN": OPS_TOKEN},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(cli.communicate(), timeout=60)
    assert cli.returncode == 0, err.decode()
    shown = json.loads(out)
    assert shown["leader"] is True
    assert any(d["action"].startswith("Launch") for d in shown["decisions"])

    # The leader dies without a word (no release): the follower may lead only once the lock expired.
    os.kill(leader.pid, signal.SIGKILL)
    killed_at = time.monotonic()

    async def follower_leads() -> bool:
        return watch.leaders.get(follower.name) is True and watch.leaders.get(leader.name) is None

    # The time it took is a figure to report (the lock's ttl bounds it), not to assert on a shared machine:
    # the wait only guards against a takeover that never comes.
    await wait_for("the follower leads", follower_leads, timeout_s=TAKEOVER_TIMEOUT_S, interval_s=0.05)
    takeover_s = time.monotonic() - killed_at
    print(f"takeover after SIGKILL of the leader: {takeover_s:.2f} s (lock ttl {LOCK_TTL_S:g} s)")
    sandbox.kill(leader.name)  # reap it and forget its record

    # The new leader carries on: once the work is gone, the machine goes away — and nothing is relaunched.
    await docker.services.delete(service_id)

    async def node_removed() -> bool:
        return task["NodeID"] not in {n["ID"] for n in await docker.nodes.list()}

    await wait_for("node removed by the new leader", node_removed, timeout_s=60)
    (gone,) = [i for i in cluster_instances(ec2) if i["InstanceId"] == instance["InstanceId"]]
    assert gone["State"]["Name"] in ("shutting-down", "terminated")
    decisions = [d["action"] for d in (await get_json(client, f"{follower.url}/v1/status"))["decisions"]]
    assert f"Terminate {instance['InstanceId']}" in decisions
    assert not any(d.startswith("Launch") for d in decisions)
    assert await run_instances_ok(client, endpoints) - launched_before == 1
