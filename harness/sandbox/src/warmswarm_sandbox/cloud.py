"""The Sandbox: starts, describes and stops one local cloud (moto, Redis, swarm manager, boot watcher)."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from warmswarm_sandbox import disks, layout, node, procs
from warmswarm_sandbox.boot_watcher import node_records
from warmswarm_sandbox.cloud_parts import Endpoints, SandboxError, child_env, spawn_core, start_parts, wait_for_http
from warmswarm_sandbox.cloud_status import status_report
from warmswarm_sandbox.cloud_teardown import SPAWNED_STOP_GRACE_S, anything_running, tear_down
from warmswarm_sandbox.layout import DEFAULT_ATTACH_S, Layout, SandboxRecord

# Endpoints and SandboxError live with the start-up that makes and raises them; callers import them from here.
__all__ = ["CORE_PROCS", "Endpoints", "Sandbox", "SandboxError"]

# Processes start() itself runs; spawn() may not take these names.
CORE_PROCS = ("moto", "redis", "boot-watcher")
_ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class Sandbox:
    def __init__(
        self,
        state_dir: Path,
        *,
        boot_s: float = 1.0,
        attach_s: float = DEFAULT_ATTACH_S,
        region: str = "us-east-1",
        start_s: float | None = None,
    ) -> None:
        # Absolute: recorded paths are read by processes started elsewhere.
        self.state_dir = state_dir.absolute()
        self.boot_s = boot_s
        self.attach_s = attach_s
        self.start_s = start_s  # a start after a stop; None: in AWS's ratio to boot_s (layout.START_TO_BOOT_RATIO)
        self.region = region
        self._layout: Layout | None = None
        self._endpoints: Endpoints | None = None

    @classmethod
    def attach(cls, state_dir: Path) -> Sandbox:
        """A handle to a sandbox started by another process (for status and down)."""
        try:
            record = SandboxRecord.load(state_dir)
        except FileNotFoundError:
            raise SandboxError(f"no sandbox in {state_dir}: start one with `up --state-dir {state_dir}`") from None
        sandbox = cls(
            state_dir, boot_s=record.boot_s, attach_s=record.attach_s, region=record.region, start_s=record.start_s
        )
        sandbox._layout = Layout(state_dir=sandbox.state_dir, subnet=record.subnet)
        if record.endpoints is not None:
            sandbox._endpoints = Endpoints.from_env(record.endpoints)
        return sandbox

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise SandboxError(f"the sandbox in {self.state_dir} is not started")
        return self._endpoints

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> Endpoints:
        """Start moto, Redis, the swarm manager and the boot watcher; returns once all answer."""
        if (self.state_dir / "sandbox.json").exists():
            previous = Sandbox.attach(self.state_dir)
            if previous.is_running():
                raise SandboxError(
                    f"a sandbox is already running in {self.state_dir}; stop it first (`down --state-dir …`)"
                )
            previous.stop()  # died without `down`: clear its leftovers before reusing the dir
        self.state_dir.mkdir(parents=True, exist_ok=True)
        lay = self._layout = Layout(state_dir=self.state_dir, subnet=layout.claim_subnet(self.state_dir))
        record = SandboxRecord(
            subnet=lay.subnet, boot_s=self.boot_s, region=self.region, attach_s=self.attach_s, start_s=self.start_s
        )
        record.save(lay)
        try:
            self._endpoints = start_parts(lay, boot_s=self.boot_s, attach_s=self.attach_s, region=self.region)
            # The boot watcher reads the endpoints from the record: save them before starting it.
            dataclasses.replace(record, endpoints=self._endpoints.as_env()).save(lay)
            self._write_endpoints_env(self._endpoints.as_env())
            self._spawn_core(
                "boot-watcher",
                [sys.executable, "-m", "warmswarm_sandbox", "boot-watcher", "--state-dir", str(self.state_dir)],
                child_env(),
            )
        except BaseException:
            self.stop()
            raise
        return self._endpoints

    def _spawn_core(self, name: str, argv: list[str], env: dict[str, str]) -> procs.ProcRecord:
        return spawn_core(self._require_layout(), name, argv, env)

    def _write_endpoints_env(self, env: dict[str, str]) -> None:
        lines = "".join(f"{key}={value}\n" for key, value in env.items())
        layout.write_atomically(self._require_layout().endpoints_env, lines)

    # -- use -----------------------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], env: dict[str, str]) -> int:
        """Start a background process that stop() will end; its output goes to logs/NAME.log.
        env is its whole environment, as with subprocess (the endpoints are in self.endpoints_env())."""
        lay = self._require_layout()
        if name in CORE_PROCS or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise SandboxError(f"cannot spawn a process named {name!r}: use a plain name not in {CORE_PROCS}")
        existing = lay.procs_dir / f"{name}.json"
        if existing.exists() and procs.is_alive(procs.ProcRecord.from_json(existing.read_text())):
            raise SandboxError(f"a process named {name!r} is already running in this sandbox")
        return self._spawn_core(name, argv, env).pid

    def spawned_alive(self, name: str) -> bool:
        """Whether the process spawn() started as `name` still runs (False once it exited, or if it never started)."""
        path = self._require_layout().procs_dir / f"{name}.json"
        return path.exists() and procs.is_alive(procs.ProcRecord.from_json(path.read_text()))

    def log_tail(self, name: str, lines: int = 20) -> str:
        """The last lines of a spawned process's log (logs/NAME.log), for an error that names why it stopped."""
        path = self._require_layout().logs_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def spawned(self) -> list[str]:
        """The names of the processes spawn() started that are still recorded (not killed), sorted."""
        return sorted(
            path.stem for path in self._require_layout().procs_dir.glob("*.json") if path.stem not in CORE_PROCS
        )

    def kill(self, name: str, *, grace_s: float = SPAWNED_STOP_GRACE_S) -> None:
        """Stop a process started with spawn() (SIGTERM, SIGKILL after grace_s) and forget it."""
        if name in CORE_PROCS:
            raise SandboxError(f"{name!r} is part of the sandbox itself: stop the whole sandbox instead")
        path = self._require_layout().procs_dir / f"{name}.json"
        if not path.exists():
            return  # never started, or already killed: the goal is reached either way
        procs.terminate(procs.ProcRecord.from_json(path.read_text()), grace_s=grace_s)
        path.unlink()

    def start_docker_proxy(self, name: str = "docker-proxy", *, timeout_s: float = 30.0) -> tuple[str, str]:
        """Start a Docker API proxy in front of the swarm manager that kills a process on cue (docker_proxy.py);
        its DOCKER_HOST and admin URL, once both answer. kill(name) or stop() ends it."""
        lay = self._require_layout()
        socket_path, admin_port = lay.run_dir / f"{name}.sock", procs.free_tcp_port()
        argv = [sys.executable, "-m", "warmswarm_sandbox.docker_proxy", "--upstream", self.endpoints.docker_host]
        argv += ["--socket", str(socket_path), "--admin-port", str(admin_port), "--log-level", "WARNING"]
        self.spawn(name, argv, child_env())
        admin_url = f"http://127.0.0.1:{admin_port}"
        proc = procs.ProcRecord.from_json((lay.procs_dir / f"{name}.json").read_text())
        wait_for_http(f"{admin_url}/kill", proc, timeout_s, lay.logs_dir / f"{name}.log")
        return f"unix://{socket_path}", admin_url

    def machine(self, instance_id: str) -> node.NodeRecord | None:
        """The machine that plays the instance (powered on or off), None when it has none."""
        return node_records(self._require_layout()).get(instance_id)

    def pull_plug(self, instance_id: str) -> None:
        """Cut the machine's power while its instance runs (a crash, a hard reboot): the hypervisor boots
        it again at once on its own disk, running only its per-boot units."""
        record = self.machine(instance_id)
        if record is None or not record.is_powered_on():
            raise SandboxError(f"instance {instance_id} has no powered-on machine")
        os.killpg(record.pid, signal.SIGKILL)
        procs.wait_gone(record.proc, timeout_s=10.0)

    @property
    def failing_disk_dir(self) -> Path:
        """Where this sandbox's host mounts the failing disk's filesystem (break_volume makes it): other sandboxes on
        the same host have their own."""
        return self._require_layout().failing_disk_dir

    def break_volume(self, volume_id: str) -> None:
        """From now on the volume's disk cannot be read: the machine it is attached to is shown the failing disk
        (every read answers EIO, disks.failing_disk) in its place; its own blocks stay as they are."""
        lay = self._require_layout()
        disks.failing_disk(lay.failing_disk_image, lay.failing_disk_dir)
        lay.faults_dir.mkdir(parents=True, exist_ok=True)
        (lay.faults_dir / _volume_file(volume_id)).touch()

    def hide_volume(self, volume_id: str) -> None:
        """From now on the volume, though attached, does not show up in its machine: a device that never appears."""
        faults = self._require_layout().faults_dir
        faults.mkdir(parents=True, exist_ok=True)
        (faults / f"{_volume_file(volume_id)}.hidden").touch()

    def repair_volume(self, volume_id: str) -> None:
        """Undo break_volume and hide_volume."""
        faults = self._require_layout().faults_dir
        (faults / _volume_file(volume_id)).unlink(missing_ok=True)
        (faults / f"{_volume_file(volume_id)}.hidden").unlink(missing_ok=True)

    def volume_uuid(self, volume_id: str) -> str | None:
        """The filesystem UUID on the volume's blocks (blkid -p), None when they hold no filesystem: a format
        changes it."""
        return disks.uuid_of(self._require_layout().volume_file(_volume_file(volume_id)))

    def volume_files(self, volume_id: str) -> dict[str, bytes] | None:
        """The files at the top of the volume's filesystem and their bytes, read by the host now (through the disk
        a machine has mounted, if one has); None when its blocks hold no filesystem."""
        lay = self._require_layout()
        backing = lay.volume_file(_volume_file(volume_id))
        if not backing.is_file():
            return None
        return disks.files_on(backing, lay.disks_dir / f"read-{os.getpid()}-{volume_id}")

    def add_endpoint(self, key: str, value: str) -> None:
        """Append KEY=VALUE to endpoints.env (e.g. a service's URL once the lead starts it)."""
        if not _ENV_KEY.match(key) or "\n" in value:
            raise SandboxError(f"not an env line: {key}={value!r}")
        with self._require_layout().endpoints_env.open("a") as env_file:
            env_file.write(f"{key}={value}\n")

    def endpoints_env(self) -> dict[str, str]:
        """endpoints.env as a dict, including lines add_endpoint appended."""
        path = self._require_layout().endpoints_env
        env: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    env[key] = value
        return env

    def is_running(self) -> bool:
        """True while any process this sandbox started is alive."""
        return anything_running(self._require_layout())

    def status(self) -> dict[str, Any]:
        """Every EC2 instance and volume, with the machine that plays an instance and the file that holds a
        volume's blocks (None until the volume is first attached)."""
        return status_report(self._require_layout(), self.endpoints.ec2_endpoint_url, self.region)

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this sandbox started and remove what it wrote; safe to repeat."""
        if self._layout is None:
            try:
                self._layout = Sandbox.attach(self.state_dir)._layout
            except SandboxError:
                return  # nothing was started here
        tear_down(self._require_layout(), self.state_dir)
        self._endpoints = None
        self._layout = None  # a later stop() finds no record and returns at once

    def _require_layout(self) -> Layout:
        if self._layout is None:
            raise SandboxError(f"the sandbox in {self.state_dir} is not started")
        return self._layout


def _volume_file(volume_id: str) -> str:
    # A volume id becomes a file name: only EC2's own form, never a path.
    if not re.fullmatch(r"vol-[0-9a-f]+", volume_id):
        raise SandboxError(f"{volume_id!r} is not an EBS volume id")
    return volume_id
