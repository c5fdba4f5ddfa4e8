"""A volume attached to a running, joined machine (a hot-buffer claim), in the sandbox: the node's udev rule runs the
cache script, which mounts the volume by the boot's rules and has the daemon name it (restarted when it runs nothing,
reloaded when it runs containers); an unreadable volume is never formatted and never named."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warmswarm_autoscaling.ports import JoinInfo
from warmswarm_autoscaling.userdata import render_user_data
from warmswarm_models import ENGINE_LABEL_CACHE_VOLUME, INSTANCE_VOLUME_TAG
from warmswarm_sandbox import aws, host
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.engine import Engine

from .sandbox_probes import (
    AMI,
    activate,
    cache_service,
    filesystem_type,
    owners_volume,
    running_task,
    status_of,
    swarm_node_in,
    volume_file,
    wait_for,
)

BOOT_S = 0.5
ATTACH_S = 0.5
DEVICE = "/dev/sdf"


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path_factory.mktemp("hot") / "state", boot_s=BOOT_S, attach_s=ATTACH_S)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def buffer_machine(cloud: Sandbox, ec2: Any, zone: str) -> tuple[str, dict[str, Any]]:
    """A machine launched as a buffer's is: no volume in its user data; joined drained. Its instance id and node."""
    manager = Engine(cloud.endpoints.docker_host)
    token = manager.get("/swarm")["JoinTokens"]["Worker"]
    script = render_user_data(
        JoinInfo(manager_addr=cloud.endpoints.swarm_manager_addr, worker_token=token),
        cache_path=cloud.endpoints.node_cache_path,
        device_wait_s=10,
    )
    answer = ec2.run_instances(
        ImageId=AMI,
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.micro",
        Placement={"AvailabilityZone": zone},
        UserData=script,
    )
    instance_id = str(answer["Instances"][0]["InstanceId"])
    joined = wait_for("the buffer machine to join", lambda: swarm_node_in(manager, instance_id, "ready"), 60)
    assert ENGINE_LABEL_CACHE_VOLUME not in joined["Description"]["Engine"]["Labels"]
    assert joined["Spec"]["Availability"] == "drain"
    return instance_id, joined


def daemon_pid(cloud: Sandbox, instance_id: str) -> int:
    record = cloud.machine(instance_id)
    assert record is not None
    return int(Path(record.run_dir, "dockerd.pid").read_text())


def claim(ec2: Any, instance_id: str, volume_id: str) -> float:
    """As the autoscaler's claim: the instance tagged with the volume first, then the attach. When it attached."""
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": INSTANCE_VOLUME_TAG, "Value": volume_id}])
    attached_at = time.monotonic()
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=DEVICE)
    return attached_at


def named(manager: Engine, node_id: str, volume_id: str, attached_at: float, how: str) -> None:
    """Until the node's engine labels name the volume (its daemon restarted or reloaded); prints how long it took."""

    def says_so() -> bool:
        return node_labels(manager, node_id).get(ENGINE_LABEL_CACHE_VOLUME) == volume_id

    wait_for("the node's labels to name the volume", says_so, 60)
    print(f"attach-to-labelled ({how}) {time.monotonic() - attached_at:.2f} s (attach_s {ATTACH_S})")


def node_labels(manager: Engine, node_id: str) -> dict[str, str]:
    labels: dict[str, str] = manager.get(f"/nodes/{node_id}")["Description"]["Engine"].get("Labels") or {}
    return labels


