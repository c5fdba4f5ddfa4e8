"""Act 3 of `make demo`: an idle user's machine is kept stopped (warm), and her return starts that same machine."""

from __future__ import annotations

import shlex
from typing import Any

import aiodocker
from warmswarm_models import INSTANCE_WARM_UNTIL_TAG
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_demos.sessions import container_output
from warmswarm_demos.stage import POLL_S, STEP_TIMEOUT_S, Platform, instance_in, tags_of
from warmswarm_demos.workload import wait_for

ACT = "act 3 (warm resume)"
WARM_TTL_S = 60  # long enough for her return within it; the sandbox's teardown ends the machine after the demo
GROUP = "lab"
NOTE = "lab log, day 12: the sample is stable"
STEPS = (
    ("first session: request → running (cold_launch)", "warm-first-requested", "warm-first-running"),
    ("session ended → machine stopped (warm)", "warm-ended", "warm-stopped"),
    ("machine stopped → swarm sees its node down", "warm-stopped", "warm-down"),
    ("return: request → running (warm_resume)", "warm-return-requested", "warm-return-running"),
)


async def _node(sandbox: Sandbox, node_id: str) -> dict[str, Any]:
    async with aiodocker.Docker(url=sandbox.endpoints.docker_host) as manager:
        return dict(await manager.nodes.inspect(node_id=node_id))


async def warm_act(sandbox: Sandbox, platform: Platform, ops_token: str, say: Narrator, *, suffix: str = "") -> None:
    """`suffix` makes the owner's ids unique in a shared sandbox."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    owner = {"user_id": f"cleo{suffix}", "project_id": "lab", "node_id": f"notebook-2{suffix}"}
    say.say(
        f"ops give group {GROUP!r} a warm tier: its users' idle machines are kept stopped for {WARM_TTL_S} s"
        " (warm_ttl_s), with the cache on"
    )
    properties = {"ebs_cache_enabled": True, "cache_ttl_s": 600, "cache_size_gib": 1, "warm_ttl_s": WARM_TTL_S}
    answer = await platform.api.put(
        f"/v1/groups/{GROUP}/properties", json=properties, headers={"Authorization": f"Bearer {ops_token}"}
    )
    answer.raise_for_status()

    say.say("cleo starts session 1; it writes a file to her cache")
    first = await platform.start(
        owner,
        "warm-first",
        GROUP,
        f"echo {shlex.quote(NOTE)} > /cache/notes.txt; sleep 100000",
        act=ACT,
        expected_path="cold_launch",
    )
    instance_id, node_id = first["instance_id"], (await _node(sandbox, first["node"]))["ID"]
    say.say(
        f"session 1 runs on instance {instance_id}, swarm node {node_id}, volume {first['volume_id']}"
        f"   (request → running {say.between('warm-first-requested', 'warm-first-running'):.1f} s)"
    )

    say.say("cleo ends her session; once idle, her machine is stopped, not terminated")
    say.mark("warm-ended")
    await platform.end(owner)
    stopped = await instance_in(ec2, instance_id, "stopped")
    say.mark("warm-stopped")
    say.say(
        f"{instance_id} is stopped, warm until {tags_of(stopped)[INSTANCE_WARM_UNTIL_TAG]}, her volume still"
        f" attached   (end → stopped {say.between('warm-ended', 'warm-stopped'):.1f} s)"
    )

    async def down() -> dict[str, Any] | None:
        found = await _node(sandbox, node_id)
        return found if found["Status"]["State"] == "down" else None

    # A user comes back minutes later, when the swarm knows the node is down; asked before its heartbeats stop,
    # the swarm would first give her task to the stopped node and the resume would time that detour, not itself.
    node, _ = await wait_for("the stopped machine's node down", down, STEP_TIMEOUT_S, POLL_S)
    say.mark("warm-down")
    say.say(
        f"the swarm sees its node down and keeps it, with her labels (user_id={node['Spec']['Labels'].get('user_id')})"
        f"   (stopped → node down {say.between('warm-stopped', 'warm-down'):.1f} s)"
    )

    say.say("cleo comes back within the warm tier; session 2 reads her file")
    second = await platform.start(
        owner, "warm-return", GROUP, "cat /cache/notes.txt; sleep 100000", act=ACT, expected_path="warm_resume"
    )
    second_node_id = (await _node(sandbox, second["node"]))["ID"]
    if (second["instance_id"], second_node_id) != (instance_id, node_id):
        raise DemoFailure(
            f"{ACT}: the return runs on instance {second['instance_id']}, node {second_node_id}, not on"
            f" {instance_id}, node {node_id}"
        )
    say.say(
        f"session 2 runs on the SAME instance {instance_id} and the SAME swarm node {node_id}, volume"
        f" {second['volume_id']}   (request → running {say.between('warm-return-requested', 'warm-return-running'):.1f}"
        " s)"
    )
    output = await container_output(sandbox, instance_id, NOTE)
    say.say(f"her container printed: {output.strip()!r} — her machine came back with her file")
    say.say(f"cleo ends again: her machine is stopped again, and terminated if she is not back within {WARM_TTL_S} s")
    await platform.end(owner)

    say.table("act 3: warm resume", say.steps(STEPS))
