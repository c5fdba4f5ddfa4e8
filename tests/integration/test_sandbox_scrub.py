"""A recycled machine's scrub in the sandbox (issues 33, 42): stopped, tagged `warmswarm:scrub=pending-1.<t>` and
started, its boot runs the project's own node_scrub.sh (installed by render_user_data's user data) before the daemon:
an owner's container, its writable layer and its volumes are gone from the machine's data dir (where the daemon's
--data-root puts it, read from docker.service as the sandbox plays it), the image stays, and the node rejoins as itself
with the proof label naming the token. A scrub that fails part-way stops the boot; the next boot scrubs in full. The
daemon restarted within that boot (a hot claim's) leaves the next owner's work; a reboot while the tag still reads
pending scrubs again.

The failure is made the least invasive way that is still real: a bind mount of the owner's volume dir onto itself,
made on the host while the machine is off (a machine's mount namespace starts as a copy of the host's). The scrub
looks for mounts before each removal and refuses there, after it removed the containers and their layers: the
script's own refusal path, with no hook in it for tests. Unmounting it on the host clears the fault.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warmswarm_autoscaling.ports import JoinInfo
from warmswarm_autoscaling.userdata import render_user_data
from warmswarm_models import ENGINE_LABEL_SCRUBBED, INSTANCE_SCRUB_TAG
from warmswarm_sandbox import aws, host, machine, node
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.node import NodeRecord

from .sandbox_probes import AMI, activate, status_of, swarm_node_in, wait_for

BOOT_S = 0.5
START_S = 0.3
VOLUME = "owners-data"


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    sandbox = Sandbox(tmp_path_factory.mktemp("scrub") / "state", boot_s=BOOT_S, start_s=START_S)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def instance_state(ec2: Any, instance_id: str) -> str:
    return str(ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]["State"]["Name"])


def owners_container(docker_host: str, image: str) -> str:
    """On the machine's own daemon, as an owner's task leaves it: a running container that wrote to a named volume,
    to an anonymous one and to its own writable layer. Its id, once the files are written."""
    engine = Engine(docker_host)
    spec = {
        "Image": image,
        "Cmd": [
            "sh",
            "-c",
            "echo secret > /data/f; echo anon > /anon/f; echo rw > /rw-file; touch /done; sleep 100000",
        ],
        "HostConfig": {
            "NetworkMode": "none",  # the sandbox's daemons have no bridge
            "Mounts": [{"Type": "volume", "Source": VOLUME, "Target": "/data"}, {"Type": "volume", "Target": "/anon"}],
        },
    }
    container_id = str(engine.post("/containers/create", spec)["Id"])
    engine.post(f"/containers/{container_id}/start")

    def written() -> bool:
        status, _ = engine.request("GET", f"/containers/{container_id}/archive", query={"path": "/done"})
        return status == 200

    wait_for("the owner's container to write its files", written, 20)
    return container_id


def writable_layer(data_dir: Path, container_id: str) -> Path:
    """The container's writable layer's files in the data dir, found as the scrub finds it (layerdb mounts)."""
    [entry] = data_dir.glob(f"image/*/layerdb/mounts/{container_id}")
    driver = entry.parent.parent.parent.name
    mount_id = (entry / "mount-id").read_text()
    return data_dir / driver / mount_id / "diff" if driver != "vfs" else data_dir / "vfs" / "dir" / mount_id


TOKEN = "1.1765000000"  # generation 1, marked at that moment (AWS's clock)


def stop(cloud: Sandbox, ec2: Any, instance_id: str) -> None:
    """The instance stopped: its machine off, its disk kept."""
    ec2.stop_instances(InstanceIds=[instance_id])
    wait_for("the instance stopped", lambda: instance_state(ec2, instance_id) == "stopped", 20)
    wait_for("its machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)


def stop_and_tag(cloud: Sandbox, ec2: Any, instance_id: str, token: str) -> None:
    """As the recycle does: the instance stopped, then tagged for its scrub."""
    stop(cloud, ec2, instance_id)
    ec2.create_tags(Resources=[instance_id], Tags=[{"Key": INSTANCE_SCRUB_TAG, "Value": f"pending-{token}"}])


def boot_stopped(cloud: Sandbox, instance_id: str) -> NodeRecord | None:
    """The instance's machine once its boot stopped (a unit Docker requires failed), else None."""
    record = cloud.machine(instance_id)
    return record if record is not None and record.boot_stopped else None


