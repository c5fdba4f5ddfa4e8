"""End to end: a session's cache volume filled past the threshold grows under it, with no restart and no write lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos import sessions
from warmswarm_demos.growth import WRITER_SCRIPT, docker, docker_host_of, fill_until_grown
from warmswarm_demos.sessions import instance_in, tags_of
from warmswarm_models import VOLUME_GROWN_AT_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "grow-e2e"
GROUP = "growing"
# The node's fill runs every second here (10 s by default): the test waits on the swarm agent's node update
# (20 s at most) and not on the timer as well.
SETTINGS = {"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_IDLE_GRACE_S": "2", "AUTOSCALING_CACHE_FILL_PERIOD_S": "1"}


@pytest.fixture(scope="module")
def director(sandbox: Sandbox) -> Iterator[StartedDirector]:
    ops_token = new_ops_token()
    url = start_autoscaler(sandbox, name="autoscaling-grow", settings=SETTINGS, ops_token=ops_token)
    yield start_director(sandbox, name="director-grow", autoscaling_url=url, ops_token=ops_token)
    sandbox.kill("director-grow")
    sandbox.kill("autoscaling-grow")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    url, token, api_token = director
    async with httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {api_token}"}) as client:
        body = {"ebs_cache_enabled": True, "cache_ttl_s": 60, "cache_size_gib": 1, "cache_max_size_gib": 2}
        answer = await client.put(
            f"/v1/groups/{GROUP}/properties", json=body, headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 200, answer.text
        yield client


def written(docker_host: str, container_id: str) -> list[int]:
    return [int(line) for line in docker(docker_host, "exec", container_id, "cat", "/cache/sequence").split()]


async def test_a_full_cache_volume_grows_under_the_running_session_and_no_write_is_lost(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    owner = {"user_id": f"gus-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
    session = await sessions.start_session(api, endpoints.sandbox_image, owner, GROUP, WRITER_SCRIPT, timeout_s=90)
    volume_id, instance_id = session["volume_id"], session["instance_id"]
    assert volume_id is not None
    (volume,) = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    assert volume["Size"] == 1
    assert VOLUME_GROWN_AT_TAG not in tags_of(volume)

    grown = await fill_until_grown(sandbox, instance_id, timeout_s=90)
    print(f"fill to grown filesystem in the container: {grown.fill_to_grown_s:.1f} s")

    assert grown.size_after_kib > 1.9 * grown.size_before_kib, "twice the room: the volume grew from 1 to 2 GiB"
    (volume,) = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    assert volume["Size"] == 2
    assert VOLUME_GROWN_AT_TAG in tags_of(volume)
    # The same container, never restarted (a new task would be a second container on the machine).
    docker_host = docker_host_of(sandbox, instance_id)
    state = docker(docker_host, "inspect", "--format", "{{.State.Running}} {{.RestartCount}}", grown.container_id)
    assert state.split() == ["true", "0"]
    assert docker(docker_host, "ps", "--all", "--quiet", "--no-trunc").split() == [grown.container_id]
    # Every line the writer wrote, before, during and after the growth: 1..N, in order, and still writing.
    before = written(docker_host, grown.container_id)
    await asyncio.sleep(0.5)
    after = written(docker_host, grown.container_id)
    assert after == list(range(1, len(after) + 1))
    assert len(after) > len(before) > 0

    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    await instance_in(ec2, instance_id, "shutting-down", "terminated")
