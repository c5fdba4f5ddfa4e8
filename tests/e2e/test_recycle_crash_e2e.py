"""End to end: a crash right after each mutating call of a hot claim, a recycle or a growth loses nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiodocker
import pytest
from warmswarm_demos.growth import WRITER_SCRIPT, cache_size_kib, docker, docker_host_of, fill_to, session_container
from warmswarm_demos.workload import wait_for
from warmswarm_models import (
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    OWNER_KEYS,
    VOLUME_GROWN_AT_TAG,
    CachePolicy,
)
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import autoscaler_env, free_port

from tests.e2e.crash_journey import CRASH_SETTINGS, Autoscaler, Journey, unique

pytestmark = pytest.mark.e2e

# Long enough that the first owner's volume is kept through every restart of the journey (it is checked at the end).
TTL_S = 900
SETTINGS = {
    **CRASH_SETTINGS,
    # The scrub boot must prove itself within it; a restart or two of the replica may fall inside that boot.
    "AUTOSCALING_MAX_START_S": "90",
}
# How long the dead replica's last request, sent as the signal landed, may take to be answered.
SETTLE_S = 1.0
RECYCLING = CachePolicy(enabled=True, ttl_s=TTL_S, size_gib=1, recycle_machines=True, accept_recycled=True)
# Room for two growths (1 -> 2 -> 3 GiB), so that a growth asked again after a crash would show.
GROWING = CachePolicy(enabled=True, ttl_s=TTL_S, size_gib=1, max_size_gib=3)


@asynccontextmanager
async def journey_of(
    sandbox: Sandbox, endpoints: Endpoints, ec2: Any, settings: dict[str, str], policy: CachePolicy
) -> AsyncIterator[Journey]:
    """An autoscaler with `settings` over SETTINGS, behind a Docker proxy that can kill it after a node update, and
    an owner whose sessions carry `policy`'s labels; what the journey made is ended on the way out."""
    cluster = unique("crash-")
    proxy_host, proxy_admin = sandbox.start_docker_proxy(name=f"{cluster}-proxy")
    port = free_port()
    env = autoscaler_env(
        endpoints,
        port,
        {**SETTINGS, **settings, "WARMSWARM_CLUSTER": cluster, "DOCKER_HOST": proxy_host},
    )
    scaler = Autoscaler(sandbox, f"{cluster}-autoscaling", env, f"http://127.0.0.1:{port}")
    scaler.start()
    owner = {"user_id": unique("ada"), "project_id": "p1", "node_id": unique("n")}
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        journey = Journey(sandbox, endpoints, docker, ec2, cluster, owner, scaler, proxy_admin, policy.to_labels())
        try:
            yield journey
        finally:
            for service in await docker.services.list():
                if service["Spec"]["Name"].startswith(cluster):
                    await docker.services.delete(service["ID"])
            sandbox.kill(scaler.name)
            sandbox.kill(f"{cluster}-proxy")
            ids = [i["InstanceId"] for i in journey.live_instances()]
            if ids:
                ec2.terminate_instances(InstanceIds=ids)


