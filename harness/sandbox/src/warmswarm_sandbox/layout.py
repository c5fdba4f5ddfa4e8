"""Where one sandbox keeps its things: the state dir, its short run dir, its network 10.K.0.0/16, its record."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from warmswarm_sandbox import disks, host, procs

log = logging.getLogger(__name__)

# Unix socket paths must stay under ~100 characters and a state dir (a pytest tmp dir) can be
# long, so sockets and exec roots live in /run/wsbx-K/, K being the sandbox's number (its network is 10.K.0.0/16).
RUN_ROOT = Path("/run")
RUN_DIR_PREFIX = "wsbx-"
DISKS_DIR_NAME = "disks"
# 127.0.0.0/16 holds 127.0.0.1 (everyone's localhost) and 127.0.1.1 (Debian's hostname).
FIRST_SUBNET = 1
LAST_SUBNET = 254
SWARM_PORT = 2377
MANAGER_HOST_INDEX = 2
FIRST_NODE_HOST_INDEX = 3
# The strict EC2 layer's own default for how long a volume stays `attaching`.
DEFAULT_ATTACH_S = 0.5
# A start after a stop waits this share of boot_s before the machine boots again: the ratio of the day
# simulator's restart_boot_s (40 s: no first-boot user data, images on disk) to its boot_to_join_s (105 s:
# a first boot, after osparc's published launch-to-join of about 2 min). docs/benchmarks.md cites both.
START_TO_BOOT_RATIO = 40.0 / 105.0


def run_dir_of(subnet: int) -> Path:
    return RUN_ROOT / f"{RUN_DIR_PREFIX}{subnet}"


@dataclass(frozen=True)
class Layout:
    state_dir: Path
    subnet: int

    @property
    def run_dir(self) -> Path:
        return run_dir_of(self.subnet)

    @property
    def record_path(self) -> Path:
        return self.state_dir / "sandbox.json"

    @property
    def endpoints_env(self) -> Path:
        return self.state_dir / "endpoints.env"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def procs_dir(self) -> Path:
        # In the run dir, not the state dir: if the state dir is deleted without `down` (a pytest
        # tmp dir), the next claim of this subnet still finds moto, Redis and the rest by pid.
        return self.run_dir / "procs"

    @property
    def nodes_dir(self) -> Path:
        return self.state_dir / "nodes"

    @property
    def volumes_dir(self) -> Path:
        # In the state dir, not the run dir: a volume is data (like an EBS volume's blocks), it
        # outlives every instance that had it attached and may grow large.
        return self.state_dir / "volumes"

    def volume_file(self, volume_id: str) -> Path:
        """The sparse file that holds this EBS volume's blocks; a machine it is attached to sees it as a loop device."""
        return self.volumes_dir / volume_id

    @property
    def disks_dir(self) -> Path:
        """The host's own mounts of disks (the failing disk's filesystem, a volume read by a test): in the run dir,
        so `down` finds them even when the state dir is gone."""
        return self.run_dir / DISKS_DIR_NAME

    @property
    def failing_disk_image(self) -> Path:
        """The small filesystem that holds the failing disk (Sandbox.break_volume), shut down once it does."""
        return self.faults_dir / "failing-disk.img"

    @property
    def failing_disk_dir(self) -> Path:
        return self.disks_dir / "failing"

    def loop_folders(self) -> list[Path]:
        """Where the backing files of every loop device this sandbox binds lie: its volumes and its failing disk."""
        return [self.volumes_dir, self.faults_dir, self.disks_dir]

    @property
    def node_cache_root(self) -> Path:
        """A folder every machine covers with a tmpfs of its own at boot: below it, each machine makes
        (and, when its cache cannot be mounted, removes) its cache path without touching another's."""
        return self.run_dir / "cache-root"

    @property
    def node_cache_path(self) -> Path:
        """Where a node's boot script mounts its owner's volume, inside the node's own mount
        namespace; on the host it stays an empty folder. Not /var/lib/…: the sandbox leaves
        nothing behind, and the run dir goes with `down`."""
        return self.node_cache_root / "cache"

    @property
    def faults_dir(self) -> Path:
        """Volumes whose disk cannot be read (Sandbox.break_volume): one empty file per volume id; and the failing
        disk's filesystem they are shown instead."""
        return self.state_dir / "faults"

    @property
    def manager_dir(self) -> Path:
        return self.state_dir / "manager"

    @property
    def image_tar(self) -> Path:
        return self.state_dir / "image" / "sandbox.tar"

    @property
    def redis_dir(self) -> Path:
        return self.state_dir / "redis"

    @property
    def cgroup_prefix(self) -> str:
        return f"{RUN_DIR_PREFIX}{self.subnet}-"

    def owned_entries(self) -> list[Path]:
        """Everything the sandbox creates in the state dir: stop() removes these and nothing else."""
        return [
            self.record_path,
            self.endpoints_env,
            self.logs_dir,
            self.nodes_dir,
            self.volumes_dir,
            self.manager_dir,
            self.image_tar.parent,
            self.redis_dir,
            self.faults_dir,
        ]

    def host_index(self, addr: str) -> int:
        """The host index of 10.K.H.L: H*256+L (the inverse of addr)."""
        _, _, high, low = (int(part) for part in addr.split("."))
        return high * 256 + low

    def addr(self, host_index: int) -> str:
        """10.K.H.L for host index H*256+L, on the sandbox's own bridge; .0 and .255 are never given."""
        return f"10.{self.subnet}.{host_index // 256}.{host_index % 256}"

    @property
    def hub_netns(self) -> str:
        """The namespace holding the bridge every machine of this sandbox is wired to (and nothing else)."""
        return f"{RUN_DIR_PREFIX}{self.subnet}-hub"

    def netns(self, host_index: int) -> str:
        """A machine's own network namespace."""
        return f"{RUN_DIR_PREFIX}{self.subnet}-n{host_index:05d}"

    @property
    def manager_addr(self) -> str:
        return self.addr(MANAGER_HOST_INDEX)


