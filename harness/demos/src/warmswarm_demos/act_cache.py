"""Act 2 of `make demo`: a user's file outlives her machine, comes back with her on a new one, and expires."""

from __future__ import annotations

import asyncio
import shlex
import time
from typing import Any

from warmswarm_models import VOLUME_EXPIRES_AT_TAG, VOLUME_RELEASED_AT_TAG
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.narration import Narrator, expiry_line, seconds_after_release
from warmswarm_demos.sessions import container_output
from warmswarm_demos.stage import POLL_S, STEP_TIMEOUT_S, Platform, instance, instance_in, tags_of
from warmswarm_demos.workload import wait_for

ACT = "act 2 (cache return)"
TTL_S = 10
GROUP = "researchers"
NOTE = "draft chapter 3, 42 pages"
STEPS = (
    ("first session: request → running (cold_launch)", "first-requested", "first-running"),
    ("return: request → running (cache_return)", "second-requested", "second-running"),
)


async def cache_act(sandbox: Sandbox, platform: Platform, ops_token: str, say: Narrator, *, suffix: str = "") -> None:
    """`suffix` makes the owner's ids unique in a shared sandbox."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    owner = {"user_id": f"bea{suffix}", "project_id": "thesis", "node_id": f"notebook-1{suffix}"}
    say.say(f"ops turn the EBS cache on for group {GROUP!r} (TTL {TTL_S} s) — PUT with the ops token")
    answer = await platform.api.put(
        f"/v1/groups/{GROUP}/properties",
        json={"ebs_cache_enabled": True, "cache_ttl_s": TTL_S, "cache_size_gib": 1},
        headers={"Authorization": f"Bearer {ops_token}"},
    )
    answer.raise_for_status()

    async def released(volume_id: str) -> dict[str, Any] | None:
        volumes = await asyncio.to_thread(aws.all_volumes, ec2)
        found = volumes.get(volume_id)
        tags = tags_of(found or {})
        return found if found and found["State"] == "available" and VOLUME_RELEASED_AT_TAG in tags else None

    say.say("bea starts session 1 through the director; it writes a file to her cache (first time: cache miss)")
    say.say("  (the director tells each session's start path, how its machine came to run it; each act checks it)")
    first = await platform.start(
        owner,
        "first",
        GROUP,
        f"echo {shlex.quote(NOTE)} > /cache/notes.txt; sleep 100000",
        act=ACT,
        expected_path="cold_launch",
    )
    say.say(
        f"session 1 runs on {first['instance_id']} with a new volume {first['volume_id']}"
        f"   (request → running {say.between('first-requested', 'first-running'):.1f} s)"
    )
    say.say("bea stops; her machine goes away, her volume stays")
    await platform.end(owner)
    await instance_in(ec2, first["instance_id"], "shutting-down", "terminated")
    volume, _ = await wait_for("volume released", lambda: released(first["volume_id"]), STEP_TIMEOUT_S, POLL_S)
    tags = tags_of(volume)
    say.say(
        f"volume {first['volume_id']} is available in {volume['AvailabilityZone']},"
        f" released at {tags[VOLUME_RELEASED_AT_TAG]}, expires at {tags[VOLUME_EXPIRES_AT_TAG]}"
    )

    say.say("bea comes back before the TTL; session 2 reads the file")
    second = await platform.start(
        owner, "second", GROUP, "cat /cache/notes.txt; sleep 100000", act=ACT, expected_path="cache_return"
    )
    placed = await instance(ec2, second["instance_id"])
    zone = placed["Placement"]["AvailabilityZone"] if placed else "?"
    say.say(
        f"session 2 runs on a new machine {second['instance_id']} in {zone} with the same volume"
        f" {second['volume_id']}   (request → running {say.between('second-requested', 'second-running'):.1f} s)"
    )
    output = await container_output(sandbox, second["instance_id"], NOTE)
    say.say(f"her container printed: {output.strip()!r} — the data survived the machine")

    say.say(f"bea stops again and does not come back; the janitor deletes the volume once its TTL ({TTL_S} s) is over")
    await platform.end(owner)
    await instance_in(ec2, second["instance_id"], "shutting-down", "terminated")
    volume, _ = await wait_for("volume released", lambda: released(second["volume_id"]), STEP_TIMEOUT_S, POLL_S)
    released_at_tag = tags_of(volume)[VOLUME_RELEASED_AT_TAG]

    async def deleted() -> bool:
        return second["volume_id"] not in await asyncio.to_thread(aws.all_volumes, ec2)

    await wait_for("volume deleted", deleted, STEP_TIMEOUT_S + TTL_S, POLL_S)
    deleted_at_s = time.time()
    after_release_s = seconds_after_release(released_at_tag, deleted_at_s)
    say.say(expiry_line(second["volume_id"], after_release_s, TTL_S))

    say.table(
        "act 2: cache return",
        [
            *say.steps(STEPS),
            (f"released-at tag → deleted (TTL {TTL_S} s)", after_release_s),
        ],
    )
