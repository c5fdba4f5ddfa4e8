"""End to end: a first session claims a stopped machine of the warm buffer, the buffer refills, and the next owner
gets a machine nobody used."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos.sessions import container_output, start_session, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_models import CLUSTER_TAG, INSTANCE_BUFFER_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "buffer-e2e"
OPS_TOKEN = new_ops_token()


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, endpoints: Endpoints) -> Iterator[StartedDirector]:
    zone = f"{sandbox.region}a"  # one zone: a buffer of one machine
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": zone,
        "AUTOSCALING_WARM_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    url = start_autoscaler(sandbox, name="autoscaling-buffer", settings=settings, ops_token=OPS_TOKEN)
    yield start_director(sandbox, name="director-buffer", autoscaling_url=url, ops_token=OPS_TOKEN)
    sandbox.kill("director-buffer")
    sandbox.kill("autoscaling-buffer")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as client:
        for group, properties in {"cached": {"ebs_cache_enabled": True, "cache_size_gib": 1}, "plain": {}}.items():
            answer = await client.put(f"/v1/groups/{group}/properties", json=properties, headers=ops)
            assert answer.status_code == 200, answer.text
        yield client


def cluster_instances(ec2: Any) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def unclaimed_stopped_buffer_machines(ec2: Any) -> set[str]:
    found = set()
    for instance in cluster_instances(ec2):
        tags = tags_of(instance)
        unclaimed = tags.get(INSTANCE_BUFFER_TAG) == "true" and "user_id" not in tags
        if unclaimed and instance["State"]["Name"] == "stopped":
            found.add(str(instance["InstanceId"]))
    return found


async def stopped_buffer_machine(ec2: Any, *, besides: set[str]) -> str:
    """The id of a stopped, unclaimed buffer machine other than `besides`, once there is one."""

    async def found() -> str | None:
        return min(unclaimed_stopped_buffer_machines(ec2) - besides, default=None)

    instance_id, _ = await wait_for("a stopped buffer machine", found, timeout_s=120)
    return instance_id


async def test_a_first_session_claims_a_buffer_machine_the_buffer_refills_and_no_machine_changes_owner(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    first = {"user_id": f"fay-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
    second = {"user_id": f"gus-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
    buffered = await stopped_buffer_machine(ec2, besides=set())

    secret = f"data-{uuid.uuid4().hex[:6]}"
    session = await start_session(
        api, endpoints.sandbox_image, first, "cached", f"echo {secret} > /cache/notes; cat /cache/notes; sleep 100000"
    )
    assert session["instance_id"] == buffered, "the first session starts from the buffer, not a cold launch"
    assert session["volume_id"] is not None  # the owner's cache, mounted by the claimed machine's boot
    assert any("starting from the buffer" in reason for reason in session["reasons"]), session["reasons"]
    assert secret in await container_output(sandbox, buffered, secret)
    tags = tags_of(next(i for i in cluster_instances(ec2) if i["InstanceId"] == buffered))
    assert tags["user_id"] == first["user_id"]

    # The buffer refills with a machine of its own; the next owner takes a machine nobody used, never the first
    # owner's: one of the unclaimed stopped buffer machines listed just before it arrived (the refilled one, or the
    # lowest id if there are several: claim.py takes the cheapest, then by id).
    await stopped_buffer_machine(ec2, besides={buffered})
    unclaimed = unclaimed_stopped_buffer_machines(ec2)
    other = await start_session(api, endpoints.sandbox_image, second, "plain", "sleep 100000")
    assert any("starting from the buffer" in reason for reason in other["reasons"]), other["reasons"]
    assert other["instance_id"] in unclaimed, f"{other['instance_id']} was no unclaimed buffer machine: {unclaimed}"
    assert other["instance_id"] != buffered

    for owner in (first, second):
        assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    # The first owner's machine is theirs until it goes: idle, it is terminated, not returned to the buffer.

    async def gone() -> bool:
        state = next(i for i in cluster_instances(ec2) if i["InstanceId"] == buffered)["State"]["Name"]
        return state in ("shutting-down", "terminated")

    await wait_for("the first owner's machine terminated", gone, timeout_s=60)
    claimed = next(i for i in cluster_instances(ec2) if i["InstanceId"] == buffered)
    assert tags_of(claimed)["user_id"] == first["user_id"]