@dataclass(frozen=True)
class SandboxRecord:
    """sandbox.json: what another process needs to find a running sandbox."""

    subnet: int
    boot_s: float
    region: str
    # How long a volume stays `attaching` behind the strict layer; the hypervisor shows the device
    # only after that, as AWS does.
    attach_s: float = DEFAULT_ATTACH_S
    # How long a started instance waits before its machine boots again (a launch waits boot_s);
    # None: boot_s * START_TO_BOOT_RATIO.
    start_s: float | None = None
    # Filled in once everything is up; until then a half-started sandbox can still be stopped.
    endpoints: dict[str, str] | None = None

    def save(self, layout: Layout) -> None:
        write_atomically(layout.record_path, json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> SandboxRecord:
        data: dict[str, Any] = json.loads((state_dir / "sandbox.json").read_text())
        return cls(
            subnet=int(data["subnet"]),
            boot_s=float(data["boot_s"]),
            region=str(data["region"]),
            attach_s=float(data.get("attach_s", DEFAULT_ATTACH_S)),
            start_s=None if data.get("start_s") is None else float(data["start_s"]),
            endpoints=data.get("endpoints"),
        )

    @property
    def restart_s(self) -> float:
        """How long a started instance waits before its machine boots again."""
        return self.start_s if self.start_s is not None else self.boot_s * START_TO_BOOT_RATIO


def write_atomically(path: Path, text: str) -> None:
    """Readers in other processes see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def claimed_by(subnet: int) -> Path | None:
    """The state dir that holds this subnet's claim, if any."""
    try:
        return Path(json.loads((run_dir_of(subnet) / "owner.json").read_text())["state_dir"])
    except (FileNotFoundError, ValueError, KeyError):
        return None


def _claim_is_stale(run_dir: Path, subnet: int) -> bool:
    """A claim whose claimer is gone and whose state dir no longer names this subnet: left by a
    sandbox that died without `down` (a killed test run)."""
    try:
        owner = json.loads((run_dir / "owner.json").read_text())
    except (FileNotFoundError, ValueError):
        # Not written by a sandbox (claims write it under the lock): not ours to judge.
        return False
    claimer = procs.ProcRecord(pid=int(owner["pid"]), start_ticks=int(owner["start_ticks"]))
    if procs.is_alive(claimer):
        return False
    try:
        return SandboxRecord.load(Path(owner["state_dir"])).subnet != subnet
    except (FileNotFoundError, ValueError, KeyError):
        return True


def recorded_procs(procs_dir: Path) -> dict[str, procs.ProcRecord]:
    """The processes a sandbox started (moto, redis, boot-watcher, spawned ones), by name."""
    found = {}
    if procs_dir.is_dir():
        for path in procs_dir.glob("*.json"):
            try:
                found[path.stem] = procs.ProcRecord.from_json(path.read_text())
            except (OSError, ValueError, KeyError):
                continue
    return found


def clear_run_dir(subnet: int) -> None:
    """End whatever still runs from this subnet's run dir (recorded processes, then any machine
    that names the dir), then remove the dir and the subnet's cgroups."""
    run_dir = run_dir_of(subnet)
    state_dir = claimed_by(subnet)
    for proc in recorded_procs(run_dir / "procs").values():
        procs.kill(proc)
    procs.kill_mentioning(f"{run_dir}/")
    # Its disks: the loop devices over its volumes and its failing disk, bound on the host until released.
    release_disks(Layout(state_dir=state_dir, subnet=subnet) if state_dir is not None else None, run_dir)
    host.remove_tree(run_dir)
    host.remove_cgroups(f"{RUN_DIR_PREFIX}{subnet}-")
    for netns in host.netns_named(f"{RUN_DIR_PREFIX}{subnet}-"):
        host.delete_netns(netns)


def release_disks(lay: Layout | None, run_dir: Path) -> None:
    """Release every loop device the sandbox bound (its machines are off: nothing of theirs is mounted any more)
    and unmount its own mounts of disks; raises when the kernel still holds one after a while."""
    if lay is not None:
        disks.release_failing_disk(lay.failing_disk_image)
    host.unmount_under(run_dir / DISKS_DIR_NAME)
    folders = [run_dir, *(lay.loop_folders() if lay is not None else [])]
    still = disks.release_under(folders)
    if still:
        holders = host.holders_of_mounts_under(run_dir / DISKS_DIR_NAME)
        held = "; ".join(f"pid {pid} ({command})" for pid, command in sorted(holders.items())) or "no process"
        raise RuntimeError(
            f"loop devices still bound after {disks.RELEASE_TIMEOUT_S} s: {', '.join(still)}; "
            f"mounts of its disks still held by: {held}"
        )


def claim_subnet(state_dir: Path) -> int:
    """Reserve a free number K (its network 10.K.0.0/16) for this sandbox, recorded as /run/wsbx-K/owner.json."""
    RUN_ROOT.mkdir(exist_ok=True)
    me = procs.record_of(os.getpid())
    # Two sandboxes starting at once must not both judge one claim stale and clear it: hold an
    # exclusive lock on /run itself while claiming (a lock file would be one more thing left behind).
    lock_fd = os.open(RUN_ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        for subnet in range(FIRST_SUBNET, LAST_SUBNET + 1):
            run_dir = run_dir_of(subnet)
            if run_dir.exists():
                if not _claim_is_stale(run_dir, subnet):
                    continue
                try:
                    clear_run_dir(subnet)
                except RuntimeError as error:
                    # What is left cannot all be released yet (a disk some other process still holds): the
                    # number stays claimed for a later sandbox to clear, and this one takes the next free one.
                    log.warning("sandbox %s: left as it is for now: %s", subnet, error)
                    continue
            run_dir.mkdir(mode=0o700)
            owner = {"state_dir": str(state_dir.resolve()), "pid": me.pid, "start_ticks": me.start_ticks}
            write_atomically(run_dir / "owner.json", json.dumps(owner))
            return subnet
    finally:
        os.close(lock_fd)  # closing the descriptor releases the lock
    raise RuntimeError(f"no free sandbox number: every {RUN_ROOT}/{RUN_DIR_PREFIX}K is taken")
