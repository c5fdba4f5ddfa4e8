"""One machine of the sandbox: a Docker daemon in its own uts/mount/pid namespaces, powered on and off.

A machine boots as an EC2 instance does: the units Docker requires first (in the machine's own namespaces,
as systemd runs them), then the daemon with its root disk's daemon.json. A unit that fails stops the boot:
the machine stays on without a daemon, as a real one would.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import asdict, dataclass
from importlib import resources
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
# The sandbox's bridge network is 10.K.0.0/16.
NETWORK_PREFIX_LEN = 16
# Written in the run dir when a unit Docker requires failed: the machine is on, and its daemon never starts.
BOOT_STOPPED_NAME = "boot-stopped"
# In the run dir: docker.service as systemd would run it this boot (`systemctl show`'s ExecStart), which the scrub reads
# its Docker layout from; and the per-boot run dir of the boot scripts (/run/warmswarm on EC2: a tmpfs).
DOCKER_UNIT_SHOW_NAME = "docker.service.show"
BOOT_RUN_DIR_NAME = "warmswarm"

# The machine's init, under tini (pid 1, which reaps orphans as a machine's init would): its hostname, a
# private tmpfs over the cache root (so its cache path is its own to make and remove), then a small part
# of systemd: the units Docker requires (`systemctl enable`d with RequiredBy=docker.service) run before
# the daemon at every start; one that fails stops the boot. The enabled timers start once per boot, beside
# the daemon (the sandbox's systemctl plays their units' starts and Docker's reload). `systemctl restart docker`
# (the sandbox's systemctl) ends the daemon and asks for it again.
_INIT = r"""
hostname "$0"
# The new mount namespace is a copy of the host's, with every loop device the host has mounted in it (any sandbox's
# failing disk, a test's look at a volume, a test's own disk). A machine must not hold them: while it lives, their
# loop devices could not be released, and whoever made them could not tear them down. It has none of its own yet.
points=$(sed -n 's|^[^ ]* [^ ]* [^ ]* [^ ]* \([^ ]*\) .* - [^ ]* /dev/loop[0-9]* .*$|\1|p' /proc/self/mountinfo)
for point in $points; do umount -l "$point" 2>/dev/null || true; done
if [ -n "$WARMSWARM_CACHE_ROOT" ]; then
  mkdir -p "$WARMSWARM_CACHE_ROOT"
  mount -t tmpfs -o size=1m,mode=755 warmswarm-cache-root "$WARMSWARM_CACHE_ROOT"
fi
timers="$WARMSWARM_NODE_ROOT/etc/systemd/timers.wanted"
if [ -n "$WARMSWARM_NODE_ROOT" ] && [ -f "$timers" ]; then
  for timer in $(cat "$timers"); do
    PATH="$WARMSWARM_SHIMS:$PATH" "$WARMSWARM_SHIMS/warmswarm-sandbox-timer" "$timer" </dev/null >/dev/null 2>&1 &
  done
fi
requires="$WARMSWARM_NODE_ROOT/etc/systemd/docker.requires"
while :; do
  if [ -n "$WARMSWARM_NODE_ROOT" ] && [ -f "$requires" ]; then
    for unit in $(cat "$requires"); do
      command=$(sed -n 's/^ExecStart=//p' "$WARMSWARM_NODE_ROOT/etc/systemd/system/$unit")
      if ! sh -c "$command" >>"$WARMSWARM_BOOT_LOG" 2>&1; then
        echo "warmswarm sandbox: $unit failed; docker.service requires it and does not start" >>"$WARMSWARM_BOOT_LOG"
        : >"$WARMSWARM_BOOT_STOPPED"
        exec sleep 2147483647
      fi
    done
  fi
  rm -f "$WARMSWARM_RUN_DIR/docker-restart"
  "$@" &
  wait $!
  [ -e "$WARMSWARM_RUN_DIR/docker-restart" ] || exit 0
