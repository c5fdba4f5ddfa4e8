"""End to end through the director's API: a user's data survives their machine and comes back with them."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos import sessions
from warmswarm_demos.sessions import container_output, described, instance_in, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_models import CLUSTER_TAG, VOLUME_EXPIRES_AT_TAG, VOLUME_RELEASED_AT_TAG, parse_timestamp
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "cache-e2e"
TTL_S = 6
MIB = 2**20


@pytest.fixture(scope="module")
def director(sandbox: Sandbox) -> Iterator[StartedDirector]:
    # One ops token for both, as `make up` and a stack deploy give them: the director shows it to the autoscaler.
    ops_token = new_ops_token()
    autoscaler_url = start_autoscaler(
        sandbox,
        name="autoscaling-cache",
        settings={"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_IDLE_GRACE_S": "2"},
        ops_token=ops_token,
    )
    yield start_director(sandbox, name="director-cache", autoscaling_url=autoscaler_url, ops_token=ops_token)
    sandbox.kill("director-cache")
    sandbox.kill("autoscaling-cache")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    url, token, api_token = director
    # The platform's client: it presents the director's API token (ops' calls present the ops token instead).
    platform = {"Authorization": f"Bearer {api_token}"}
    async with httpx.AsyncClient(base_url=url, timeout=30, headers=platform) as client:
        for group, enabled in (("cached", True), ("plain", False)):
            body = {"ebs_cache_enabled": enabled, "cache_ttl_s": TTL_S, "cache_size_gib": 1}
            answer = await client.put(
                f"/v1/groups/{group}/properties", json=body, headers={"Authorization": f"Bearer {token}"}
            )
            assert answer.status_code == 200, answer.text
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def volume(ec2: Any, volume_id: str) -> dict[str, Any] | None:
    volumes = ec2.describe_volumes(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}])["Volumes"]
    return next((v for v in volumes if v["VolumeId"] == volume_id), None)


def instance(ec2: Any, instance_id: str) -> dict[str, Any]:
    return described(ec2, instance_id)


async def start_session(
    api: httpx.AsyncClient, endpoints: Endpoints, owner: dict[str, str], group: str, script: str
) -> dict[str, Any]:
    return await sessions.start_session(api, endpoints.sandbox_image, owner, group, script, timeout_s=90)


async def end_session(api: httpx.AsyncClient, ec2: Any, node_id: str, instance_id: str) -> None:
    assert (await api.delete(f"/v1/services/{node_id}")).status_code == 204
    await instance_in(ec2, instance_id, "shutting-down", "terminated")


async def test_users_file_survives_the_machine_and_expires_after_its_ttl(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    owner = {"user_id": unique("ana"), "project_id": "p1", "node_id": unique("n")}
    secret = unique("data")

    first = await start_session(api, endpoints, owner, "cached", f"echo {secret} > /cache/notes; sleep 100000")
    volume_id = first["volume_id"]
    assert volume_id is not None
    first_instance = instance(ec2, first["instance_id"])
    assert tags_of(volume(ec2, volume_id) or {})["user_id"] == owner["user_id"]

    await end_session(api, ec2, owner["node_id"], first["instance_id"])
    # Like EBS, the volume outlives the machine: its data is on the volume, not on the instance.
    (on_host,) = [v for v in sandbox.status()["volumes"] if v["volume_id"] == volume_id]
    assert on_host["host_path"] is not None, "its blocks are on the host"
    assert (sandbox.volume_files(volume_id) or {}).get("notes", b"").decode().strip() == secret

    async def released() -> dict[str, Any] | None:
        found = volume(ec2, volume_id)
        return found if found and found["State"] == "available" and VOLUME_EXPIRES_AT_TAG in tags_of(found) else None

    kept, _ = await wait_for("volume released with an expiry", released, timeout_s=60)
    released_at = parse_timestamp(tags_of(kept)[VOLUME_RELEASED_AT_TAG])
    expires_at = parse_timestamp(tags_of(kept)[VOLUME_EXPIRES_AT_TAG])
    assert released_at is not None
    assert expires_at == released_at + TTL_S

    # The same owner comes back before the TTL: a new machine in the volume's zone, the file intact.
    second = await start_session(api, endpoints, owner, "cached", "cat /cache/notes; sleep 100000")
    assert second["volume_id"] == volume_id
    assert second["instance_id"] != first["instance_id"]
    second_instance = instance(ec2, second["instance_id"])
    assert second_instance["Placement"]["AvailabilityZone"] == kept["AvailabilityZone"]
    assert first_instance["Placement"]["AvailabilityZone"] == kept["AvailabilityZone"]
    assert secret in await container_output(sandbox, second["instance_id"], secret)
    assert VOLUME_EXPIRES_AT_TAG not in tags_of(volume(ec2, volume_id) or {})  # a return clears the expiry

    # Gone for good: the janitor deletes the volume once its TTL has passed, and not before.
    await end_session(api, ec2, owner["node_id"], second["instance_id"])
    kept, _ = await wait_for("volume released again", released, timeout_s=60)
    expires_at = parse_timestamp(tags_of(kept)[VOLUME_EXPIRES_AT_TAG])
    assert expires_at is not None

    async def deleted() -> bool:
        return volume(ec2, volume_id) is None

    await wait_for("volume deleted after its TTL", deleted, timeout_s=60)
    assert time.time() >= expires_at


async def test_other_users_never_get_the_volume_and_cache_off_gets_none(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints
) -> None:
    first = {"user_id": unique("ben"), "project_id": "p1", "node_id": unique("n")}
    other = {"user_id": unique("cy"), "project_id": "p1", "node_id": unique("n")}
    plain = {"user_id": unique("di"), "project_id": "p1", "node_id": unique("n")}

    mine = await start_session(api, endpoints, first, "cached", "sleep 100000")
    theirs = await start_session(api, endpoints, other, "cached", "sleep 100000")
    no_cache = await start_session(api, endpoints, plain, "plain", "sleep 100000")

    assert mine["volume_id"]
    assert theirs["volume_id"]
    assert mine["volume_id"] != theirs["volume_id"]
    assert mine["node"] != theirs["node"]
    assert no_cache["volume_id"] is None
    owned_by_plain = ec2.describe_volumes(Filters=[{"Name": "tag:user_id", "Values": [plain["user_id"]]}])["Volumes"]
    assert owned_by_plain == []
    assert tags_of(volume(ec2, theirs["volume_id"]) or {})["user_id"] == other["user_id"]

    for owner, session in ((first, mine), (other, theirs), (plain, no_cache)):
        await end_session(api, ec2, owner["node_id"], session["instance_id"])


async def test_cache_turned_on_while_the_owners_machine_runs_moves_them_to_a_machine_with_a_volume(
    api: httpx.AsyncClient, director: StartedDirector, ec2: Any, endpoints: Endpoints
) -> None:
    """Ops turn the cache on for a group while a user's machine (launched without a volume) still runs."""
    token = director.ops_token
    group = unique("switch")
    ops = {"Authorization": f"Bearer {token}"}
    owner = {"user_id": unique("eve"), "project_id": "p1", "node_id": unique("n")}
    off = await api.put(f"/v1/groups/{group}/properties", json={"ebs_cache_enabled": False}, headers=ops)
    assert off.status_code == 200, off.text
    before = await start_session(api, endpoints, owner, group, "sleep 100000")
    assert before["volume_id"] is None

    # The user restarts their session right after the change: their idle machine is still there.
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    on = {"ebs_cache_enabled": True, "cache_ttl_s": TTL_S, "cache_size_gib": 1}
    assert (await api.put(f"/v1/groups/{group}/properties", json=on, headers=ops)).status_code == 200
    after = await start_session(api, endpoints, owner, group, "sleep 100000")

    assert after["volume_id"], "the session runs where its data is kept"
    assert after["instance_id"] != before["instance_id"]
    assert tags_of(instance(ec2, after["instance_id"]))["user_id"] == owner["user_id"]
    # The machine without a volume is not kept for them.
    gone, _ = await wait_for(
        "the old machine terminated",
        lambda: _state_if_gone(ec2, before["instance_id"]),
        timeout_s=60,
    )
    assert gone in ("shutting-down", "terminated")
    await end_session(api, ec2, owner["node_id"], after["instance_id"])


async def _state_if_gone(ec2: Any, instance_id: str) -> str | None:
    state = str(instance(ec2, instance_id)["State"]["Name"])
    return state if state in ("shutting-down", "terminated") else None
