"""End to end: an idle owner's machine is kept stopped (warm), comes back to its owner with the same node and data,
and goes cold when its warm tier ends; no other owner ever gets it."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiodocker
import httpx
import pytest
from warmswarm_demos import sessions
from warmswarm_demos.sessions import container_output, described, instance_in, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_models import CLUSTER_TAG, INSTANCE_WARM_UNTIL_TAG, VOLUME_EXPIRES_AT_TAG, parse_timestamp
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "tiers-e2e"
TTL_S = 5  # the cache volume's, once its machine is gone
WARM_S = 45  # the machine's, once idle: long enough for the owner to come back within it
OPS_TOKEN = new_ops_token()


@pytest.fixture(scope="module")
def autoscaler_url(sandbox: Sandbox) -> Iterator[str]:
    url = start_autoscaler(
        sandbox,
        name="autoscaling-tiers",
        settings={"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_IDLE_GRACE_S": "2"},
        ops_token=OPS_TOKEN,
    )
    yield url
    sandbox.kill("autoscaling-tiers")


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, autoscaler_url: str) -> Iterator[StartedDirector]:
    yield start_director(sandbox, name="director-tiers", autoscaling_url=autoscaler_url, ops_token=OPS_TOKEN)
    sandbox.kill("director-tiers")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as client:
        groups = {
            "warm": {"ebs_cache_enabled": True, "cache_ttl_s": TTL_S, "cache_size_gib": 1, "warm_ttl_s": WARM_S},
            "plain": {"ebs_cache_enabled": False},
        }
        for group, properties in groups.items():
            answer = await client.put(f"/v1/groups/{group}/properties", json=properties, headers=ops)
            assert answer.status_code == 200, answer.text
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def start_session(
    api: httpx.AsyncClient, endpoints: Endpoints, owner: dict[str, str], group: str, script: str
) -> dict[str, Any]:
    return await sessions.start_session(api, endpoints.sandbox_image, owner, group, script, timeout_s=90)


async def swarm_node(endpoints: Endpoints, node_id: str) -> dict[str, Any]:
    async with aiodocker.Docker(url=endpoints.docker_host) as manager:
        node = dict(await manager.nodes.inspect(node_id=node_id))
        return node


def machines(autoscaler_url: str) -> dict[str, dict[str, Any]]:
    request = urllib.request.Request(f"{autoscaler_url}/v1/status", headers={"Authorization": f"Bearer {OPS_TOKEN}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return {m["instance_id"]: m for m in body["instances"]}


async def test_a_returning_owner_gets_the_same_machine_node_and_data_back_and_it_goes_cold_after_its_warm_tier(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox, autoscaler_url: str
) -> None:
    owner = {"user_id": unique("wes"), "project_id": "p1", "node_id": unique("n")}
    other = {"user_id": unique("oli"), "project_id": "p1", "node_id": unique("n")}
    secret = unique("data")

    first = await start_session(api, endpoints, owner, "warm", f"echo {secret} > /cache/notes; sleep 100000")
    instance_id, volume_id = first["instance_id"], first["volume_id"]
    assert volume_id is not None
    node_id = (await swarm_node(endpoints, first["node"]))["ID"]

    # The session ends: the idle machine is stopped, not terminated; its node stays with its labels.
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    stopped = await instance_in(ec2, instance_id, "stopped")
    warm_until = parse_timestamp(tags_of(stopped)[INSTANCE_WARM_UNTIL_TAG])
    assert warm_until is not None
    attached = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Attachments"]
    assert [a["InstanceId"] for a in attached] == [instance_id]  # the cache stays on the stopped machine
    node = await swarm_node(endpoints, node_id)
    assert node["Spec"]["Labels"]["user_id"] == owner["user_id"]

    async def shown_warm() -> dict[str, Any] | None:
        shown = machines(autoscaler_url).get(instance_id)
        return shown if shown is not None and shown["tier"] == "warm" else None

    shown, _ = await wait_for("the status shows the machine warm", shown_warm, timeout_s=30)
    assert parse_timestamp(shown["tier_until"]) == warm_until

    # Another owner meanwhile gets a machine of their own, never the stopped one.
    theirs = await start_session(api, endpoints, other, "plain", "sleep 100000")
    assert theirs["instance_id"] != instance_id
    assert described(ec2, instance_id)["State"]["Name"] == "stopped"

    # The owner comes back within the warm tier: the same instance is started, the same node returns.
    second = await start_session(api, endpoints, owner, "warm", "cat /cache/notes; sleep 100000")
    assert second["instance_id"] == instance_id
    assert any("resuming your machine" in reason for reason in second["reasons"]), second["reasons"]
    assert (await swarm_node(endpoints, second["node"]))["ID"] == node_id
    assert second["volume_id"] == volume_id
    assert secret in await container_output(sandbox, instance_id, secret)
    owned = ec2.describe_instances(Filters=[{"Name": "tag:user_id", "Values": [owner["user_id"]]}])["Reservations"]
    assert [i["InstanceId"] for r in owned for i in r["Instances"]] == [instance_id], "no second launch"

    # Idle again, stopped again; once the warm tier is over the machine goes and the volume follows its TTL.
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    assert (await api.delete(f"/v1/services/{other['node_id']}")).status_code == 204
    stopped = await instance_in(ec2, instance_id, "stopped")
    warm_until = parse_timestamp(tags_of(stopped)[INSTANCE_WARM_UNTIL_TAG])
    assert warm_until is not None
    await instance_in(ec2, instance_id, "shutting-down", "terminated", timeout_s=WARM_S + 60)

    async def released() -> dict[str, Any] | None:
        volumes = ec2.describe_volumes(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}])["Volumes"]
        found = next((v for v in volumes if v["VolumeId"] == volume_id), None)
        return found if found and VOLUME_EXPIRES_AT_TAG in tags_of(found) else None

    kept, _ = await wait_for("the volume released with its cache TTL", released, timeout_s=60)
    expires_at = parse_timestamp(tags_of(kept)[VOLUME_EXPIRES_AT_TAG])
    assert expires_at is not None
    assert expires_at >= warm_until + TTL_S - 1  # released after the warm tier, not at the stop