done
"""


@dataclass(frozen=True)
class NodeRecord:
    """A powered-on daemon, written to node.json so any process (status, down) can find it."""

    name: str  # the machine's hostname, also the swarm node's Description.Hostname
    addr: str  # its address on the sandbox's bridge, for --advertise-addr/--listen-addr
    instance_id: str | None  # None for the manager, which is not an EC2 instance here
    pid: int  # the `unshare` process: SIGKILL to it powers the whole machine off
    start_ticks: int
    run_dir: str  # sockets and exec root, short path
    data_dir: str  # --data-root
    # Unique as a prefix too (fixed-width names), so removing it never touches a sibling's.
    cgroup_parent: str
    docker_host: str
    # The machine's own root disk for what a real one keeps in /etc (daemon.json, the per-boot script);
    # "" for the manager, which boots without one.
    root_dir: str = ""
    # Its own network namespace (its eth0 on the sandbox's bridge): the manager sees it at `addr`.
    netns: str = ""

    @property
    def device_dir(self) -> str:
        """Where the hypervisor shows this machine's attached volumes (WARMSWARM_DEVICE_DIR of its
        boot script). In the run dir: a short path, and gone with the machine."""
        return f"{self.run_dir}/{DEVICE_DIR_NAME}"

    @property
    def boot_stopped(self) -> bool:
        return Path(self.run_dir, BOOT_STOPPED_NAME).exists()

    @property
    def daemon_json(self) -> Path:
        return Path(self.root_dir, "etc", "docker", "daemon.json")

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
    root_dir: Path | None = None,
    cache_root: str = "",
    netns: str = "",
    hub_netns: str = "",
) -> NodeRecord:
    """Start the machine and return at once; Engine(record.docker_host).wait_until_up() waits.

    With a `root_dir` (its root disk) the daemon reads its settings, labels among them, from its
    etc/docker/daemon.json, and the units enabled there run before it; `cache_root` gets a private tmpfs
    in the machine. With a `netns` the machine gets a network of its own, wired to `hub_netns`'s bridge.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    data_dir.mkdir(parents=True, exist_ok=True)
    # Made here, not when a volume attaches: once power_off has removed the run dir nothing may
    # bring part of it back.
    (run_dir / DEVICE_DIR_NAME).mkdir(exist_ok=True)
    (run_dir / BOOT_STOPPED_NAME).unlink(missing_ok=True)
    # A boot's run dir starts empty, as /run does: what the last boot's scripts left there is gone.
    host.remove_tree(run_dir / BOOT_RUN_DIR_NAME)
    docker_host = f"unix://{run_dir}/docker.sock"
    settings: list[str] = []
    if root_dir is not None:
        settings = ["--config-file", str(root_dir / "etc" / "docker" / "daemon.json")]
    elif instance_id is not None:
        settings = ["--label", f"{ENGINE_LABEL_INSTANCE_ID}={instance_id}"]
    dockerd = [
        "dockerd",
        "--data-root", str(data_dir),
        "--exec-root", f"{run_dir}/exec",
        "--pidfile", f"{run_dir}/dockerd.pid",
        "-H", docker_host,
        # Its own network only: no docker bridge, no NAT, no iptables, no proxy, no resolver but loopback.
        "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
        "--userland-proxy=false", "--dns", "127.0.0.1",
        "--cgroup-parent", cgroup_parent,
        *settings,
    ]  # fmt: skip
    if root_dir is not None:
        write_atomically(run_dir / DOCKER_UNIT_SHOW_NAME, docker_unit_show(dockerd))
    network: list[str] = []
    if netns:
        # Its own network: seen by the manager (and by anyone) at its own address, as an EC2 machine is.
        host.add_machine_netns(netns, hub_netns, f"v{netns.rsplit('-', 1)[-1]}", addr, NETWORK_PREFIX_LEN)
        network = ["nsenter", f"--net={host.NETNS_DIR / netns}"]
    argv = [
        *network,
        # Own hostname, mounts and pids. --kill-child makes SIGKILL to unshare take down the whole pid
        # namespace.
        "unshare", "--uts", "--mount", "--propagation", "private", "--pid", "--fork",
        "--mount-proc", "--kill-child",
        "tini", "-s", "--",
        "sh", "-c", _INIT, name,
        # Swarm must use the imported image and never try a registry (there is none).
        "env", "DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1",
        *dockerd,
    ]  # fmt: skip
    env = {
        "PATH": procs.SYSTEM_PATH,
        "WARMSWARM_NODE_ROOT": str(root_dir or ""),
        "WARMSWARM_RUN_DIR": str(run_dir),
        "WARMSWARM_BOOT_LOG": str(log_path.with_suffix(".boot.log")),
        "WARMSWARM_BOOT_STOPPED": str(run_dir / BOOT_STOPPED_NAME),
        "WARMSWARM_CACHE_ROOT": cache_root,
        # The sandbox's systemctl and timer, for the timers' runs.
        "WARMSWARM_SHIMS": str(resources.files("warmswarm_sandbox").joinpath("bin")),
    }
    proc = procs.spawn_detached(argv, env=env, log_path=log_path)
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
        root_dir=str(root_dir or ""),
        netns=netns,
    )


def docker_unit_show(dockerd: list[str]) -> str:
    """What `systemctl show -p ExecStart -p Environment -p EnvironmentFiles docker.service` says on a machine whose
    docker.service runs `dockerd` (systemd's format; no environment)."""
    argv = " ".join(dockerd)
    return (
        f"ExecStart={{ path={dockerd[0]} ; argv[]={argv} ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; "
        "pid=0 ; code=(null) ; status=0/0 }\nEnvironment=\nEnvironmentFiles=\n"
    )


def wait_until_up(record: NodeRecord, timeout_s: float = ENGINE_START_TIMEOUT_S) -> Engine:
    """Until the daemon answers; EngineError when the machine died or its boot stopped meanwhile."""
    engine = Engine(record.docker_host)
    engine.wait_until_up(timeout_s, still_booting=lambda: record.is_powered_on() and not record.boot_stopped)
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
    namespaces = ["--uts", "--mount", "--pid", *(["--net"] if record.netns else [])]
    return ["nsenter", "--target", str(init_pid(record)), *namespaces, "--"]


def power_off(record: NodeRecord, *, keep_disk: bool = False) -> None:
    """Pull the plug (no graceful leave, like a terminated instance), then clear what the machine
    left on the host: stray processes, mounts, cgroup dirs, its run dir; and its disk (data root and
    root dir) unless `keep_disk` (a stopped instance, or one about to boot again)."""
    if record.is_powered_on():
        os.killpg(record.pid, signal.SIGKILL)
        procs.wait_gone(record.proc, timeout_s=10.0)
    # Anything that escaped the pid namespace (it should not) still names the run dir.
    procs.kill_mentioning(f"{record.run_dir}/")
    host.remove_cgroups(record.cgroup_parent)
    host.remove_tree(Path(record.run_dir))
    if record.netns:
        host.delete_netns(record.netns)
    if not keep_disk:
        host.remove_tree(Path(record.data_dir))
        if record.root_dir:
            host.remove_tree(Path(record.root_dir))
