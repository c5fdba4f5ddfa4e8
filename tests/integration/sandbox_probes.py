"""What the sandbox tests look for, and how patiently: an instance's swarm node in a state, a service's running task,
an instance's line in the sandbox's status, a volume's file, what a stopped sandbox leaves on the host; a wait for
any of them."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from warmswarm_sandbox import disks, host, procs
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.node import ENGINE_LABEL_INSTANCE_ID

T = TypeVar("T")

AMI = "ami-12345678"  # moto accepts any image id
STOP_GRACE_NS = 1_000_000_000  # busybox sh as pid 1 ignores SIGTERM: do not wait 10 s for it


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def swarm_node_in(manager: Engine, instance_id: str, state: str) -> dict[str, Any] | None:
    """The instance's swarm node (matched by its engine label) if it is in state, else None."""
    for swarm_node in manager.get("/nodes"):
        labels = swarm_node["Description"]["Engine"].get("Labels") or {}
        if labels.get(ENGINE_LABEL_INSTANCE_ID) == instance_id and swarm_node["Status"]["State"] == state:
            return dict(swarm_node)
    return None


def running_task(manager: Engine, service_id: str) -> dict[str, Any] | None:
    filters = json.dumps({"service": [service_id], "desired-state": ["running"]})
    tasks = manager.get("/tasks", query={"filters": filters})
    return next((dict(t) for t in tasks if t["Status"]["State"] == "running"), None)


def status_of(sandbox: Sandbox, instance_id: str, *, powered_on: bool | None = None) -> dict[str, Any] | None:
    """The instance's line in status(); with powered_on, only if its machine is (or is not) on."""
    shown: dict[str, Any] = next(i for i in sandbox.status()["instances"] if i["instance_id"] == instance_id)
    if powered_on is not None and (shown["docker_host"] is not None) != powered_on:
        return None
    return shown


def leftovers(state_dir: Path, run_dir: Path, cgroup_prefix: str) -> list[str]:
    """Everything of a stopped sandbox still on the host: live processes, mounts, loop devices, cgroups, files."""
    found = []
    for fragment in (f"{run_dir}/", f"{state_dir}/"):
        for pid in procs.pids_mentioning(fragment):
            ticks = procs.start_ticks_of(pid)
            if ticks is not None and procs.is_alive(procs.ProcRecord(pid, ticks)):  # zombies are gone
                found.append(f"process {pid}")
    found += [f"mount {m}" for m in host.mounts_under(state_dir) + host.mounts_under(run_dir)]
    # A loop device over one of its files (a volume's, the failing disk's), as `losetup -a` lists it.
    ours = disks.loops_under([state_dir, run_dir])
    found += [f"loop device {device} ({loop.back_file})" for device, loop in ours.items()]
    found += [f"cgroup {c}" for c in host.cgroup_dirs(cgroup_prefix)]
    found += [f"path {p}" for p in (run_dir, state_dir) if p.exists()]
    return found


def volume_file(sandbox: Sandbox, volume_id: str, name: str) -> bytes | None:
    """A file at the top of the volume's filesystem, as the host reads its blocks now; None while there is none."""
    return (sandbox.volume_files(volume_id) or {}).get(name)


def filesystem_type(sandbox: Sandbox, volume_id: str) -> str:
    """What blkid -p finds on the volume's blocks ("" for none)."""
    backing = sandbox.state_dir / "volumes" / volume_id
    probed = subprocess.run(["blkid", "-p", "-s", "TYPE", "-o", "value", str(backing)], capture_output=True, text=True)
    return probed.stdout.strip()


def owners_volume(backing: Path, content: bytes) -> None:
    """A volume that already holds an owner's data, made on the host before its first attach: its blocks (a sparse
    file of 1 GiB, as the sandbox makes them) hold an XFS filesystem with the file `f`."""
    backing.parent.mkdir(parents=True, exist_ok=True)
    with backing.open("xb") as blocks:
        blocks.truncate(disks.GIB)
    subprocess.run(["mkfs.xfs", "-q", str(backing)], check=True)
    with tempfile.TemporaryDirectory(prefix="wsbx-owner-") as peek:
        subprocess.run(["mount", "-o", "loop", str(backing), peek], check=True)
        try:
            Path(peek, "f").write_bytes(content)
        finally:
            subprocess.run(["umount", peek], check=True)


def activate(manager: Engine, node_id: str) -> None:
    # The boot script joins drained (the autoscaler activates a node once it is labelled).
    current = manager.get(f"/nodes/{node_id}")
    spec = current["Spec"] | {"Availability": "active"}
    manager.post(f"/nodes/{node_id}/update", spec, query={"version": str(current["Version"]["Index"])})


def cache_service(manager: Engine, endpoints: Endpoints, name: str, hostname: str, script: str) -> str:
    """A service pinned to one node, with the node's cache path at /cache."""
    spec = {
        "Name": name,
        "TaskTemplate": {
            "ContainerSpec": {
                "Image": endpoints.sandbox_image,
                "Command": ["sh", "-c", script],
                "Mounts": [{"Type": "bind", "Source": endpoints.node_cache_path, "Target": "/cache"}],
                "StopGracePeriod": STOP_GRACE_NS,
            },
            "Placement": {"Constraints": [f"node.hostname=={hostname}"]},
        },
        "Mode": {"Replicated": {"Replicas": 1}},
    }
    return str(manager.post("/services/create", spec)["ID"])
