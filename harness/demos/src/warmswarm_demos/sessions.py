"""A user's session through the director's API on the sandbox, and what the sandbox shows of it (tests, benchmarks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiodocker
import httpx
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.workload import wait_for

MIB = 2**20
SMALL = {"cpus": 0.5, "memory_bytes": 256 * MIB}  # a session that fits the smallest type


async def start_session(
    api: httpx.AsyncClient,
    image: str,
    owner: Mapping[str, str],
    group: str | Sequence[str],
    script: str,
    *,
    resources: Mapping[str, float] = SMALL,
    timeout_s: float = 120,
) -> dict[str, Any]:
    """POST the owner's service (in `group`, or in each of several groups) and wait until the director says it
    runs; its last status, with `reasons`: each reason the director gave while it waited, in order (what the user
    was told)."""
    request = {
        **owner,
        "image": image,
        "command": ["sh", "-c", script],
        "resources": dict(resources),
        "groups": [group] if isinstance(group, str) else list(group),
    }
    created = await api.post("/v1/services", json=request)
    assert created.status_code == 201, created.text
    reasons: list[str] = []

    async def running() -> dict[str, Any] | None:
        status: dict[str, Any] = (await api.get(f"/v1/services/{owner['node_id']}")).json()
        if status["reason"] and status["reason"] not in reasons:
            reasons.append(status["reason"])
        return status if status["status"] == "running" else None

    try:
        status, _ = await wait_for(f"{owner['user_id']} running", running, timeout_s=timeout_s, interval_s=0.1)
    except TimeoutError:
        raise TimeoutError(
            f"{owner['user_id']} not running within {timeout_s:g} s; the director said {reasons}"
        ) from None
    return {**status, "reasons": reasons}


def tags_of(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def described(ec2: Any, instance_id: str) -> dict[str, Any]:
    found: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return found


async def instance_in(ec2: Any, instance_id: str, *states: str, timeout_s: float = 60) -> dict[str, Any]:
    """The instance as EC2 describes it, once it is in one of `states`."""

    async def reached() -> dict[str, Any] | None:
        found = described(ec2, instance_id)
        return found if found["State"]["Name"] in states else None

    found, _ = await wait_for(f"{instance_id} {'/'.join(states)}", reached, timeout_s=timeout_s)
    return found


async def container_output(sandbox: Sandbox, instance_id: str, contains: str, timeout_s: float = 30) -> str:
    """The logs of the containers on the instance's own daemon, once they contain `contains`."""

    async def logs() -> str | None:
        (machine,) = [i for i in sandbox.status()["instances"] if i["instance_id"] == instance_id]
        if machine["docker_host"] is None:
            return None
        async with aiodocker.Docker(url=machine["docker_host"]) as node_docker:
            text = ""
            for container in await node_docker.containers.list():
                text += "".join(await container.log(stdout=True, stderr=True))
        return text if contains in text else None

    text, _ = await wait_for(f"container output with {contains!r}", logs, timeout_s=timeout_s)
    return text
