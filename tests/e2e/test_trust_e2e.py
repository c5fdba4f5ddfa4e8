"""End to end in the sandbox: a crash of the autoscaler at every kind of mutating call loses nothing, a reboot
mounts the cache again before work, and a disk that cannot be read is never formatted.

The autoscaler is a real process; the sandbox (the cloud and the Docker API it plays) kills it with SIGKILL right
after a chosen call was answered, and the test starts it again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
from warmswarm_demos.workload import wait_for
from warmswarm_models import CachePolicy
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import autoscaler_env, free_port

from tests.e2e.crash_journey import CRASH_SETTINGS, Autoscaler, Journey, unique

pytestmark = pytest.mark.e2e

# The cache TTL of these sessions. A return comes after one or two replica restarts (each about 3 s here, more on a
# loaded machine) and must come within it: at 4 s a slow restart let the janitor rightly delete the owner's volume
# before the return, and the test saw a second volume. The last session's deletion is waited for (up to 90 s).
TTL_S = 20
# Short clocks so a whole journey takes a minute: a killed leader's lock goes in 2 s.
SETTINGS = CRASH_SETTINGS


@pytest.fixture
async def journey(sandbox: Sandbox, endpoints: Endpoints, ec2: Any) -> AsyncIterator[Journey]:
    cluster = unique("crash-")
    proxy_host, proxy_admin = sandbox.start_docker_proxy(name=f"{cluster}-proxy")
    port = free_port()
    env = autoscaler_env(endpoints, port, {**SETTINGS, "WARMSWARM_CLUSTER": cluster, "DOCKER_HOST": proxy_host})
    scaler = Autoscaler(sandbox, f"{cluster}-autoscaling", env, f"http://127.0.0.1:{port}")
    scaler.start()
    owner = {"user_id": unique("u"), "project_id": "p1", "node_id": unique("n")}
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        try:
            policy = CachePolicy(enabled=True, ttl_s=TTL_S, size_gib=1).to_labels()
            yield Journey(sandbox, endpoints, docker, ec2, cluster, owner, scaler, proxy_admin, policy)
        finally:
            for service in await docker.services.list():
                if service["Spec"]["Name"].startswith(cluster):
                    await docker.services.delete(service["ID"])
            sandbox.kill(scaler.name)
            sandbox.kill(f"{cluster}-proxy")


async def test_a_crash_right_after_any_mutating_call_loses_nothing(journey: Journey) -> None:
    scaler = journey.autoscaler
    # Session 1: its first time, so a volume is created; a crash after each step of bringing it up.
    # Each next kill is armed for the new replica as it starts: its first cycle may take the next step at once.
    journey.kill_after_ec2("CreateVolume")
    first = await journey.session(f"{journey.cluster}-s1", "date +%s%N > /cache/f && sleep 100000")
    await scaler.killed_then_started("CreateVolume", journey.ec2_kill("RunInstances"))
    journey.accounted_for()
    await scaler.killed_then_started("RunInstances", journey.ec2_kill("AttachVolume"))
    journey.accounted_for()
    # The node labelled for its owner and activated.
    await scaler.killed_then_started("AttachVolume", journey.node_update_kill("active"))
    journey.accounted_for()
    await scaler.killed_then_started("label and activate")
    journey.accounted_for()
    await journey.running(first)
    (volume,) = journey.volumes()
    volume_id = volume["VolumeId"]

    async def written() -> str | None:
        return journey.cache_file(volume_id) or None

    written_text, _ = await wait_for("session 1's file", written, timeout_s=30)

    # Session 1 ends: a crash after each step of taking its machine away and releasing its volume.
    journey.kill_after_node_update("drain")
    await journey.docker.services.delete(first)
    await scaler.killed_then_started("drain", journey.ec2_kill("TerminateInstances"))
    journey.accounted_for()
    released = journey.ec2_kill("CreateTags", **{"Tag.*.Key": "warmswarm:released-at"})
    await scaler.killed_then_started("TerminateInstances", released)
    await scaler.killed_then_started("the release tag")
    journey.accounted_for()

    # Session 2, within the TTL: the same volume, the file intact, the session running.
    second = await journey.session(f"{journey.cluster}-s2", "cat /cache/f && sleep 100000")
    await journey.running(second)
    journey.accounted_for()
    assert [v["VolumeId"] for v in journey.volumes()] == [volume["VolumeId"]]
    assert journey.cache_file(volume_id) == written_text

    # Session 2 ends and nobody comes back: a crash right after the janitor's delete.
    journey.kill_after_ec2("DeleteVolume")
    await journey.docker.services.delete(second)
    await scaler.killed_then_started("DeleteVolume")

    async def settled() -> bool:
        gone = all(v["State"] in ("deleting", "deleted") for v in journey.volumes())
        return gone and not journey.live_instances()

    await wait_for("every instance and volume of the cluster gone", settled, timeout_s=90)
    assert scaler.restarts == [
        "CreateVolume",
        "RunInstances",
        "AttachVolume",
        "label and activate",
        "drain",
        "TerminateInstances",
        "the release tag",
        "DeleteVolume",
    ]
    instances = journey.instances()
    assert len(instances) == 2, f"one machine per session, none twice: {instances}"
    for kill_point, took_s in scaler.took_s.items():
        print(f"killed after {kill_point}: started again and ready in {took_s:.1f} s; nothing lost, nothing twice")


async def first_session(journey: Journey) -> tuple[str, str, str]:
    """A session that adds a line to its cache file at each start; its service, its instance and its volume."""
    service_id = await journey.session(f"{journey.cluster}-s", "echo start >> /cache/f && sleep 100000")
    await journey.running(service_id)
    (machine,) = journey.live_instances()
    (volume,) = journey.volumes()
    volume_id = str(volume["VolumeId"])

    async def one_line() -> bool:
        return journey.cache_file(volume_id) == "start\n"

    await wait_for("the first start's line in the cache", one_line, timeout_s=30)
    return service_id, str(machine["InstanceId"]), volume_id


async def node_of(journey: Journey, instance_id: str) -> dict[str, Any] | None:
    for found in await journey.docker.nodes.list():
        if (found["Description"]["Engine"].get("Labels") or {}).get("warmswarm.instance-id") == instance_id:
            return dict(found)
    return None


async def test_a_reboot_mounts_the_cache_again_before_the_session_runs_again(journey: Journey) -> None:
    service_id, instance_id, volume_id = await first_session(journey)
    before = await node_of(journey, instance_id)
    assert before is not None

    journey.sandbox.pull_plug(instance_id)  # the machine reboots on its own disk: per-boot units, then Docker

    async def started_again_on_the_volume() -> bool:
        # A second line in the volume: the restarted task wrote to the mounted cache, not to a bare folder.
        return journey.cache_file(volume_id) == "start\nstart\n"

    await wait_for("the session started again with its cache", started_again_on_the_volume, timeout_s=60)
    await journey.running(service_id)
    after = await node_of(journey, instance_id)
    assert after is not None
    assert after["ID"] == before["ID"], "the same swarm node came back"
    assert after["Spec"]["Availability"] == "active"
    assert [i["InstanceId"] for i in journey.live_instances()] == [instance_id], "no second machine"


async def test_a_reboot_whose_volume_does_not_appear_runs_nothing_on_the_bare_path(journey: Journey) -> None:
    service_id, instance_id, volume_id = await first_session(journey)
    (volume,) = journey.volumes()
    journey.sandbox.hide_volume(volume["VolumeId"])

    journey.sandbox.pull_plug(instance_id)

    # Up again without its cache, the machine is terminated at once (issue 19: kept, it would sit drained, count
    # as idle and be replaced by the same launch, forever); its volume is kept.
    async def terminated() -> bool:
        return instance_id not in [i["InstanceId"] for i in journey.live_instances()]

    await wait_for("the machine, up without its cache, terminated", terminated, timeout_s=60)
    assert journey.cache_file(volume_id) == "start\n", "nothing ran on the volume's bare path"
    assert [v["VolumeId"] for v in journey.volumes()] == [volume["VolumeId"]]

    # Nothing is lost: once the disk shows up again, the session comes back on a new machine with the volume.
    journey.sandbox.repair_volume(volume["VolumeId"])

    async def back_with_its_data() -> bool:
        # Read only once the file is there: a lost file never reads "start\nstart\n" again, so this still fails.
        return journey.cache_file(volume_id) == "start\nstart\n"

    await wait_for("the session back with its cache", back_with_its_data, timeout_s=90)
    await journey.running(service_id)


async def test_a_disk_that_cannot_be_read_is_never_formatted_and_the_machine_is_replaced(journey: Journey) -> None:
    service_id, _, volume_id = await first_session(journey)
    await journey.docker.services.delete(service_id)

    async def released() -> bool:
        (volume,) = journey.volumes()
        return volume["State"] == "available" and not journey.live_instances()

    await wait_for("the first machine gone, the volume available", released, timeout_s=60)
    (volume,) = journey.volumes()
    journey.sandbox.break_volume(volume["VolumeId"])
    # A format would give the volume a new filesystem (a new UUID) without the session's file.
    uuid_before = journey.sandbox.volume_uuid(volume_id)
    assert uuid_before is not None
    assert journey.cache_file(volume_id) == "start\n"

    second = await journey.session(f"{journey.cluster}-s2", "echo start >> /cache/f && sleep 100000")

    async def boot_stopped() -> str | None:
        for machine in journey.live_instances():
            log = journey.sandbox.state_dir / "logs" / f"{machine['InstanceId']}.user-data.log"
            # blkid -p finds no signature on a disk it cannot read: the zero check's read error stops the boot.
            if log.exists() and "cannot be read" in log.read_text():
                return str(machine["InstanceId"])
        return None

    stopped, _ = await wait_for("the boot of the machine with the unreadable disk to stop", boot_stopped, timeout_s=60)
    assert await node_of(journey, stopped) is None, "a machine that cannot read its owner's disk never joins"
    assert journey.sandbox.volume_uuid(volume_id) == uuid_before, "nothing was formatted: the same filesystem"
    assert journey.cache_file(volume_id) == "start\n", "and the session's file on it"

    # The autoscaler replaces the machine that never joined; with the disk readable again, the session
    # runs on the same data.
    journey.sandbox.repair_volume(volume["VolumeId"])

    async def back_with_its_data() -> bool:
        # Read only once the file is there: a lost file never reads "start\nstart\n" again, so this still fails.
        return journey.cache_file(volume_id) == "start\nstart\n"

    await wait_for("the session on a new machine with its data", back_with_its_data, timeout_s=120)
    await journey.running(second)
    assert stopped not in [i["InstanceId"] for i in journey.live_instances()]
