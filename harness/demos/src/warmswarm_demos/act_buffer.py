"""Act 4 of `make demo`: the autoscaler keeps a hot buffer, a machine waits running, and a first session claims it."""

from __future__ import annotations

import asyncio
import json
import shlex
import time
from typing import Any

from warmswarm_models import (
    BUFFER_KIND_HOT,
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
)
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.engine import Engine

from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_demos.sessions import container_output
from warmswarm_demos.stage import POLL_S, Platform, instance, tags_of
from warmswarm_demos.workload import wait_for

ACT = "act 4 (hot buffer claim)"
GROUP = "newcomers"
NOTE = "dan's first notebook"
# A refill is a launch, a boot, an image pull and a join: a minute is ample in the sandbox.
BUFFER_FILL_TIMEOUT_S = 120.0
STEPS = (
    ("hot buffer on → its machine ready", "buffer-on", "buffer-ready"),
    ("first session: request → running (hot_claim)", "hot-requested", "hot-running"),
)


def hot_buffer_settings(sandbox: Sandbox) -> dict[str, str]:
    """One running t3.medium kept in one zone (one zone: a buffer of one machine), the demo's image pulled on it."""
    return {
        "AUTOSCALING_AVAILABILITY_ZONES": f"{sandbox.region}a",
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_BUFFER_IMAGES": sandbox.endpoints.sandbox_image,
        "AUTOSCALING_HOT_ATTACH_S": "30",
    }


async def free_hot_machine(sandbox: Sandbox, ec2: Any, cluster: str) -> dict[str, Any]:
    """A running, unclaimed hot-buffer machine of the cluster whose node has joined, ready and drained: one a claim
    is given."""
    manager = Engine(sandbox.endpoints.docker_host)

    async def found() -> dict[str, Any] | None:
        nodes = await asyncio.to_thread(manager.get, "/nodes")
        joined = {
            n["Description"]["Engine"].get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID)
            for n in nodes
            if n["Status"]["State"] == "ready" and n["Spec"]["Availability"] == "drain"
        }
        for machine in (await asyncio.to_thread(aws.all_instances, ec2)).values():
            tags = tags_of(machine)
            ours = tags.get(CLUSTER_TAG) == cluster
            hot = (
                ours
                and tags.get(INSTANCE_BUFFER_TAG) == "true"
                and tags.get(INSTANCE_BUFFER_KIND_TAG) == BUFFER_KIND_HOT
            )
            running = machine["State"]["Name"] == "running" and machine["InstanceId"] in joined
            if hot and "user_id" not in tags and running:
                return machine
        return None

    machine, _ = await wait_for("a ready hot-buffer machine", found, BUFFER_FILL_TIMEOUT_S, POLL_S)
    return machine


async def buffer_act(
    sandbox: Sandbox, platform: Platform, ops_token: str, say: Narrator, *, cluster: str, suffix: str = ""
) -> None:
    """Runs once the autoscaler has been restarted with hot_buffer_settings (marked `buffer-on`); `suffix` makes the
    owner's ids unique in a shared sandbox."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    waiting = await free_hot_machine(sandbox, ec2, cluster)
    say.mark("buffer-ready")
    say.say(
        f"the hot buffer holds {waiting['InstanceId']}: running, joined and drained, the image pulled, owned by"
        f" nobody   (hot buffer on → ready {say.between('buffer-on', 'buffer-ready'):.1f} s)"
    )
    answer = await platform.api.put(
        f"/v1/groups/{GROUP}/properties",
        json={"ebs_cache_enabled": True, "cache_ttl_s": 600, "cache_size_gib": 1},
        headers={"Authorization": f"Bearer {ops_token}"},
    )
    answer.raise_for_status()

    owner = {"user_id": f"dan{suffix}", "project_id": "intro", "node_id": f"notebook-3{suffix}"}
    say.say(f"dan, new here (group {GROUP!r}, cache on), starts his first session; it writes a file to his cache")
    requested_at_s = time.time()
    status = await platform.start(
        owner,
        "hot",
        GROUP,
        f"echo {shlex.quote(NOTE)} > /cache/notes.txt; cat /cache/notes.txt; sleep 100000",
        act=ACT,
        expected_path="hot_claim",
    )
    claimed = await instance(ec2, status["instance_id"])
    tags = tags_of(claimed or {})
    if claimed is None or tags.get(INSTANCE_BUFFER_KIND_TAG) != BUFFER_KIND_HOT:
        raise DemoFailure(f"{ACT}: dan's session runs on {status['instance_id']}, not a hot-buffer machine")
    launched_before_s = requested_at_s - claimed["LaunchTime"].timestamp()
    if launched_before_s <= 0:
        # A claim of a machine the buffer launched after the request: the one that waited did not serve him.
        raise DemoFailure(
            f"{ACT}: dan's session runs on {claimed['InstanceId']}, launched {-launched_before_s:.1f} s after his"
            f" request (the buffer's refill), not on {waiting['InstanceId']}, which waited for him; the director"
            f" said: {' | '.join(status['said'])}"
        )
    same = "the one it held" if claimed["InstanceId"] == waiting["InstanceId"] else "another it held by then"
    say.say(
        f"his session runs on {claimed['InstanceId']}, the hot buffer's ({same}), launched {launched_before_s:.0f} s"
        f" before he asked; his new volume {status['volume_id']} was attached while it ran"
        f"   (request → running {say.between('hot-requested', 'hot-running'):.1f} s)"
    )
    say.say(
        "  (a launch boots in 1 s in this sandbox, so a cold start is about as quick here; on AWS a hot claim skips"
        " the boot and the image pull, minutes: docs/benchmarks.md)"
    )
    output = await container_output(sandbox, claimed["InstanceId"], NOTE)
    say.say(f"his container printed: {output.strip()!r}; the machine is his now")
    await platform.end(owner)

    say.table(
        "act 4: hot buffer claim",
        [
            *say.steps(STEPS),
            ("buffer machine launched → request (before it)", launched_before_s),
        ],
    )
