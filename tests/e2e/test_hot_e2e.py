"""End to end: a first session claims a running machine of the hot buffer and gets its new volume hot-attached and
mounted; a return reads its file; a volume that cannot be read on a hot attach is never formatted, and that machine
gets no work."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos.sessions import container_output, start_session, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_director.placement import service_name
from warmswarm_models import (
    BUFFER_KIND_HOT,
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
)
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "hot-e2e"
OPS_TOKEN = new_ops_token()
HOT_ATTACH_S = 30


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, endpoints: Endpoints) -> Iterator[StartedDirector]:
    zone = f"{sandbox.region}a"  # one zone: a hot buffer of one machine
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": zone,
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_HOT_ATTACH_S": str(HOT_ATTACH_S),
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    url = start_autoscaler(sandbox, name="autoscaling-hot", settings=settings, ops_token=OPS_TOKEN)
    yield start_director(sandbox, name="director-hot", autoscaling_url=url, ops_token=OPS_TOKEN)
    sandbox.kill("director-hot")
    sandbox.kill("autoscaling-hot")


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as client:
        properties = {"ebs_cache_enabled": True, "cache_size_gib": 1, "cache_ttl_s": 3600}
        answer = await client.put("/v1/groups/cached/properties", json=properties, headers=ops)
        assert answer.status_code == 200, answer.text
        yield client


def hot_instances(ec2: Any) -> list[dict[str, Any]]:
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]},
        {"Name": f"tag:{INSTANCE_BUFFER_KIND_TAG}", "Values": [BUFFER_KIND_HOT]},
    ]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


async def free_hot_machine(ec2: Any, endpoints: Endpoints, *, besides: set[str]) -> str:
    """A running, unclaimed hot-buffer machine other than `besides`, once its node has joined, ready and drained: one
    the autoscaler offers to a claim."""
    manager = Engine(endpoints.docker_host)

    async def found() -> str | None:
        joined = {
            n["Description"]["Engine"].get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID)
            for n in manager.get("/nodes")
            if n["Status"]["State"] == "ready" and n["Spec"]["Availability"] == "drain"
        }
        for instance in hot_instances(ec2):
            tags = tags_of(instance)
            unclaimed = tags.get(INSTANCE_BUFFER_TAG) == "true" and "user_id" not in tags
            free = unclaimed and instance["State"]["Name"] == "running" and instance["InstanceId"] in joined
            if free and instance["InstanceId"] not in besides:
                return str(instance["InstanceId"])
        return None

    instance_id, _ = await wait_for("a running hot-buffer machine", found, timeout_s=120)
    return instance_id


async def gone(ec2: Any, instance_id: str, timeout_s: float = 90) -> None:
    async def terminated() -> bool:
        found = next(i for i in hot_instances(ec2) if i["InstanceId"] == instance_id)
        return found["State"]["Name"] in ("shutting-down", "terminated")

    await wait_for(f"{instance_id} terminated", terminated, timeout_s=timeout_s)


def owner_of(name: str) -> dict[str, str]:
    return {"user_id": f"{name}-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}


async def test_a_first_session_starts_hot_with_its_new_volume_and_a_return_reads_its_file(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    owner = owner_of("hana")
    await free_hot_machine(ec2, endpoints, besides=set())

    secret = f"data-{uuid.uuid4().hex[:6]}"
    session = await start_session(
        api, endpoints.sandbox_image, owner, "cached", f"echo {secret} > /cache/notes; cat /cache/notes; sleep 100000"
    )
    # A running hot-buffer machine (the one found, or another the buffer holds by then), not a launch.
    hot = session["instance_id"]
    assert hot in {i["InstanceId"] for i in hot_instances(ec2)}, "the first session starts hot, not on a launch"
    assert session["volume_id"] is not None
    assert any("starting hot" in reason for reason in session["reasons"]), session["reasons"]
    assert secret in await container_output(sandbox, hot, secret)
    notes = (sandbox.volume_files(session["volume_id"]) or {}).get("notes", b"")
    assert notes.decode().strip() == secret, "written to the hot-attached volume"

    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    await gone(ec2, hot)  # no warm tier: idle, the machine goes; the volume stays for its TTL

    # The return: its machine is gone, the hot buffer has refilled; it claims that one, with its volume.
    await free_hot_machine(ec2, endpoints, besides={hot})
    back = await start_session(api, endpoints.sandbox_image, owner, "cached", "cat /cache/notes; sleep 100000")
    assert back["volume_id"] == session["volume_id"]
    assert back["instance_id"] in {i["InstanceId"] for i in hot_instances(ec2)} - {hot}, back["reasons"]
    assert any("starting hot" in reason for reason in back["reasons"]), back["reasons"]
    assert secret in await container_output(sandbox, back["instance_id"], secret)
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204


async def test_a_volume_unreadable_on_a_hot_attach_is_never_formatted_and_its_machine_gets_no_work(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    owner = owner_of("ivo")
    first_machine = await free_hot_machine(ec2, endpoints, besides=set())
    session = await start_session(api, endpoints.sandbox_image, owner, "cached", "echo mine > /cache/f; sleep 100000")
    volume_id = session["volume_id"]
    assert (sandbox.volume_files(volume_id) or {}).get("f") == b"mine\n"
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    await gone(ec2, session["instance_id"])
    # A format would give the volume a new filesystem (a new UUID) without the owner's file.
    before = disk_of(sandbox, volume_id)
    assert before[0] is not None
    assert before[1] == {"f": b"mine\n"}
    sandbox.break_volume(volume_id)  # from now on the owner's disk cannot be read

    hot = await free_hot_machine(ec2, endpoints, besides={first_machine, session["instance_id"]})
    request = {
        **owner,
        "image": endpoints.sandbox_image,
        "command": ["sh", "-c", "cat /cache/f; sleep 100000"],
        "resources": {"cpus": 0.5, "memory_bytes": 256 * 2**20},
        "groups": ["cached"],
    }
    assert (await api.post("/v1/services", json=request)).status_code == 201

    async def claimed() -> bool:
        found = next(i for i in hot_instances(ec2) if i["InstanceId"] == hot)
        return tags_of(found).get("user_id") == owner["user_id"]

    await wait_for("the hot machine claimed for the return", claimed, timeout_s=60)
    unit_log = sandbox.state_dir / "logs" / f"{hot}.warmswarm-hot-cache.log"

    async def refused() -> str | None:
        said = unit_log.read_text() if unit_log.exists() else ""
        # blkid -p finds no signature on a disk it cannot read: the zero check's read error refuses it.
        return said if "cannot be read" in said else None

    said, _ = await wait_for("the hot attach refused", refused, timeout_s=60)
    assert "this machine takes no work for it" in said
    # While the claim is pending (the machine runs, claimed, within hot_attach_s): the disk is as it was, and the
    # machine's node has neither the owner's labels nor any of the owner's work. Checked a few times over the
    # seconds the autoscaler's cycles keep deciding, not once.
    manager = Engine(endpoints.docker_host)
    service_id = manager.get(f"/services/{service_name(owner['node_id'])}")["ID"]
    for _ in range(3):
        assert next(i for i in hot_instances(ec2) if i["InstanceId"] == hot)["State"]["Name"] == "running"
        assert disk_of(sandbox, volume_id) == before, "the owner's unreadable volume was formatted"
        node = node_of_instance(manager, hot)
        assert node is not None, "the claimed machine's node is still in the swarm"
        assert "user_id" not in node["Spec"].get("Labels", {}), "the claimed machine was labelled for the owner"
        placed = manager.get("/tasks", query={"filters": json.dumps({"service": [service_id]})})
        assert all(task.get("NodeID") != node["ID"] for task in placed), "the owner's work went to that machine"
        await asyncio.sleep(2)
    # Past hot_attach_s the machine goes without ever running the owner's work; the volume is kept, as it was.
    await gone(ec2, hot, timeout_s=HOT_ATTACH_S + 60)
    status = (await api.get(f"/v1/services/{owner['node_id']}")).json()
    assert status["status"] != "running" or status["instance_id"] != hot, status
    assert disk_of(sandbox, volume_id) == before, "nothing on the volume changed: never formatted"
    volume = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    assert volume["State"] in ("available", "in-use"), "the owner's volume is kept"
    assert (await api.delete(f"/v1/services/{owner['node_id']}")).status_code == 204
    sandbox.repair_volume(volume_id)


def disk_of(sandbox: Sandbox, volume_id: str) -> tuple[str | None, dict[str, bytes] | None]:
    """What a volume's blocks hold: its filesystem's UUID (blkid -p) and the files at its top, by name."""
    return sandbox.volume_uuid(volume_id), sandbox.volume_files(volume_id)


def node_of_instance(manager: Engine, instance_id: str) -> dict[str, Any] | None:
    for node in manager.get("/nodes"):
        if node["Description"]["Engine"].get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID) == instance_id:
            return dict(node)
    return None
