"""The Sandbox: starts, describes and stops one local cloud (moto, Redis, swarm manager, boot watcher)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from warmswarm_sandbox import aws, host, layout, node, procs
from warmswarm_sandbox.boot_watcher import node_records
from warmswarm_sandbox.engine import Engine, EngineError
from warmswarm_sandbox.image import SANDBOX_IMAGE, build_rootfs_tar, find_busybox
from warmswarm_sandbox.layout import DEFAULT_ATTACH_S, SWARM_PORT, Layout, SandboxRecord

MOTO_START_TIMEOUT_S = 60.0
REDIS_START_TIMEOUT_S = 10.0
SPAWNED_STOP_GRACE_S = 5.0
# A missed heartbeat marks a powered-off node down; the default 5 s makes that take ~15 s.
SWARM_HEARTBEAT_NS = 1_000_000_000
# Processes start() itself runs; spawn() may not take these names.
CORE_PROCS = ("moto", "redis", "boot-watcher")
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
_ENV_KEY = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class SandboxError(RuntimeError):
    """The sandbox cannot do what was asked; the message says what to do instead."""


@dataclasses.dataclass(frozen=True)
class Endpoints:
    ec2_endpoint_url: str  # http://127.0.0.1:PORT: the strict EC2 layer, in front of moto
    aws_region: str
    docker_host: str  # unix://… of the swarm manager daemon
    redis_url: str  # redis://127.0.0.1:PORT/0
    sandbox_image: str  # imported in every daemon; has sh and sleep
    swarm_manager_addr: str  # 127.K.0.2:2377, what a node's user data joins
    # Where a node's boot script mounts its owner's volume (inside the node); the autoscaler's
    # AUTOSCALING_NODE_CACHE_PATH, and a service's bind-mount source for the cache.
    node_cache_path: str
    # moto itself: only the sandbox's own hypervisor (the boot watcher) talks to it directly.
    moto_endpoint_url: str = ""

    def as_env(self) -> dict[str, str]:
        return {
            "EC2_ENDPOINT_URL": self.ec2_endpoint_url,
            "AWS_REGION": self.aws_region,
            "AWS_ACCESS_KEY_ID": aws.ACCESS_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": aws.SECRET_ACCESS_KEY,
            "DOCKER_HOST": self.docker_host,
            "REDIS_URL": self.redis_url,
            "SANDBOX_IMAGE": self.sandbox_image,
            "SWARM_MANAGER_ADDR": self.swarm_manager_addr,
            "NODE_CACHE_PATH": self.node_cache_path,
            "MOTO_ENDPOINT_URL": self.moto_endpoint_url,
        }

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Endpoints:
        return cls(
            ec2_endpoint_url=env["EC2_ENDPOINT_URL"],
            aws_region=env["AWS_REGION"],
            docker_host=env["DOCKER_HOST"],
            redis_url=env["REDIS_URL"],
            sandbox_image=env["SANDBOX_IMAGE"],
            swarm_manager_addr=env["SWARM_MANAGER_ADDR"],
            # A sandbox started before volumes existed has none, and `down` must still stop it.
            node_cache_path=env.get("NODE_CACHE_PATH", ""),
            moto_endpoint_url=env.get("MOTO_ENDPOINT_URL", ""),
        )


class Sandbox:
    def __init__(
        self,
        state_dir: Path,
        *,
        boot_s: float = 1.0,
        attach_s: float = DEFAULT_ATTACH_S,
        region: str = "us-east-1",
    ) -> None:
        # Absolute: recorded paths are read by processes started elsewhere.
        self.state_dir = state_dir.absolute()
        self.boot_s = boot_s
        self.attach_s = attach_s
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
        sandbox = cls(state_dir, boot_s=record.boot_s, attach_s=record.attach_s, region=record.region)
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
        record = SandboxRecord(subnet=lay.subnet, boot_s=self.boot_s, region=self.region, attach_s=self.attach_s)
        record.save(lay)
        try:
            self._endpoints = self._start_parts(lay)
            # The boot watcher reads the endpoints from the record: save them before starting it.
            dataclasses.replace(record, endpoints=self._endpoints.as_env()).save(lay)
            self._write_endpoints_env(self._endpoints.as_env())
            self._spawn_core(
                "boot-watcher",
                [sys.executable, "-m", "warmswarm_sandbox", "boot-watcher", "--state-dir", str(self.state_dir)],
                _child_env(),
            )
        except BaseException:
            self.stop()
            raise
        return self._endpoints

    def _start_parts(self, lay: Layout) -> Endpoints:
        dirs = (lay.logs_dir, lay.procs_dir, lay.nodes_dir, lay.redis_dir, lay.image_tar.parent, lay.node_cache_path)
        for directory in dirs:
            directory.mkdir(parents=True, exist_ok=True)
        lay.image_tar.write_bytes(build_rootfs_tar(find_busybox()))

        # moto takes a second or two to import: let it start while the manager boots.
        moto_port = procs.free_tcp_port()
        moto = self._spawn_core(
            "moto",
            [sys.executable, "-m", "warmswarm_sandbox", "moto-server", "--port", str(moto_port)],
            # Without the default AMIs moto answers its first EC2 call in ms instead of seconds.
            _child_env(MOTO_EC2_LOAD_DEFAULT_AMIS="false"),
        )
        redis_port = procs.free_tcp_port()
        redis = self._spawn_core(
            "redis",
            [
                *("redis-server", "--port", str(redis_port), "--bind", "127.0.0.1"),
                *("--save", "", "--appendonly", "no", "--dir", str(lay.redis_dir)),
            ],
            {"PATH": procs.SYSTEM_PATH},
        )
        moto_url = f"http://127.0.0.1:{moto_port}"
        # Everyone but the hypervisor meets EC2 through the strict layer: AWS's rules, not moto's leniency.
        strict_port = procs.free_tcp_port()
        strict = self._spawn_core(
            "strict-ec2",
            [
                *(sys.executable, "-m", "warmswarm_sandbox.strict_ec2", "--upstream", moto_url),
                *("--port", str(strict_port), "--pending-s", str(self.boot_s), "--attach-s", str(self.attach_s)),
                *("--log-level", "WARNING"),
            ],
            _child_env(),
        )
        manager_host = self._start_manager(lay)
        _wait_for_http(moto_url + "/moto-api/", moto, MOTO_START_TIMEOUT_S, lay.logs_dir / "moto.log")
        ec2_endpoint_url = f"http://127.0.0.1:{strict_port}"
        _wait_for_http(
            ec2_endpoint_url + "/strict/config", strict, MOTO_START_TIMEOUT_S, lay.logs_dir / "strict-ec2.log"
        )
        _wait_for_redis(redis_port, redis, REDIS_START_TIMEOUT_S, lay.logs_dir / "redis.log")
        return Endpoints(
            ec2_endpoint_url=ec2_endpoint_url,
            aws_region=self.region,
            docker_host=manager_host,
            redis_url=f"redis://127.0.0.1:{redis_port}/0",
            sandbox_image=SANDBOX_IMAGE,
            swarm_manager_addr=f"{lay.manager_addr}:{SWARM_PORT}",
            node_cache_path=str(lay.node_cache_path),
            moto_endpoint_url=moto_url,
        )

    def _start_manager(self, lay: Layout) -> str:
        record = node.power_on(
            name="manager",
            addr=lay.manager_addr,
            instance_id=None,
            run_dir=lay.run_dir / "manager",
            data_dir=lay.manager_dir / "data",
            cgroup_parent=f"{lay.cgroup_prefix}manager",
            log_path=lay.logs_dir / "manager.dockerd.log",
        )
        record.save(lay.manager_dir / "node.json")
        engine = node.wait_until_up(record)
        engine.import_image(lay.image_tar.read_bytes(), SANDBOX_IMAGE)
        listen = f"{lay.manager_addr}:{SWARM_PORT}"
        spec = {"Dispatcher": {"HeartbeatPeriod": SWARM_HEARTBEAT_NS}}
        node_id = engine.post("/swarm/init", {"ListenAddr": listen, "AdvertiseAddr": listen, "Spec": spec})
        # Drained: service tasks go to the instances' nodes, as on a cluster whose managers only manage.
        current = engine.get(f"/nodes/{node_id}")
        drained = current["Spec"] | {"Availability": "drain"}
        engine.post(f"/nodes/{node_id}/update", drained, query={"version": str(current["Version"]["Index"])})
        return record.docker_host

    def _spawn_core(self, name: str, argv: list[str], env: dict[str, str]) -> procs.ProcRecord:
        lay = self._require_layout()
        proc = procs.spawn_detached(argv, env=env, log_path=lay.logs_dir / f"{name}.log")
        layout.write_atomically(lay.procs_dir / f"{name}.json", proc.to_json())
        return proc

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

    def kill(self, name: str, *, grace_s: float = SPAWNED_STOP_GRACE_S) -> None:
        """Stop a process started with spawn() (SIGTERM, SIGKILL after grace_s) and forget it."""
        if name in CORE_PROCS:
            raise SandboxError(f"{name!r} is part of the sandbox itself: stop the whole sandbox instead")
        path = self._require_layout().procs_dir / f"{name}.json"
        if not path.exists():
            return  # never started, or already killed: the goal is reached either way
        procs.terminate(procs.ProcRecord.from_json(path.read_text()), grace_s=grace_s)
        path.unlink()

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
        lay = self._require_layout()
        if any(procs.is_alive(p) for p in layout.recorded_procs(lay.procs_dir).values()):
            return True
        machines = [*node_records(lay).values(), *_manager_record(lay)]
        return any(m.is_powered_on() for m in machines)

    def status(self) -> dict[str, Any]:
        """Every EC2 instance and volume, with the machine that plays an instance and the folder
        that holds a volume (None until the volume is first attached)."""
        lay = self._require_layout()
        ec2 = aws.ec2_client(self.endpoints.ec2_endpoint_url, self.region)
        records = node_records(lay)
        try:
            described = aws.all_instances(ec2)
            volumes = aws.all_volumes(ec2)
        except (BotoCoreError, ClientError) as error:
            url = self.endpoints.ec2_endpoint_url
            raise SandboxError(f"moto at {url} does not answer ({error}); is the sandbox up?") from error
        instances = []
        for instance_id, instance in sorted(described.items()):
            record = records.get(instance_id)
            powered_on = record is not None and record.is_powered_on()
            docker_host = record.docker_host if record is not None and powered_on else None
            instances.append(
                {
                    "instance_id": instance_id,
                    "state": instance["State"]["Name"],
                    "availability_zone": instance["Placement"]["AvailabilityZone"],
                    "node": None if docker_host is None else _swarm_node_id(docker_host),
                    "docker_host": docker_host,
                }
            )
        return {"instances": instances, "volumes": [_volume_status(lay, v) for _, v in sorted(volumes.items())]}

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this sandbox started and remove what it wrote; safe to repeat."""
        if self._layout is None:
            try:
                self._layout = Sandbox.attach(self.state_dir)._layout
            except SandboxError:
                return  # nothing was started here
        lay = self._require_layout()
        recorded = layout.recorded_procs(lay.procs_dir)
        # First whatever could still create machines (the boot watcher, services), then the
        # machines, then what they talk to.
        for name, proc in recorded.items():
            if name not in ("moto", "redis"):
                procs.terminate(proc, grace_s=SPAWNED_STOP_GRACE_S)
        for machine in [*node_records(lay).values(), *_manager_record(lay)]:
            node.power_off(machine)
        for name in ("redis", "moto"):
            if name in recorded:
                procs.terminate(recorded[name], grace_s=SPAWNED_STOP_GRACE_S)
        # A machine powered on by a watcher that died before recording it still names our run dir.
        # The subnet may have been reclaimed by another sandbox meanwhile: never clear theirs.
        if layout.claimed_by(lay.subnet) == self.state_dir.resolve():
            layout.clear_run_dir(lay.subnet)
        for entry in lay.owned_entries():
            if entry.is_dir():
                host.remove_tree(entry)
            else:
                entry.unlink(missing_ok=True)
        # Left in place when it holds files that are not ours.
        with contextlib.suppress(OSError):
            self.state_dir.rmdir()
        self._endpoints = None
        self._layout = None  # a later stop() finds no record and returns at once

    def _require_layout(self) -> Layout:
        if self._layout is None:
            raise SandboxError(f"the sandbox in {self.state_dir} is not started")
        return self._layout


