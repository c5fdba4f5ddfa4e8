"""End to end: an owner's machine is recycled (stopped, detached, stripped, scrubbed on its next boot) and serves the
next owner, who finds none of the first owner's files on it; the first owner returns hot and reads their file; a group
that forbids recycling never receives a recycled machine, and its own machines are terminated as before."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiodocker
import httpx
import pytest
from warmswarm_demos.sessions import container_output, start_session, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_models import (
    CLUSTER_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
)
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "recycle-e2e"
OPS_TOKEN = new_ops_token()
# One machine at a time: the hot buffer's, which every session claims in turn, so that each idle machine has a buffer
# place to be recycled into (nothing else can refill it) and the next session gets that very machine.
MAX_INSTANCES = 1


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, endpoints: Endpoints) -> Iterator[StartedDirector]:
    zone = f"{sandbox.region}a"
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": zone,
        "AUTOSCALING_MAX_INSTANCES": str(MAX_INSTANCES),
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    url = start_autoscaler(sandbox, name="autoscaling-recycle", settings=settings, ops_token=OPS_TOKEN)
    yield start_director(sandbox, name="director-recycle", autoscaling_url=url, ops_token=OPS_TOKEN)
    sandbox.kill("director-recycle")
    sandbox.kill("autoscaling-recycle")


GROUPS = {
    # One lab: its machines serve one another once scrubbed.
    "lab": {"ebs_cache_enabled": True, "cache_size_gib": 1, "recycle_machines": True, "accept_recycled": True},
    # Sensitive data: never a machine another used, and its own never go to others.
    "vault": {"ebs_cache_enabled": True, "cache_size_gib": 1},
}


@pytest.fixture
async def api(director: StartedDirector) -> AsyncIterator[httpx.AsyncClient]:
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as client:
        for group, properties in GROUPS.items():
            answer = await client.put(f"/v1/groups/{group}/properties", json=properties, headers=ops)
            assert answer.status_code == 200, answer.text
        yield client


def cluster_instances(ec2: Any) -> list[dict[str, Any]]:
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}]
    return [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]


def tags_now(ec2: Any, instance_id: str) -> dict[str, str]:
    return tags_of(next(i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id))


async def scrubbed_and_offered(
    ec2: Any, sandbox: Sandbox, instance_id: str, generation: int, timeout_s: float = 240
) -> None:
    """The machine's scrub of this generation proven, and it is the hot buffer's again: nobody's, running."""

    async def offered() -> bool:
        instance = next(i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id)
        tags = tags_of(instance)
        return (
            tags.get(INSTANCE_SCRUB_TAG) == f"done-{generation}"
            and tags.get(INSTANCE_BUFFER_TAG) == "true"
            and "user_id" not in tags
            and instance["State"]["Name"] == "running"
        )

    try:
        await wait_for(f"{instance_id} recycled (scrub {generation} proven) and offered", offered, timeout_s=timeout_s)
    except TimeoutError as error:
        instance = next(i for i in cluster_instances(ec2) if i["InstanceId"] == instance_id)
        seen = f"state {instance['State']['Name']}, tags {tags_of(instance)}"
        log = sandbox.log_tail("autoscaling-recycle", lines=400)
        raise TimeoutError(f"{error}; {seen}; the autoscaler's log ends:\n{log}") from error


