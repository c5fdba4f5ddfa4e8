"""One machine of the sandbox: a Docker daemon in its own uts/mount/pid namespaces, powered on and off."""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from pathlib import Path

from warmswarm_sandbox import host, procs
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.layout import write_atomically

# Must equal warmswarm_models.keys.ENGINE_LABEL_INSTANCE_ID. The sandbox plays AWS and the AMI,
# so it does not import the project's contract; the integration test checks the two agree.
ENGINE_LABEL_INSTANCE_ID = "warmswarm.instance-id"

ENGINE_START_TIMEOUT_S = 30.0
# Below a machine's run dir: its attached volumes, one entry per volume id (its /dev/disk/by-id).
DEVICE_DIR_NAME = "devices"


@dataclass(frozen=True)
class NodeRecord:
    """A powered-on daemon, written to node.json so any process (status, down) can find it."""

    name: str  # the machine's hostname, also the swarm node's Description.Hostname
    addr: str  # its loopback address, for --advertise-addr/--listen-addr
    instance_id: str | None  # None for the manager, which is not an EC2 instance here
    pid: int  # the `unshare` process: SIGKILL to it powers the whole machine off
    start_ticks: int
    run_dir: str  # sockets and exec root, short path
    data_dir: str  # --data-root
    # Unique as a prefix too (fixed-width names), so removing it never touches a sibling's.
    cgroup_parent: str
    docker_host: str

    @property
    def device_dir(self) -> str:
        """Where the hypervisor shows this machine's attached volumes (WARMSWARM_DEVICE_DIR of its
        boot script). In the run dir: a short path, and gone with the machine."""
        return f"{self.run_dir}/{DEVICE_DIR_NAME}"

    @property
    def proc(self) -> procs.ProcRecord:
        return procs.ProcRecord(pid=self.pid, start_ticks=self.start_ticks)

    def is_powered_on(self) -> bool:
        return procs.is_alive(self.proc)

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> NodeRecord:
        return cls(**json.loads(path.read_text()))


def power_on(
    *,
    name: str,
    addr: str,
    instance_id: str | None,
    run_dir: Path,
    data_dir: Path,
    cgroup_parent: str,
    log_path: Path,
) -> NodeRecord:
    """Start the machine and return at once; Engine(record.docker_host).wait_until_up() waits."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    # Made here, not when a volume attaches: once power_off has removed the run dir nothing may
    # bring part of it back.
    (run_dir / DEVICE_DIR_NAME).mkdir(exist_ok=True)
    docker_host = f"unix://{run_dir}/docker.sock"
    labels = [] if instance_id is None else ["--label", f"{ENGINE_LABEL_INSTANCE_ID}={instance_id}"]
    dockerd = [
        "dockerd",
        "--data-root", str(data_dir),
        "--exec-root", f"{run_dir}/exec",
        "--pidfile", f"{run_dir}/dockerd.pid",
        "-H", docker_host,
        # Loopback only: no bridge, no NAT, no iptables, no proxy, no resolver but loopback.
        "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
        "--userland-proxy=false", "--dns", "127.0.0.1",
        "--cgroup-parent", cgroup_parent,
        *labels,
    ]  # fmt: skip
    argv = [
        # Own hostname, mounts and pids, the host's network: the node is reachable at its own
        # loopback address. --kill-child makes SIGKILL to unshare take down the whole pid namespace.
        "unshare", "--uts", "--mount", "--propagation", "private", "--pid", "--fork",
        "--mount-proc", "--kill-child",
        "sh", "-c", 'hostname "$0" && exec "$@"', name,
        # tini as pid 1 reaps orphans the way a machine's init would.
        "tini", "-s", "--",
        # Swarm must use the imported image and never try a registry (there is none).
        "env", "DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1",
        *dockerd,
    ]  # fmt: skip
    proc = procs.spawn_detached(argv, env={"PATH": procs.SYSTEM_PATH}, log_path=log_path)
    return NodeRecord(
        name=name,
        addr=addr,
        instance_id=instance_id,
        pid=proc.pid,
        start_ticks=proc.start_ticks,
        run_dir=str(run_dir),
        data_dir=str(data_dir),
        cgroup_parent=cgroup_parent,
        docker_host=docker_host,
    )


def wait_until_up(record: NodeRecord, timeout_s: float = ENGINE_START_TIMEOUT_S) -> Engine:
    engine = Engine(record.docker_host)
    engine.wait_until_up(timeout_s, still_booting=record.is_powered_on)
    return engine


def init_pid(record: NodeRecord) -> int:
    """The machine's pid 1 (tini), seen from the host: the process whose namespaces are the
    machine's. `unshare` itself stays in the host's pid namespace."""
    children = Path(f"/proc/{record.pid}/task/{record.pid}/children").read_text().split()
    if not children:
        raise ProcessLookupError(f"machine {record.name} has no init process (powered off?)")
    return int(children[0])


def enter_argv(record: NodeRecord) -> list[str]:
    """Prefix that runs a command inside the machine (its hostname, mounts and processes), as its
    boot scripts would; nsenter forks by itself to enter the pid namespace. A `mount --bind` run
    this way (the boot script's, of a volume at the cache path) stays inside the machine."""
    return ["nsenter", "--target", str(init_pid(record)), "--uts", "--mount", "--pid", "--"]


def power_off(record: NodeRecord) -> None:
    """Pull the plug (no graceful leave, like a terminated instance), then clear what the machine
    left on the host: stray processes, mounts, cgroup dirs, its run dir and data."""
    if record.is_powered_on():
        os.killpg(record.pid, signal.SIGKILL)
        procs.wait_gone(record.proc, timeout_s=10.0)
    # Anything that escaped the pid namespace (it should not) still names the run dir.
    procs.kill_mentioning(f"{record.run_dir}/")
    host.remove_cgroups(record.cgroup_parent)
    host.remove_tree(Path(record.run_dir))
    host.remove_tree(Path(record.data_dir))
