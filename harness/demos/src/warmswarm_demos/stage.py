"""What the acts look at and drive: the sandbox's EC2 and swarm, and the platform's client of the director."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

import aiodocker
import httpx
from warmswarm_sandbox import aws

from warmswarm_demos.narration import Narrator, check_start_path
from warmswarm_demos.sessions import SMALL
from warmswarm_demos.workload import wait_for

GIB = 2**30
POLL_S = 0.1
STEP_TIMEOUT_S = 90.0
# The director asks the autoscaler for the machine's facts once, at the first "running" answer; a moment later at
# most it tells the start path.
START_PATH_WAIT_S = 5.0


async def instance(ec2: Any, instance_id: str | None = None) -> dict[str, Any] | None:
    """The instance as EC2 describes it (the first one when no id is given), or None."""
    instances = await asyncio.to_thread(aws.all_instances, ec2)
    if instance_id is not None:
        return instances.get(instance_id)
    return next(iter(instances.values()), None)


async def instance_in(ec2: Any, instance_id: str, *states: str, timeout_s: float = STEP_TIMEOUT_S) -> dict[str, Any]:
    """The instance once it is in one of `states`."""

    async def reached() -> dict[str, Any] | None:
        found = await instance(ec2, instance_id)
        return found if found and found["State"]["Name"] in states else None

    found, _ = await wait_for(f"{instance_id} {'/'.join(states)}", reached, timeout_s, POLL_S)
    return found


async def node_of(docker: aiodocker.Docker, instance_id: str) -> dict[str, Any] | None:
    """The swarm node whose daemon says it runs on the instance, or None."""
    for node in await docker.nodes.list():
        if node["Description"].get("Engine", {}).get("Labels", {}).get("warmswarm.instance-id") == instance_id:
            return dict(node)
    return None


def tags_of(resource: Mapping[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


def autoscaler_status(url: str, ops_token: str) -> dict[str, Any]:
    # The status names every owner: the autoscaler shows it to the ops token only.
    request = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {ops_token}"})
    with urllib.request.urlopen(request, timeout=5) as response:
        found: dict[str, Any] = json.load(response)
        return found


def decisions(url: str, ops_token: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = autoscaler_status(url, ops_token)["decisions"]
    return found


class Platform:
    """The platform's client of the director: it starts and ends users' sessions, and the demo narrates each."""

    def __init__(self, api: httpx.AsyncClient, image: str, say: Narrator) -> None:
        self.api = api
        self.image = image
        self.say = say

    async def start(
        self,
        owner: Mapping[str, str],
        label: str,
        group: str | Sequence[str],
        script: str,
        *,
        act: str,
        expected_path: str,
        who: str = "",
    ) -> dict[str, Any]:
        """Ask for the owner's session (in one group, or several), narrate what the director says until it runs, and
        check its start path.

        Marks `{label}-requested` and `{label}-running`; the status returned carries the start path the director
        told, and under `said` each thing it said while the session waited. A start path other than `expected_path`
        is a DemoFailure: the act would narrate something else. `who` names the owner in those lines, where an act
        has several sessions at once.
        """
        request = {
            **owner,
            "image": self.image,
            "command": ["sh", "-c", script],
            "resources": dict(SMALL),
            "groups": [group] if isinstance(group, str) else list(group),
        }
        speaker = f"{who}: " if who else ""
        self.say.mark(f"{label}-requested")
        (await self.api.post("/v1/services", json=request)).raise_for_status()
        seen: list[str] = []

        async def running() -> dict[str, Any] | None:
            status: dict[str, Any] = (await self.api.get(f"/v1/services/{owner['node_id']}")).json()
            said = f"{status['status']}: {status['reason']}" if status.get("reason") else status["status"]
            if said not in seen:
                seen.append(said)
                self.say.say(f"  {speaker}director says {said}")
            return status if status["status"] == "running" else None

        status, _ = await wait_for(f"{label} running", running, STEP_TIMEOUT_S, POLL_S)
        self.say.mark(f"{label}-running")

        async def told() -> dict[str, Any] | None:
            found: dict[str, Any] = (await self.api.get(f"/v1/services/{owner['node_id']}")).json()
            return found if found.get("start_path") else None

        if not status.get("start_path"):
            # Past the wait, check_start_path says plainly that the director told none.
            with contextlib.suppress(TimeoutError):
                status, _ = await wait_for(f"{label} start path", told, START_PATH_WAIT_S, POLL_S)
        path = check_start_path(act, expected_path, status.get("start_path"))
        self.say.say(f"  {speaker}director's start path: {path} (as expected)")
        return {**status, "said": seen}

    async def end(self, owner: Mapping[str, str]) -> None:
        (await self.api.delete(f"/v1/services/{owner['node_id']}")).raise_for_status()