def test_a_blank_volume_attached_to_a_running_idle_machine_is_mounted_and_named(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    instance_id, joined = buffer_machine(cloud, ec2, zone)
    pid_before = daemon_pid(cloud, instance_id)
    volume_id: str = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]

    attached_at = claim(ec2, instance_id, volume_id)

    named(manager, joined["ID"], volume_id, attached_at, "restart")
    assert daemon_pid(cloud, instance_id) != pid_before, "a daemon that ran nothing is restarted: its node re-registers"
    # The blank volume was formatted (by the cache script's real mkfs, on the volume's loop device).
    assert filesystem_type(cloud, volume_id) == "xfs"

    # The node takes work with the data there: a container writes through the cache path into the volume.
    activate(manager, joined["ID"])
    service_id = cache_service(
        manager, endpoints, "hot-writer", joined["Description"]["Hostname"], "echo hot > /cache/f; sleep 1000"
    )
    try:
        wait_for("the writer to run", lambda: running_task(manager, service_id), 30)
        assert wait_for("the file on the volume", lambda: volume_file(cloud, volume_id, "f"), 10) == b"hot\n"
    finally:
        manager.call("DELETE", f"/services/{service_id}")
        ec2.terminate_instances(InstanceIds=[instance_id])
    wait_for("the machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)
    assert volume_file(cloud, volume_id, "f") == b"hot\n", "the volume outlives the machine"


def test_an_unreadable_volume_attached_to_a_running_machine_is_never_formatted_nor_named(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    instance_id, joined = buffer_machine(cloud, ec2, zone)
    volume_id: str = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]
    # The owner's data: an XFS filesystem with a file on it, written before it was ever attached (as a volume
    # made from a snapshot is). Then its disk fails: every read the machine makes answers EIO.
    backing = cloud.state_dir / "volumes" / volume_id
    owners_volume(backing, b"mine\n")
    uuid_before = cloud.volume_uuid(volume_id)
    assert uuid_before is not None
    cloud.break_volume(volume_id)

    claim(ec2, instance_id, volume_id)

    unit_log = cloud.state_dir / "logs" / f"{instance_id}.warmswarm-hot-cache.log"

    def refusal() -> str | None:
        said = unit_log.read_text() if unit_log.exists() else ""
        return said if "cannot be read" in said else None

    # blkid -p finds no signature on a disk it cannot read (it exits 2, as for a blank one): the zero check's read
    # error is what refuses it.
    refused = wait_for("the cache script to refuse the volume", refusal, 30)
    assert "not formatting it; this machine takes no work for it" in refused
    assert cloud.volume_uuid(volume_id) == uuid_before, "never formatted: the same filesystem"
    assert volume_file(cloud, volume_id, "f") == b"mine\n", "and the owner's file on it"
    assert ENGINE_LABEL_CACHE_VOLUME not in node_labels(manager, joined["ID"])
    node = manager.get(f"/nodes/{joined['ID']}")
    assert node["Spec"]["Availability"] == "drain"
    assert node["Status"]["State"] == "ready"
    ec2.terminate_instances(InstanceIds=[instance_id])
    wait_for("the machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)
    assert volume_file(cloud, volume_id, "f") == b"mine\n", "the volume is left as it is"


def test_a_machine_running_containers_is_reloaded_and_its_containers_keep_running(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    instance_id, joined = buffer_machine(cloud, ec2, zone)
    activate(manager, joined["ID"])
    spec = {
        "Name": "hot-bystander",
        "TaskTemplate": {
            "ContainerSpec": {"Image": endpoints.sandbox_image, "Command": ["sleep", "100000"]},
            "Placement": {"Constraints": [f"node.hostname=={joined['Description']['Hostname']}"]},
        },
        "Mode": {"Replicated": {"Replicas": 1}},
    }
    service_id = str(manager.post("/services/create", spec)["ID"])
    try:
        task = wait_for("the bystander to run", lambda: running_task(manager, service_id), 30)
        pid_before = daemon_pid(cloud, instance_id)
        volume_id: str = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]

        attached_at = claim(ec2, instance_id, volume_id)

        # The swarm agent sends a node's description every 20 s: the reloaded labels show within that.
        named(manager, joined["ID"], volume_id, attached_at, "reload")
        assert daemon_pid(cloud, instance_id) == pid_before, "a daemon running containers is reloaded, not restarted"
        still = running_task(manager, service_id)
        assert still is not None
        assert still["ID"] == task["ID"], "the running container was never stopped"
    finally:
        manager.call("DELETE", f"/services/{service_id}")
        ec2.terminate_instances(InstanceIds=[instance_id])
    wait_for("the machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)


def loop_mounts(mountinfo: Path) -> set[str]:
    """The mount points in a mountinfo whose source is a loop device (a disk of the sandbox's, or anyone's)."""
    found = set()
    for line in mountinfo.read_text().splitlines():
        fields, _, described = line.partition(" - ")
        if described.split()[1].startswith("/dev/loop"):
            found.add(fields.split()[4])
    return found


def test_a_machine_never_holds_the_hosts_mounts_of_loop_devices(cloud: Sandbox) -> None:
    """A machine's mount namespace starts as a copy of the host's: were a loop device the host mounted in it (the
    failing disk's filesystem, another sandbox's, a test's own disk), it could not be released while the machine
    lives."""
    ec2 = aws.ec2_client(cloud.endpoints.ec2_endpoint_url, cloud.endpoints.aws_region)
    zone = ec2.describe_availability_zones()["AvailabilityZones"][0]["ZoneName"]
    volume_id: str = ec2.create_volume(AvailabilityZone=zone, Size=1)["VolumeId"]
    cloud.break_volume(volume_id)  # makes the failing disk: a filesystem the host mounts below its disks dir
    hosts = loop_mounts(Path("/proc/self/mountinfo"))
    # This sandbox's own: another sandbox on the host (the suite's other worker) may have a failing disk of its own.
    failing = [Path(point) for point in hosts if Path(point) == cloud.failing_disk_dir]
    assert len(failing) == 1, f"the host holds the mount: {hosts}"
    # What a machine did before: a new mount namespace copied from the host's keeps the mount. Teardown's report
    # names such a holder.
    copy = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sleep", "60"])
    try:
        wait_for("the copy's namespace", lambda: copy.pid in host.holders_of_mounts_under(failing[0].parent), 10)
    finally:
        copy.kill()
        copy.wait()

    instance_id, _ = buffer_machine(cloud, ec2, zone)

    machine = cloud.machine(instance_id)
    assert machine is not None
    # The machine's `unshare` shares its mount namespace (it stays in the host's pid namespace: its pid is ours).
    assert loop_mounts(Path(f"/proc/{machine.pid}/mountinfo")) == set()
    assert machine.pid not in host.holders_of_mounts_under(failing[0].parent)
    ec2.terminate_instances(InstanceIds=[instance_id])
    wait_for("the machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)
