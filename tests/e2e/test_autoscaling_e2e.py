"""End to end in the sandbox: real swarm daemons, moto as EC2, the autoscaler as its own process."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiodocker
import pytest
from warmswarm_demos.workload import create_service, running_task, running_task_of, wait_for
from warmswarm_models import CLUSTER_TAG, NODE_LABEL_AVAILABILITY_ZONE, NODE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_TYPE
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import new_ops_token, start_autoscaler

pytestmark = pytest.mark.e2e

CLUSTER = "e2e"
GIB = 2**30


# The status names every owner: the autoscaler shows it to the ops token only.
OPS_TOKEN = new_ops_token()


@pytest.fixture(scope="module")
def autoscaler_url(sandbox: Sandbox) -> Iterator[str]:
    url = start_autoscaler(
        sandbox,
        name="autoscaling-e2e",
        settings={"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_IDLE_GRACE_S": "3"},
        ops_token=OPS_TOKEN,
    )
    yield url
    sandbox.kill("autoscaling-e2e")


@pytest.fixture
async def docker(endpoints: Endpoints) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=endpoints.docker_host)
    yield client
    for service in await client.services.list():
        if service["Spec"]["Name"].startswith("e2e-"):
            await client.services.delete(service["ID"])
    await client.close()


def status(url: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {OPS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        body: dict[str, Any] = json.load(response)
        return body


def cluster_instances(ec2: Any, *states: str) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}]
    if states:
        filters.append({"Name": "instance-state-name", "Values": list(states)})
    pages = ec2.describe_instances(Filters=filters)["Reservations"]
    return [i for r in pages for i in r["Instances"]]


async def create_global_service(docker: aiodocker.Docker, name: str, image: str) -> str:
    template = {"ContainerSpec": {"Image": image, "Command": ["sleep", "100000"], "StopGracePeriod": 10**9}}
    service = await docker.services.create(template, name=name, mode={"Global": {}})
    return str(service["ID"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def test_pending_service_gets_a_labelled_node_which_goes_away_after(
    autoscaler_url: str, docker: aiodocker.Docker, ec2: Any, endpoints: Endpoints
) -> None:
    user = unique("alice")
    owner = {"user_id": user, "project_id": "p1", "node_id": unique("n")}
    # A monitoring agent on every node, as most swarms have: it must not keep the new node alive.
    agent_id = await create_global_service(docker, unique("e2e-agent"), endpoints.sandbox_image)
    service_id = await create_service(
        docker, unique("e2e-up"), endpoints.sandbox_image, owner=owner, cpus=1, memory_bytes=GIB
    )

    task, _ = await wait_for("task running", lambda: running_task(docker, service_id), timeout_s=60)
    node = await docker.nodes.inspect(node_id=task["NodeID"])

    async def agent_on_the_node() -> bool:
        tasks = await docker.tasks.list(filters={"service": agent_id, "node": node["ID"]})
        return any(t["Status"]["State"] == "running" for t in tasks)

    await wait_for("the agent running on the new node", agent_on_the_node, timeout_s=30)
    labels = node["Spec"]["Labels"]
    assert {k: labels.get(k) for k in owner} == owner
    instance_id = labels[NODE_LABEL_INSTANCE_ID]
    assert node["Description"]["Engine"]["Labels"]["warmswarm.instance-id"] == instance_id

    # Launched in a batch, the machine was bound to this owner when it joined; its owner tags follow in a
    # later cycle (BindMachine, a few a cycle): wait for them rather than read them once.
    async def tagged_for_its_owner() -> dict[str, str] | None:
        (instance,) = [i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id]
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        return tags if "user_id" in tags else None

    tags, _ = await wait_for("the instance tagged for its owner", tagged_for_its_owner, timeout_s=30, interval_s=1.0)
    (instance,) = [i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id]
    assert tags["user_id"] == user
    assert tags["node_id"] == owner["node_id"]
    assert labels[NODE_LABEL_INSTANCE_TYPE] == instance["InstanceType"] == "t3.medium"  # cheapest fit
    assert labels[NODE_LABEL_AVAILABILITY_ZONE] == instance["Placement"]["AvailabilityZone"]

    await docker.services.delete(service_id)

    async def node_removed() -> bool:
        ids = {n["ID"] for n in await docker.nodes.list()}
        return node["ID"] not in ids

    await wait_for("node removed", node_removed, timeout_s=60)
    (gone,) = [i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id]
    assert gone["State"]["Name"] in ("shutting-down", "terminated")
    decisions = [d["action"] for d in status(autoscaler_url)["decisions"]]
    assert f"Terminate {instance_id}" in decisions
    assert any(d.startswith(f"Drain {node['ID']}") for d in decisions)


async def test_two_users_never_share_a_node(
    autoscaler_url: str, docker: aiodocker.Docker, endpoints: Endpoints
) -> None:
    owners = [{"user_id": unique("bob"), "project_id": "p"}, {"user_id": unique("carol"), "project_id": "p"}]
    # Small reservations: both would fit on one machine if ownership allowed it.
    services = [
        await create_service(
            docker, unique("e2e-two"), endpoints.sandbox_image, owner=o, cpus=0.25, memory_bytes=GIB // 4
        )
        for o in owners
    ]
    tasks = [(await wait_for("task running", running_task_of(docker, s), timeout_s=60))[0] for s in services]
    node_ids = [t["NodeID"] for t in tasks]
    assert node_ids[0] != node_ids[1]
    for owner, node_id in zip(owners, node_ids, strict=True):
        node = await docker.nodes.inspect(node_id=node_id)
        assert node["Spec"]["Labels"]["user_id"] == owner["user_id"]


async def test_impossible_request_launches_nothing_and_says_why(
    autoscaler_url: str, docker: aiodocker.Docker, ec2: Any, endpoints: Endpoints
) -> None:
    before = {i["InstanceId"] for i in cluster_instances(ec2, "pending", "running")}
    too_big = await create_service(
        docker, unique("e2e-big"), endpoints.sandbox_image, owner={"user_id": unique("dave")}, cpus=512
    )
    wrong_place = await create_service(
        docker,
        unique("e2e-mgr"),
        endpoints.sandbox_image,
        owner={"user_id": unique("erin")},
        constraints=["node.role==manager"],
    )

    def reasons() -> dict[str, str]:
        return {p["service"]: p["reason"] for p in status(autoscaler_url)["pending"] if p["unschedulable"]}

    async def both_reported() -> dict[str, str] | None:
        found = reasons()
        names = {s["Spec"]["Name"] for s in await docker.services.list() if s["ID"] in (too_big, wrong_place)}
        return found if names <= set(found) else None

    found, _ = await wait_for("both reported unschedulable", both_reported, timeout_s=30)
    by_kind = sorted(found.values())
    assert any("no allowed instance type fits" in r and "512 CPU" in r for r in by_kind)
    assert any("node.role==manager" in r for r in by_kind)
    after = {i["InstanceId"] for i in cluster_instances(ec2, "pending", "running")}
    assert after <= before  # nothing was launched for them
