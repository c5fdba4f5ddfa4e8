"""End to end: a hot buffer sized by demand (AUTOSCALING_BUFFER_SIZING=demand) holds nothing while nobody comes, fills
after sessions arrive, and shrinks to zero when demand stops."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos.sessions import start_session
from warmswarm_demos.workload import wait_for
from warmswarm_models import BUFFER_KIND_HOT, CLUSTER_TAG, INSTANCE_BUFFER_KIND_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "demand-e2e"
OPS_TOKEN = new_ops_token()
WINDOW_S = 90  # arrivals are counted this far back (a loaded machine starts two sessions slowly)
SESSIONS = 2


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, endpoints: Endpoints) -> Iterator[StartedDirector]:
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": f"{sandbox.region}a",
        "AUTOSCALING_BUFFER_SIZING": "demand",
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 2}),  # the most it holds per zone
        "AUTOSCALING_BUFFER_WINDOW_S": str(WINDOW_S),
        # 2 arrivals in 90 s × 60 s to refill × 1.5 headroom: a target of 2.
        "AUTOSCALING_BUFFER_REFILL_S": "60",
        "AUTOSCALING_BUFFER_HEADROOM": "1.5",
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    url = start_autoscaler(sandbox, name="autoscaling-demand", settings=settings, ops_token=OPS_TOKEN)
    yield start_director(sandbox, name="director-demand", autoscaling_url=url, ops_token=OPS_TOKEN)
    sandbox.kill("director-demand")
    sandbox.kill("autoscaling-demand")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as client:
        answer = await client.put("/v1/groups/plain/properties", json={}, headers=ops)
        assert answer.status_code == 200, answer.text
        yield client


def live_hot_machines(ec2: Any) -> list[str]:
    """The unclaimed hot-buffer machines that are not on their way out (terminated ones stay listed for a while)."""
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]},
        {"Name": f"tag:{INSTANCE_BUFFER_KIND_TAG}", "Values": [BUFFER_KIND_HOT]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
    ]
    found = [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]
    # A claimed one keeps its kind tag, but it is an owner's now, not the buffer's.
    return [i["InstanceId"] for i in found if not any(t["Key"] == "user_id" for t in i.get("Tags", []))]


async def test_the_hot_buffer_follows_arrivals_and_shrinks_to_zero_when_they_stop(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints
) -> None:
    assert live_hot_machines(ec2) == [], "nobody came yet: the buffer holds nothing"
    owners = [
        {"user_id": f"kim-{n}-{uuid.uuid4().hex[:4]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
        for n in range(SESSIONS)
    ]
    for owner in owners:
        await start_session(api, endpoints.sandbox_image, owner, "plain", "sleep 100000")

    # Sessions arrived: the buffer refills toward its target for the next ones.
    async def some() -> list[str] | None:
        return live_hot_machines(ec2) or None

    async def none_left() -> bool:
        return live_hot_machines(ec2) == []

    filled, _ = await wait_for("hot machines for the next sessions", some, timeout_s=60)
    print(f"hot buffer after {SESSIONS} arrivals: {len(filled)} machine(s)")
    assert 1 <= len(filled) <= 2, "within the most the settings allow per zone"

    for owner in owners:
        assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    # Nobody comes any more: once the arrivals leave the window the target is 0 and the idle buffer is terminated.
    _, took_s = await wait_for("the hot buffer empty", none_left, timeout_s=WINDOW_S + 90)
    print(f"hot buffer empty {took_s:.0f} s after the sessions ended")
