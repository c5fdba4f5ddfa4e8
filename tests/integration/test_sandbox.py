"""The sandbox as a real cloud: a launch boots a machine that joins and works, terminate powers it off, stop cleans."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from warmswarm_sandbox import aws, host, procs
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.node import ENGINE_LABEL_INSTANCE_ID

from .sandbox_probes import AMI, leftovers, running_task, status_of, swarm_node_in, wait_for

BOOT_S = 0.5


def join_script(manager: Engine, endpoints: Endpoints) -> str:
    token = manager.get("/swarm")["JoinTokens"]["Worker"]
    return (
        "#!/bin/sh\nset -eu\n"
        f"docker swarm join --token {token} "
        '--advertise-addr "$WARMSWARM_NODE_ADDR" --listen-addr "$WARMSWARM_NODE_ADDR:2377" '
        f"{endpoints.swarm_manager_addr}\n"
    )


def launch(ec2: Any, user_data: str | None = None) -> str:
    extra = {} if user_data is None else {"UserData": user_data}
    answer = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro", **extra)
    return str(answer["Instances"][0]["InstanceId"])


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    # A pytest tmp dir is long: this also proves sockets do not live under the state dir.
    sandbox = Sandbox(tmp_path_factory.mktemp("sandbox-with-a-long-name-" + "x" * 40) / "state", boot_s=BOOT_S)
    sandbox.start()
    yield sandbox
    sandbox.stop()


def test_an_instance_boots_joins_runs_work_and_powers_off(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    manager = Engine(endpoints.docker_host)
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)

    launched = time.monotonic()
    instance_id = launch(ec2, join_script(manager, endpoints))
    joined = wait_for("the instance's node to be Ready", lambda: swarm_node_in(manager, instance_id, "ready"), 20)
    print(f"boot-to-Ready {time.monotonic() - launched:.2f} s (boot_s {BOOT_S})")
    instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert joined["Description"]["Hostname"] == instance["PrivateDnsName"].split(".")[0]
    assert joined["Spec"]["Role"] == "worker"

    shown = wait_for("status to show the machine", lambda: status_of(cloud, instance_id, powered_on=True), 5)
    assert shown["state"] == "running"
    assert shown["node"] == joined["ID"]
    assert shown["availability_zone"] == instance["Placement"]["AvailabilityZone"]
    machine = Engine(shown["docker_host"])
    assert machine.answers()
    assert any(endpoints.sandbox_image in (i.get("RepoTags") or []) for i in machine.get("/images/json"))

    service_id = manager.post(
        "/services/create",
        {
            "Name": "sandbox-sleeper",
            "TaskTemplate": {
                "ContainerSpec": {
                    "Image": endpoints.sandbox_image,
                    "Command": ["sleep", "1000"],
                    # busybox sleep as pid 1 ignores SIGTERM: do not wait 10 s for it.
                    "StopGracePeriod": 1_000_000_000,
                },
            },
            "Mode": {"Replicated": {"Replicas": 1}},
        },
    )["ID"]
    try:
        task = wait_for("the service's task to run", lambda: running_task(manager, service_id), 20)
        assert task["NodeID"] == joined["ID"]

        terminated = time.monotonic()
        ec2.terminate_instances(InstanceIds=[instance_id])
        wait_for("the manager to see the node down", lambda: swarm_node_in(manager, instance_id, "down"), 10)
        print(f"power-off-to-down {time.monotonic() - terminated:.2f} s")
        shown = wait_for("status to show no machine", lambda: status_of(cloud, instance_id, powered_on=False), 5)
        assert shown["state"] == "terminated"
        assert shown["node"] is None
        assert not machine.answers()
    finally:
        manager.call("DELETE", f"/services/{service_id}")


def test_a_failing_user_data_is_logged_and_the_watcher_carries_on(cloud: Sandbox) -> None:
    endpoints = cloud.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    watcher_log = cloud.state_dir / "logs" / "boot-watcher.log"

    broken = launch(ec2, "#!/bin/sh\necho 'cannot find the volume' >&2\nexit 3\n")
    wait_for("the failure in the watcher's log", lambda: f"{broken}: user data exited 3" in watcher_log.read_text(), 20)
    assert "cannot find the volume" in watcher_log.read_text()
    # Like a real machine with a broken boot script, it stays on (and never joined).
    shown = wait_for("the broken machine", lambda: status_of(cloud, broken, powered_on=True), 5)
    assert shown["node"] is None

    # The watcher lives on: the next instance (no user data at all) still gets a machine.
    plain = launch(ec2)
    wait_for("a machine for the next instance", lambda: status_of(cloud, plain, powered_on=True), 20)
    ec2.terminate_instances(InstanceIds=[broken, plain])
    wait_for("the broken machine off", lambda: status_of(cloud, broken, powered_on=False), 10)
    wait_for("the plain machine off", lambda: status_of(cloud, plain, powered_on=False), 10)


def test_stop_leaves_nothing_behind(tmp_path: Path) -> None:
    own = Sandbox(tmp_path / "state", boot_s=0)
    try:
        started = time.monotonic()
        endpoints = own.start()
        print(f"sandbox up in {time.monotonic() - started:.2f} s")
        manager = Engine(endpoints.docker_host)
        ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
        # A running machine with a running container: mounts, shims and cgroups for stop() to clear.
        instance_id = launch(ec2, join_script(manager, endpoints))
        wait_for("the node to be Ready", lambda: swarm_node_in(manager, instance_id, "ready"), 20)
        docker_host = wait_for("a machine", lambda: status_of(own, instance_id, powered_on=True), 5)["docker_host"]
        Engine(docker_host).post(
            "/containers/create",
            {"Image": endpoints.sandbox_image, "Cmd": ["sleep", "1000"]},
            query={"name": "sleeper"},
        )
        Engine(docker_host).post("/containers/sleeper/start")
        # Processes spawned for the sandbox (the services, later) end with it, or earlier with kill().
        sleepers = {name: own.spawn(name, ["sleep", "1000"], {"PATH": procs.SYSTEM_PATH}) for name in ("early", "late")}
        sleeper_records = {name: procs.record_of(pid) for name, pid in sleepers.items()}
        own.kill("early")
        assert not procs.is_alive(sleeper_records["early"])
        own.add_endpoint("SLEEPER_URL", "http://127.0.0.1:1")
        assert own.endpoints_env()["SLEEPER_URL"] == "http://127.0.0.1:1"
        assert (own.state_dir / "endpoints.env").read_text().startswith("EC2_ENDPOINT_URL=")
        run_dir = Path(endpoints.docker_host.removeprefix("unix://")).parent.parent
        cgroup_prefix = run_dir.name + "-"
        assert host.cgroup_dirs(cgroup_prefix), "the container should have made cgroups to clean up"

        own.stop()

        assert leftovers(own.state_dir, run_dir, cgroup_prefix) == []
        assert not procs.is_alive(sleeper_records["late"])
    finally:
        own.stop()  # a no-op after the stop above; the cleanup if the test failed before it


def test_the_engine_label_is_the_contracts() -> None:
    keys = pytest.importorskip("warmswarm_models.keys")
    assert keys.ENGINE_LABEL_INSTANCE_ID == ENGINE_LABEL_INSTANCE_ID