def restart_docker(record: NodeRecord) -> None:
    """`systemctl restart docker` inside the machine (the sandbox's systemctl: its init runs the units Docker
    requires again, then the daemon), with the environment its boot scripts see."""
    env = machine.boot_env(
        instance_id=str(record.instance_id),
        addr=record.addr,
        run_dir=Path(record.run_dir),
        root_dir=Path(record.root_dir),
    )
    subprocess.run([*node.enter_argv(record), "systemctl", "restart", "docker"], env=env, check=True, timeout=90)


def scrub_times_s(boot_log: Path) -> list[float]:
    """What each scrub that finished said it took (node_scrub.sh's last line, in the machine's boot log)."""
    text = boot_log.read_text() if boot_log.exists() else ""
    return [float(s) for s in re.findall(r"scrub of token [0-9.]+ done in ([0-9.]+) s", text)]


def test_a_recycled_machine_scrubs_at_boot_refuses_to_start_docker_when_the_scrub_fails_and_proves_a_full_scrub(
    cloud: Sandbox,
) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    token = manager.get("/swarm")["JoinTokens"]["Worker"]
    script = render_user_data(
        JoinInfo(manager_addr=endpoints.swarm_manager_addr, worker_token=token), cache_path=endpoints.node_cache_path
    )
    answer = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro", UserData=script)
    instance_id = str(answer["Instances"][0]["InstanceId"])
    volume_dir: Path | None = None
    try:
        joined = wait_for("the machine to join", lambda: swarm_node_in(manager, instance_id, "ready"), 60)
        assert ENGINE_LABEL_SCRUBBED not in joined["Description"]["Engine"]["Labels"], "a first boot scrubs nothing"
        activate(manager, joined["ID"])
        record = cloud.machine(instance_id)
        assert record is not None
        data_dir = Path(record.data_dir)
        container_id = owners_container(record.docker_host, endpoints.sandbox_image)
        layer = writable_layer(data_dir, container_id)
        assert (layer / "rw-file").read_text() == "rw\n"
        volume_dir = data_dir / "volumes" / VOLUME
        assert (volume_dir / "_data" / "f").read_text() == "secret\n"
        anonymous = [v for v in (data_dir / "volumes").iterdir() if v.is_dir() and v.name != VOLUME]
        assert len(anonymous) == 1
        images_before = sorted(p.name for p in data_dir.glob("image/*/imagedb/content/sha256/*"))
        assert images_before

        # A scrub that fails part-way: the owner's volume dir is a mount point (see the module's docstring).
        stop_and_tag(cloud, ec2, instance_id, TOKEN)
        subprocess.run(["mount", "--bind", str(volume_dir), str(volume_dir)], check=True)
        ec2.start_instances(InstanceIds=[instance_id])
        stopped = wait_for("the boot to stop", lambda: boot_stopped(cloud, instance_id), 30)
        boot_log = cloud.state_dir / "logs" / f"{instance_id}.dockerd.boot.log"
        assert f"something is mounted at or under {data_dir / 'volumes'}" in boot_log.read_text()
        assert not Engine(stopped.docker_host).answers(), "docker does not start: the node never rejoins"
        assert not (data_dir / "containers" / container_id).exists(), "part-way: the containers went first"
        assert (volume_dir / "_data" / "f").read_text() == "secret\n", "part-way: the volumes are still there"
        assert ENGINE_LABEL_SCRUBBED not in Path(stopped.daemon_json).read_text()

        # The fault cleared, the next boot (the tag still pending) scrubs in full and proves it.
        host.unmount_under(volume_dir)
        stop(cloud, ec2, instance_id)
        started_at = time.monotonic()
        ec2.start_instances(InstanceIds=[instance_id])

        def proven() -> dict[str, Any] | None:
            found = swarm_node_in(manager, instance_id, "ready")
            labels = found["Description"]["Engine"].get("Labels") or {} if found else {}
            return found if labels.get(ENGINE_LABEL_SCRUBBED) == TOKEN else None

        try:
            rejoined = wait_for("the node back with the proof", proven, 60)
        except AssertionError as error:
            seen = [(n["Status"], n["Description"]["Engine"].get("Labels")) for n in manager.get("/nodes")]
            watcher = (cloud.state_dir / "logs" / "boot-watcher.log").read_text()[-3000:]
            raise AssertionError(f"{error}\nnodes: {seen}\nboot log:\n{boot_log.read_text()}\n{watcher}") from None
        proven_at = time.monotonic()
        assert rejoined["ID"] == joined["ID"], "the same swarm node: its identity was kept"
        assert not (data_dir / "containers" / container_id).exists()
        assert not layer.exists(), "the owner's writable layer is gone"
        assert not list(data_dir.glob(f"image/*/layerdb/mounts/{container_id}"))
        assert not volume_dir.exists()
        assert not any(p.exists() for p in anonymous)
        assert sorted(p.name for p in data_dir.glob("image/*/imagedb/content/sha256/*")) == images_before
        labels = json.loads(Path(stopped.daemon_json).read_text())["labels"]
        assert f"{ENGINE_LABEL_SCRUBBED}={TOKEN}" in labels
        again = cloud.machine(instance_id)
        assert again is not None
        engine = Engine(again.docker_host)
        assert engine.get("/containers/json", query={"all": "1"}) == []
        assert [v["Name"] for v in engine.get("/volumes")["Volumes"] or []] == []
        assert any(endpoints.sandbox_image in (i.get("RepoTags") or []) for i in engine.get("/images/json"))
        # Nothing on the machine's disks (data dir, root dir) names the owner's container any more.
        naming = subprocess.run(
            ["grep", "-rl", container_id, str(data_dir), again.root_dir], capture_output=True, text=True, check=False
        )
        assert naming.stdout.split() == []
        [took_s] = scrub_times_s(boot_log)
        driver = layer.parent.parent.name
        print(f"scrub {took_s:.2f} s on {driver} (node_scrub.sh's own measure, /proc/uptime before and after)")
        print(f"start-to-proven {proven_at - started_at:.2f} s (start_s {START_S}; the manager's view of the node)")

        # The next owner's work on the machine; the daemon restarted within this boot (as a hot claim does) runs its
        # required units again while the tag still reads pending: this boot's marker keeps the scrub from running.
        engine.post("/volumes/create", {"Name": "next-owners"})
        restart_docker(again)
        assert [v["Name"] for v in Engine(again.docker_host).get("/volumes")["Volumes"] or []] == ["next-owners"]
        assert f"scrub {TOKEN} was done in this boot already" in boot_log.read_text()
        assert f"{ENGINE_LABEL_SCRUBBED}={TOKEN}" in json.loads(Path(again.daemon_json).read_text())["labels"]
        assert len(scrub_times_s(boot_log)) == 1

        # A reboot while the tag still reads pending (not yet marked): the proof on the disk is no reason to skip.
        stop(cloud, ec2, instance_id)
        ec2.start_instances(InstanceIds=[instance_id])
        wait_for("the reboot to scrub again", lambda: len(scrub_times_s(boot_log)) == 2, 60)
        rebooted = wait_for("the machine back", lambda: cloud.machine(instance_id), 20)
        wait_for("its daemon", lambda: Engine(rebooted.docker_host).answers(), 60)
        assert Engine(rebooted.docker_host).get("/volumes")["Volumes"] in (None, []), "the next owner's volume is gone"
        assert f"{ENGINE_LABEL_SCRUBBED}={TOKEN}" in json.loads(Path(rebooted.daemon_json).read_text())["labels"]
    finally:
        if volume_dir is not None:
            host.unmount_under(volume_dir)
        ec2.terminate_instances(InstanceIds=[instance_id])
    wait_for("the machine off", lambda: status_of(cloud, instance_id, powered_on=False), 20)