def owner_of(name: str) -> dict[str, str]:
    return {"user_id": f"{name}-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}


def machine_disk(sandbox: Sandbox, instance_id: str) -> Path:
    """The machine's root disk as the sandbox keeps it: its Docker data root and its /etc."""
    return sandbox.state_dir / "nodes" / instance_id


def files_holding(folder: Path, secret: str) -> list[str]:
    """Every file under `folder` whose bytes contain `secret` (grep -r: binary files included)."""
    found = subprocess.run(["grep", "-rlsF", secret, str(folder)], capture_output=True, text=True, check=False)
    return found.stdout.split()


async def docker_volume_with(sandbox: Sandbox, instance_id: str, image: str, secret: str) -> None:
    """What an owner's session leaves in a Docker volume on its machine: a named volume written by a container."""
    (machine,) = [i for i in sandbox.status()["instances"] if i["instance_id"] == instance_id]
    async with aiodocker.Docker(url=machine["docker_host"]) as node_docker:
        await node_docker.volumes.create({"Name": "session-data"})  # type: ignore[no-untyped-call]
        container = await node_docker.containers.run(
            {
                "Image": image,
                "Cmd": ["sh", "-c", f"echo {secret} > /data/kept"],
                "HostConfig": {"Binds": ["session-data:/data"]},
            }
        )
        await container.wait()


async def test_a_machine_serves_the_next_owner_scrubbed_and_the_first_owner_returns_hot(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    ada, ben = owner_of("ada"), owner_of("ben")
    secret = f"ada-secret-{uuid.uuid4().hex[:8]}"
    script = (
        f"echo {secret} > /cache/notes; echo {secret} > /root/own-disk; echo {secret}; sleep 100000"  # cache, own disk
    )
    session = await start_session(api, endpoints.sandbox_image, ada, "lab", script, timeout_s=180)
    machine = session["instance_id"]
    volume_id = session["volume_id"]
    assert await container_output(sandbox, machine, secret)
    await docker_volume_with(sandbox, machine, endpoints.sandbox_image, secret)
    assert files_holding(machine_disk(sandbox, machine), secret), "ada's files are on her machine's disk"

    assert (await api.delete(f"/v1/services/{ada['node_id']}")).status_code == 204
    await scrubbed_and_offered(ec2, sandbox, machine, generation=1)
    tags = tags_now(ec2, machine)
    assert tags[INSTANCE_RECYCLED_TAG] == "1"
    assert tags[INSTANCE_SERVED_OWNERS_TAG] == f"{ada['user_id']}/{ada['project_id']}", "the audit names ada"
    # Stopped, detached while stopped, then scrubbed on its boot: none of ada's bytes anywhere on its root disk, and
    # her volume is attached nowhere (kept for its TTL).
    assert files_holding(machine_disk(sandbox, machine), secret) == []
    assert ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"] == "available"

    # Ben, in the same lab, gets that very machine (the only one), with a new volume of his own.
    looked = (
        "cat /cache/notes /root/own-disk 2>&1; grep -rlsF ada-secret / --exclude-dir=proc --exclude-dir=sys; echo done"
    )
    bens = await start_session(api, endpoints.sandbox_image, ben, "lab", f"{looked}; sleep 100000", timeout_s=180)
    assert bens["instance_id"] == machine
    assert bens["volume_id"] not in (None, volume_id)
    said = await container_output(sandbox, machine, "done")
    assert secret not in said, f"ben's container found ada's data: {said}"
    attached = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Attachments"]
    assert all(a["InstanceId"] != machine for a in attached), "ada's volume is attached to ben's machine"

    # Ben leaves; the machine is recycled again. Ada returns within her TTL, starts hot on it, and reads her file.
    assert (await api.delete(f"/v1/services/{ben['node_id']}")).status_code == 204
    await scrubbed_and_offered(ec2, sandbox, machine, generation=2)
    back = await start_session(api, endpoints.sandbox_image, ada, "lab", "cat /cache/notes; sleep 100000")
    assert back["volume_id"] == volume_id
    assert any("starting hot" in reason for reason in back["reasons"]), back["reasons"]
    assert secret in await container_output(sandbox, back["instance_id"], secret)
    assert (await api.delete(f"/v1/services/{ada['node_id']}")).status_code == 204


async def test_a_group_that_forbids_recycling_gets_no_recycled_machine_and_its_own_are_terminated(
    api: httpx.AsyncClient, ec2: Any, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    recycled = {i["InstanceId"] for i in cluster_instances(ec2) if INSTANCE_RECYCLED_TAG in tags_of(i)}
    cyd = owner_of("cyd")
    session = await start_session(api, endpoints.sandbox_image, cyd, "vault", "echo vault; sleep 100000", timeout_s=240)
    machine = session["instance_id"]
    assert machine not in recycled, "a vault session was given a recycled machine"
    assert INSTANCE_RECYCLED_TAG not in tags_now(ec2, machine)

    assert (await api.delete(f"/v1/services/{cyd['node_id']}")).status_code == 204

    async def terminated() -> bool:
        found = next(i for i in cluster_instances(ec2) if i["InstanceId"] == machine)
        return found["State"]["Name"] in ("shutting-down", "terminated")

    await wait_for(f"{machine} terminated", terminated, timeout_s=120)
    assert INSTANCE_SCRUB_TAG not in tags_now(ec2, machine), "a vault machine was recycled"
