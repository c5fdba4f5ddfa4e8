"""EBS volumes in the sandbox: a sparse file per volume, a loop device in the machine it is attached to, formatted once
(XFS, by the boot script's real blkid, zero check and mkfs) and kept across instances.

The boot script is the project's own (render_user_data): these tests hold the sandbox to the contract the
autoscaler relies on, wait for the device, then mount, then join.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warmswarm_autoscaling.ports import JoinInfo
from warmswarm_autoscaling.userdata import render_user_data
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID
from warmswarm_sandbox import aws, disks, host, node, procs
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine

from .sandbox_probes import (
    AMI,
    activate,
    cache_service,
    filesystem_type,
    leftovers,
    running_task,
    status_of,
    swarm_node_in,
    volume_file,
    wait_for,
)

BOOT_S = 0.5
ATTACH_S = 0.5
DEVICE = "/dev/sdf"
# Long enough for every attach below; the "never attaches" test passes a short one of its own.
DEVICE_WAIT_S = 30


def user_data(manager: Engine, endpoints: Endpoints, volume_id: str, device_wait_s: int = DEVICE_WAIT_S) -> str:
    token = manager.get("/swarm")["JoinTokens"]["Worker"]
    return render_user_data(
        JoinInfo(manager_addr=endpoints.swarm_manager_addr, worker_token=token),
        volume_id=volume_id,
        cache_path=endpoints.node_cache_path,
        device_wait_s=device_wait_s,
    )


def launch_in(ec2: Any, zone: str, script: str | None = None) -> str:
    extra = {} if script is None else {"UserData": script}
    answer = ec2.run_instances(
        ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro", Placement={"AvailabilityZone": zone}, **extra
    )
    return str(answer["Instances"][0]["InstanceId"])


def instance_in(ec2: Any, instance_id: str, state: str) -> dict[str, Any] | None:
    instance: dict[str, Any] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    return instance if instance["State"]["Name"] == state else None


def volume_in(ec2: Any, volume_id: str, state: str) -> dict[str, Any] | None:
    volume: dict[str, Any] = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    return volume if volume["State"] == state else None


def any_swarm_node(manager: Engine, instance_id: str) -> dict[str, Any] | None:
    return next((n for s in ("ready", "down", "unknown") if (n := swarm_node_in(manager, instance_id, s))), None)


def boot_and_attach(cloud: Sandbox, ec2: Any, manager: Engine, volume_id: str, zone: str) -> tuple[str, dict[str, Any]]:
    """Launch an instance for the volume, show that it does not join before the attach, attach,
    and return the instance id and its (activated) swarm node."""
    instance_id = launch_in(ec2, zone, user_data(manager, cloud.endpoints, volume_id))
    # The strict layer refuses to attach to a pending instance, as AWS does.
    wait_for("the instance to be running", lambda: instance_in(ec2, instance_id, "running"), 10)
    script = cloud.state_dir / "nodes" / instance_id / "user-data"
    scripts = wait_for("its boot script to run", lambda: set(procs.pids_mentioning(str(script))) or None, 10)
    # Evidence that the script looked for the device and found none: its wait loop's `sleep` (the only sleep on
    # the way to the join). Everything before the wait has run, a wrong join included.
    wait_for("its boot script to wait for the device", lambda: sleeping_below(scripts), 10)
    assert any_swarm_node(manager, instance_id) is None, "the node joined before its volume was attached"

    attached_at = time.monotonic()
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=DEVICE)
    joined = wait_for("the node to join", lambda: swarm_node_in(manager, instance_id, "ready"), 15)
    print(f"attach-to-joined {time.monotonic() - attached_at:.2f} s (attach_s {ATTACH_S})")
    activate(manager, joined["ID"])
    return instance_id, joined


def sleeping_below(ancestors: set[int]) -> bool:
    """Whether a `sleep` process runs below one of `ancestors` (a child, or a child's child, ...)."""
    parent_of: dict[int, int] = {}
    command_of: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split at the last ")".
        command_of[int(entry.name)] = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent_of[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    for pid, command in command_of.items():
        if command != "sleep":
            continue
        seen = pid
        while seen in parent_of and seen > 1:
            seen = parent_of[seen]
            if seen in ancestors:
                return True
    return False


def container_logs(docker_host: str, container_id: str) -> bytes:
    _, raw = Engine(docker_host).request("GET", f"/containers/{container_id}/logs", query={"stdout": "1"})
    return raw


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path_factory.mktemp("volumes") / "state", boot_s=BOOT_S, attach_s=ATTACH_S)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def test_a_volume_keeps_its_data_across_instances_until_deleted(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][1]["ZoneName"]
    volume_id = ec2.create_volume(AvailabilityZone=zone, Size=1, VolumeType="gp3")["VolumeId"]
    backing = cloud.state_dir / "volumes" / volume_id
    services: list[str] = []
    try:
        first, first_node = boot_and_attach(cloud, ec2, manager, volume_id, zone)
        services.append(
            cache_service(
                manager, endpoints, "writer", first_node["Description"]["Hostname"], "echo hello > /cache/f; sleep 1000"
            )
        )
        task = wait_for("the writer to run", lambda: running_task(manager, services[-1]), 15)
        assert task["NodeID"] == first_node["ID"]
        wait_for("the file on the volume", lambda: volume_file(cloud, volume_id, "f"), 5)
        assert volume_file(cloud, volume_id, "f") == b"hello\n"
        # The boot script formatted the blank volume: its blocks now hold the filesystem it made.
        assert filesystem_type(cloud, volume_id) == "xfs"
        formatted_uuid = cloud.volume_uuid(volume_id)
        assert formatted_uuid is not None
        # The mount is the node's own: on the host the cache path stays an empty folder.
        assert list(Path(endpoints.node_cache_path).iterdir()) == []
        shown = next(v for v in cloud.status()["volumes"] if v["volume_id"] == volume_id)
        assert shown == {
            "volume_id": volume_id,
            "state": "in-use",
            "availability_zone": zone,
            "attached_to": first,
            "host_path": str(backing),
        }

        ec2.terminate_instances(InstanceIds=[first])
        wait_for("the volume to be available", lambda: volume_in(ec2, volume_id, "available"), 10)
        assert volume_file(cloud, volume_id, "f") == b"hello\n"

        second, second_node = boot_and_attach(cloud, ec2, manager, volume_id, zone)
        services.append(
            cache_service(
                manager, endpoints, "reader", second_node["Description"]["Hostname"], "cat /cache/f; sleep 1000"
            )
        )
        task = wait_for("the reader to run", lambda: running_task(manager, services[-1]), 15)
        assert task["NodeID"] == second_node["ID"]
        docker_host = wait_for("the second machine", lambda: status_of(cloud, second, powered_on=True), 5)[
            "docker_host"
        ]
        container_id = task["Status"]["ContainerStatus"]["ContainerID"]
        wait_for("the file read in a new container", lambda: b"hello" in container_logs(docker_host, container_id), 5)
        assert cloud.volume_uuid(volume_id) == formatted_uuid, "formatted once: the second machine only mounted it"

        ec2.terminate_instances(InstanceIds=[second])
        wait_for("the volume to be available again", lambda: volume_in(ec2, volume_id, "available"), 10)
        ec2.delete_volume(VolumeId=volume_id)
        wait_for("the volume's file to go", lambda: not backing.exists(), 10)
        assert all(v["volume_id"] != volume_id for v in cloud.status()["volumes"])
    finally:
        for service_id in services:
            manager.call("DELETE", f"/services/{service_id}")


def test_a_node_whose_volume_never_attaches_joins_without_a_cache(cloud: Sandbox) -> None:
    # The boot waits device_wait_s for the volume, then comes up without a cache: no cache label on its
    # daemon (so the autoscaler never gives it cache work) and no cache path (so a bind mount of it fails
    # rather than write to the bare disk). The volume itself is left as it is.
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    volume_id = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]

    waiting = launch_in(ec2, zone, user_data(manager, endpoints, volume_id, device_wait_s=2))
    joined = wait_for("the node to join without its volume", lambda: swarm_node_in(manager, waiting, "ready"), 30)

    user_data_log = cloud.state_dir / "logs" / f"{waiting}.user-data.log"
    # The watcher writes the user data's output once the script has ended (the join is its last step).
    wait_for("the user data's output", lambda: user_data_log.exists() and user_data_log.read_text(), 10)
    assert f"volume {volume_id} did not appear" in user_data_log.read_text()
    engine_labels = joined["Description"]["Engine"]["Labels"]
    assert engine_labels == {ENGINE_LABEL_INSTANCE_ID: waiting}, "no cache label: nothing says the data is there"
    assert joined["Spec"]["Availability"] == "drain"
    record = cloud.machine(waiting)
    assert record is not None
    listing = subprocess.run(
        [*node.enter_argv(record), "ls", "-d", endpoints.node_cache_path], capture_output=True, text=True, check=False
    )
    assert listing.returncode != 0, "the machine has no cache path this boot"
    shown = next(v for v in cloud.status()["volumes"] if v["volume_id"] == volume_id)
    assert shown["state"] == "available"
    assert shown["host_path"] is None  # never attached: no blocks on the host yet

    ec2.terminate_instances(InstanceIds=[waiting])
    ec2.delete_volume(VolumeId=volume_id)
    wait_for("the machine off", lambda: status_of(cloud, waiting, powered_on=False), 10)