def _manager_record(lay: Layout) -> list[node.NodeRecord]:
    path = lay.manager_dir / "node.json"
    return [node.NodeRecord.load(path)] if path.exists() else []


def _volume_status(lay: Layout, volume: dict[str, Any]) -> dict[str, Any]:
    # Through the strict layer, so `attaching` and `detaching` show as on AWS.
    attachments = volume.get("Attachments") or []
    folder = lay.volume_dir(volume["VolumeId"])
    return {
        "volume_id": volume["VolumeId"],
        "state": volume["State"],
        "availability_zone": volume["AvailabilityZone"],
        "attached_to": attachments[0]["InstanceId"] if attachments else None,
        "host_path": str(folder) if folder.is_dir() else None,
    }


def _swarm_node_id(docker_host: str) -> str | None:
    try:
        info = Engine(docker_host, timeout_s=5.0).get("/info")
    except EngineError:
        return None
    node_id = info.get("Swarm", {}).get("NodeID") or None
    return None if node_id is None else str(node_id)


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _child_env(**extra: str) -> dict[str, str]:
    """Our environment minus proxy settings: everything the sandbox runs talks to loopback only."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    return env | extra


def _wait_for_http(url: str, proc: procs.ProcRecord, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with _NO_PROXY_OPENER.open(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an HTTP error is an answer: the server is up
        except OSError:
            pass
        if not procs.is_alive(proc) or time.monotonic() >= deadline:
            raise SandboxError(f"{url} did not answer within {timeout_s} s; {log_path}:\n{_log_tail(log_path)}")
        time.sleep(0.05)


def _wait_for_redis(port: int, proc: procs.ProcRecord, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if _redis_answers(port):
            return
        if not procs.is_alive(proc) or time.monotonic() >= deadline:
            tail = _log_tail(log_path)
            raise SandboxError(f"redis on port {port} did not answer within {timeout_s} s; {log_path}:\n{tail}")
        time.sleep(0.05)