@pytest.fixture
async def journey(sandbox: Sandbox, endpoints: Endpoints, ec2: Any) -> AsyncIterator[Journey]:
    settings = {
        # One machine, the hot buffer's: every session claims it in turn, so the first owner's idle machine has a
        # buffer place to be recycled into (nothing else can refill it) and the next owner gets that very machine.
        "AUTOSCALING_MAX_INSTANCES": "1",
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_AVAILABILITY_ZONES": f"{sandbox.region}a",
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    async with journey_of(sandbox, endpoints, ec2, settings, RECYCLING) as made:
        yield made


@pytest.fixture
async def growing(sandbox: Sandbox, endpoints: Endpoints, ec2: Any) -> AsyncIterator[Journey]:
    # The node reports its fill every second (10 s by default).
    async with journey_of(sandbox, endpoints, ec2, {"AUTOSCALING_CACHE_FILL_PERIOD_S": "1"}, GROWING) as made:
        yield made


def tags_of(found: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in found.get("Tags", [])}


async def nodes_of(journey: Journey, instance_id: str) -> list[dict[str, Any]]:
    return [
        dict(node)
        for node in await journey.docker.nodes.list()
        if (node["Description"]["Engine"].get("Labels") or {}).get("warmswarm.instance-id") == instance_id
    ]


async def hot_machine(journey: Journey) -> str:
    """The hot buffer's machine, running with its node ready and nobody's."""

    async def ready() -> str | None:
        for instance in journey.live_instances():
            tags = tags_of(instance)
            if (
                tags.get(INSTANCE_BUFFER_TAG) == "true"
                and "user_id" not in tags
                and instance["State"]["Name"] == "running"
            ):
                nodes = await nodes_of(journey, instance["InstanceId"])
                if any(n["Status"]["State"] == "ready" for n in nodes):
                    return str(instance["InstanceId"])
        return None

    machine, _ = await wait_for("the hot buffer's machine ready", ready, timeout_s=180)
    return machine


async def nothing_offered_early(journey: Journey, machine: str, owners: list[dict[str, str]]) -> None:
    """One machine at most; while the machine owes its scrub, no node of it carries an owner's labels or runs a task
    of anyone's; each owner's volume exists (none deleted by a crash)."""
    live = journey.live_instances()
    assert len(live) <= 1, f"a second machine: {[i['InstanceId'] for i in live]}"
    (found,) = [i for i in journey.instances() if i["InstanceId"] == machine]
    tags = tags_of(found)
    if tags.get(INSTANCE_SCRUB_TAG, "").startswith("pending-"):
        for node in await nodes_of(journey, machine):
            labels = node["Spec"].get("Labels") or {}
            if "user_id" in labels:
                # The mark lands while the owner's labels are still on (they go at the strip); never someone else's.
                assert labels["user_id"] == journey.owner["user_id"], (
                    f"{machine} owes its scrub and is labelled {labels}"
                )
            tasks = await journey.docker.tasks.list(filters={"node": node["ID"], "desired-state": "running"})
            assert not tasks, f"{machine} owes its scrub and runs {[t['ServiceID'] for t in tasks]}"
    for owner in owners:
        volumes = [v for v in journey.volumes() if tags_of(v).get("user_id") == owner["user_id"]]
        assert len(volumes) == 1, f"{owner['user_id']}'s volumes: {volumes}"
        assert volumes[0]["State"] not in ("deleting", "deleted"), f"{owner['user_id']}'s volume deleted"


async def test_a_crash_right_after_any_mutating_call_of_a_claim_or_a_recycle_loses_nothing(journey: Journey) -> None:
    scaler = journey.autoscaler
    ada = journey.owner
    ben = {"user_id": unique("ben"), "project_id": "p1", "node_id": unique("n")}
    machine = await hot_machine(journey)

    # Ada's first session claims the hot machine: a crash after its tags, its volume's hot attach and its node's
    # labels and activation.
    journey.kill_after_ec2("CreateTags", **{"Tag.*.Value": ada["user_id"]})
    first = await journey.session(f"{journey.cluster}-ada", "date +%s%N > /cache/f && sleep 100000")
    await scaler.killed_then_started("the claim's tags", journey.ec2_kill("AttachVolume"))
    await nothing_offered_early(journey, machine, [])
    await scaler.killed_then_started("AttachVolume", journey.node_update_kill("active"))
    await nothing_offered_early(journey, machine, [ada])
    await scaler.killed_then_started("label and activate")
    task = await journey.running(first)
    (ada_node,) = await nodes_of(journey, machine)
    assert task["NodeID"] == ada_node["ID"], "ada's session runs on the claimed hot machine"
    ((ada_volume,),) = [[v for v in journey.volumes() if tags_of(v).get("user_id") == ada["user_id"]]]
    ada_volume_id = str(ada_volume["VolumeId"])

    async def written() -> str | None:
        return journey.cache_file(ada_volume_id) or None

    ada_file, _ = await wait_for("ada's file on her volume", written, timeout_s=30)

    # Ada leaves: a crash after each step of recycling her machine into the hot buffer. Some steps are one action
    # of several calls (the mark and the stop; the strip's node update, tags set and tags removed): a kill lands
    # after its call's answer has left, and the dying replica may have sent the action's next call by then. So each
    # next kill is armed only if its call is still to come, and a call the dead replica sent is named as such.
    def machine_now() -> tuple[str, dict[str, str]]:
        (found,) = [i for i in journey.instances() if i["InstanceId"] == machine]
        return str(found["State"]["Name"]), tags_of(found)

    def ada_attached() -> bool:
        (volume,) = journey.ec2.describe_volumes(VolumeIds=[ada_volume_id])["Volumes"]
        return any(a["State"] in ("attaching", "attached") for a in volume["Attachments"])

    async def ada_labelled() -> bool:
        return any("user_id" in (n["Spec"].get("Labels") or {}) for n in await nodes_of(journey, machine))

    async def stopped() -> bool:
        return machine_now()[0] in ("stopping", "stopped")

    async def detached() -> bool:
        return not ada_attached()

    async def unlabelled() -> bool:
        return not await ada_labelled()

    async def buffer_tagged() -> bool:
        return machine_now()[1].get(INSTANCE_BUFFER_TAG) == "true"

    async def untagged() -> bool:
        return "user_id" not in machine_now()[1]

    async def started() -> bool:
        state, tags = machine_now()
        return state in ("pending", "running") and "user_id" not in tags

    async def marked_done() -> bool:
        return machine_now()[1].get(INSTANCE_SCRUB_TAG, "").startswith("done-")

    kills = [
        ("the mark", journey.ec2_kill("CreateTags", **{"Tag.*.Value": "pending-*"}), None),
        ("StopInstances", journey.ec2_kill("StopInstances"), stopped),
        ("DetachVolume", journey.ec2_kill("DetachVolume"), detached),
        ("the strip's node update", journey.node_update_kill("drain"), unlabelled),
        (
            "the strip's buffer tags",
            journey.ec2_kill("CreateTags", **{"Tag.*.Key": INSTANCE_BUFFER_TAG}),
            buffer_tagged,
        ),
        ("the strip's removed tags", journey.ec2_kill("DeleteTags"), untagged),
        ("the scrub boot's start", journey.ec2_kill("StartInstances"), started),
        ("the proof's mark", journey.ec2_kill("CreateTags", **{"Tag.*.Value": "done-*"}), marked_done),
    ]
    sent_by_the_dead: list[str] = []
    journey.kill_after_node_update("drain")
    await journey.docker.services.delete(first)
    kill_point = "the idle drain"
    while True:
        killed_at = await scaler.killed(kill_point)
        # The dead replica's last request, sent before the signal landed, is answered before the next kill is armed
        # (an answer to it would otherwise fire a kill armed for the next replica).
        await asyncio.sleep(SETTLE_S)
        while kills and kills[0][2] is not None and await kills[0][2]():
            sent_by_the_dead.append(kills.pop(0)[0])
        if not kills:
            scaler.start()
            scaler.took_s[kill_point] = time.monotonic() - killed_at
            break
        next_point, arm, _ = kills.pop(0)
        scaler.start(arm)
        scaler.took_s[kill_point] = time.monotonic() - killed_at
        await nothing_offered_early(journey, machine, [ada])
        kill_point = next_point
    await nothing_offered_early(journey, machine, [ada])

    async def offered() -> dict[str, str] | None:
        (found,) = [i for i in journey.instances() if i["InstanceId"] == machine]
        tags = tags_of(found)
        done = tags.get(INSTANCE_SCRUB_TAG, "").startswith("done-") and found["State"]["Name"] == "running"
        return tags if done and tags.get(INSTANCE_BUFFER_TAG) == "true" else None

    tags, _ = await wait_for(f"{machine} scrubbed and in the hot buffer again", offered, timeout_s=120)
    assert not set(OWNER_KEYS) & set(tags), f"{machine} still carries an owner's tags: {tags}"
    assert tags[INSTANCE_RECYCLED_TAG] == "1"
    assert tags[INSTANCE_SERVED_OWNERS_TAG] == f"{ada['user_id']}/{ada['project_id']}"

    # Ben, of the same group, gets that very machine; ada's volume was never deleted or attached to it again, and
    # her file is intact on it.
    second = await journey.session(f"{journey.cluster}-ben", "ls /cache; sleep 100000", owner=ben)
    task = await journey.running(second)
    (ben_node,) = await nodes_of(journey, machine)
    assert task["NodeID"] == ben_node["ID"], "ben's session runs on the recycled machine"
    await nothing_offered_early(journey, machine, [ada, ben])
    (kept,) = journey.ec2.describe_volumes(VolumeIds=[ada_volume_id])["Volumes"]
    assert all(a["InstanceId"] != machine for a in kept["Attachments"]), "ada's volume is on ben's machine"
    assert journey.cache_file(ada_volume_id) == ada_file
    recycle_points = [
        "the idle drain",
        "the mark",
        "StopInstances",
        "DetachVolume",
        "the strip's node update",
        "the strip's buffer tags",
        "the strip's removed tags",
        "the scrub boot's start",
        "the proof's mark",
    ]
    expected = ["the claim's tags", "AttachVolume", "label and activate", *recycle_points]
    assert scaler.restarts == [p for p in expected if p not in sent_by_the_dead]
    # A call the dying replica sent is never the first of its action: the mark's tag, the strip's node update.
    assert not {"the idle drain", "the mark", "the strip's node update"} & set(sent_by_the_dead)
    for kill_point in sent_by_the_dead:
        print(f"{kill_point}: sent by the replica killed after the call before it, so no kill after it this run")
    for kill_point, took_s in scaler.took_s.items():
        print(f"killed after {kill_point}: started again and ready in {took_s:.1f} s; nothing lost, nothing early")


def fill_again(docker_host: str, container_id: str, fill_percent: int) -> None:
    """fill_to's ballast is one file, which fallocate never shrinks nor, asked for less than it holds, extends: a
    second ballast fills the grown filesystem to fill_percent again."""
    _, size_kib, used_kib, *_ = docker(docker_host, "exec", container_id, "df", "-P", "/cache").splitlines()[1].split()
    more_kib = int(size_kib) * fill_percent // 100 - int(used_kib)
    docker(docker_host, "exec", container_id, "fallocate", "-l", f"{more_kib}KiB", "/cache/ballast-2")


async def test_a_crash_right_after_a_growth_s_calls_grows_the_volume_once_under_the_running_session(
    growing: Journey,
) -> None:
    journey, scaler = growing, growing.autoscaler
    service = await journey.session(f"{journey.cluster}-gus", WRITER_SCRIPT)
    await journey.running(service)
    (machine,) = journey.live_instances()
    (volume,) = journey.volumes()
    volume_id = str(volume["VolumeId"])
    docker_host = docker_host_of(journey.sandbox, str(machine["InstanceId"]))
    container_id = session_container(docker_host)

    # A crash right after ModifyVolume, before its grown-at tag: the next replica finds the volume grown and its
    # filesystem growing, and has nothing to ask.
    journey.kill_after_ec2("ModifyVolume")
    size_before_kib = await asyncio.to_thread(fill_to, docker_host, container_id, 88)
    await scaler.killed_then_started("ModifyVolume")

    async def grown_past(size_kib: int) -> int | None:
        now_kib = await asyncio.to_thread(cache_size_kib, docker_host, container_id)
        return now_kib if now_kib > size_kib else None

    size_after_kib, _ = await wait_for("the filesystem grown to 2 GiB", lambda: grown_past(size_before_kib), 90)
    assert size_after_kib > 1.9 * size_before_kib, "twice the room: 1 -> 2 GiB"

    # Filled again within AWS's window, its grown-at tag lost with the crash: the growth asked again is refused by
    # AWS, which is read as the lost tag and tagged now; a crash right after that tag. (A replica that asks while the
    # node still reports the fill of the filesystem before its growth meets the same refusal sooner: then the tag is
    # there before the second fill, and no kill follows it this run.)
    def grown_at() -> bool:
        return VOLUME_GROWN_AT_TAG in tags_of(journey.ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0])

    tagged_early = grown_at()
    if tagged_early:
        print("the grown-at tag: written on AWS's refusal before the second fill, so no kill after it this run")
    else:
        journey.kill_after_ec2("CreateTags", **{"Tag.*.Key": VOLUME_GROWN_AT_TAG})
    await asyncio.to_thread(fill_again, docker_host, container_id, 88)
    if not tagged_early:
        await scaler.killed_then_started("the grown-at tag")
    # Several cycles of the last replica, the fill still high: never asked again, never grown past 2 GiB.
    await asyncio.sleep(5)
    (volume,) = journey.ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    assert volume["Size"] == 2, f"grown once, to 2 GiB: {volume['Size']} GiB"
    assert VOLUME_GROWN_AT_TAG in tags_of(volume)
    # The same container, never restarted, and every line its writer wrote, in order.
    state = docker(docker_host, "inspect", "--format", "{{.State.Running}} {{.RestartCount}}", container_id)
    assert state.split() == ["true", "0"]
    lines = [int(n) for n in docker(docker_host, "exec", container_id, "cat", "/cache/sequence").split()]
    assert lines == list(range(1, len(lines) + 1))
    assert scaler.restarts == ["ModifyVolume", *([] if tagged_early else ["the grown-at tag"])]
    for kill_point, took_s in scaler.took_s.items():
        print(f"killed after {kill_point}: started again and ready in {took_s:.1f} s; grown once, nothing lost")