def test_detach_hides_the_device_and_stop_leaves_no_volume_behind(tmp_path: Path) -> None:
    own = Sandbox(tmp_path / "state", boot_s=BOOT_S, attach_s=ATTACH_S)
    try:
        endpoints = own.start()
        manager = Engine(endpoints.docker_host)
        ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
        zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
        volume_id = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]
        instance_id, joined = boot_and_attach(own, ec2, manager, volume_id, zone)
        service_id = cache_service(
            manager,
            endpoints,
            "writer",
            joined["Description"]["Hostname"],
            "while :; do date > /cache/now; sleep 1; done",
        )
        wait_for("the writer to run", lambda: running_task(manager, service_id), 15)
        docker_host = wait_for("the machine", lambda: status_of(own, instance_id, powered_on=True), 5)["docker_host"]
        run_dir = Path(docker_host.removeprefix("unix://")).parent
        device = run_dir / "devices" / volume_id
        # The machine's device is the loop device bound to the volume's file, mounted in the machine.
        loop = str(device.resolve())
        assert disks.loop_of(own.state_dir / "volumes" / volume_id) == loop
        machine = own.machine(instance_id)
        assert machine is not None
        assert disks.mount_points_of(loop, node.init_pid(machine)) == [endpoints.node_cache_path]

        ec2.detach_volume(VolumeId=volume_id)
        wait_for("the device to disappear", lambda: not device.is_symlink(), 5)
        wait_for("the volume to be available", lambda: volume_in(ec2, volume_id, "available"), 5)
        # Detached: unmounted in the machine, and its loop device released (the writer's container still holds a
        # bind mount of it: the kernel lets the device go with the container).
        wait_for("the machine to unmount it", lambda: not disks.mount_points_of(loop, node.init_pid(machine)), 5)
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=DEVICE)
        wait_for("the device to appear again", lambda: device.is_symlink(), 5)

        # Stopped with the volume attached, bind-mounted in the machine and written to by a container; and with
        # the failing disk made (a broken volume shows it): every loop device of the sandbox must go.
        own.break_volume(volume_id)
        sandbox_run_dir = run_dir.parent
        own.stop()
        assert leftovers(own.state_dir, sandbox_run_dir, sandbox_run_dir.name + "-") == []
        assert not host.mounts_under(Path(endpoints.node_cache_path))
    finally:
        own.stop()
