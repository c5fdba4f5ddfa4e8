"""A sandbox's parts and their start-up: moto, Redis, the strict EC2 layer and the swarm manager, each waited for."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from warmswarm_sandbox import aws, host, layout, node, procs
from warmswarm_sandbox.image import SANDBOX_IMAGE, build_rootfs_tar, find_busybox
from warmswarm_sandbox.layout import FIRST_NODE_HOST_INDEX, MANAGER_HOST_INDEX, SWARM_PORT, Layout

MOTO_START_TIMEOUT_S = 60.0
REDIS_START_TIMEOUT_S = 10.0
# A missed heartbeat marks a powered-off node down; the default 5 s makes that take ~15 s.
SWARM_HEARTBEAT_NS = 1_000_000_000
_PROXY_VARS = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SandboxError(RuntimeError):
    """The sandbox cannot do what was asked; the message says what to do instead."""


@dataclasses.dataclass(frozen=True)
class Endpoints:
    ec2_endpoint_url: str  # http://127.0.0.1:PORT: the strict EC2 layer, in front of moto
    aws_region: str
    docker_host: str  # unix://… of the swarm manager daemon
    redis_url: str  # redis://127.0.0.1:PORT/0
    sandbox_image: str  # imported in every daemon; has sh and sleep
    swarm_manager_addr: str  # 10.K.0.2:2377 on the sandbox's bridge, what a node's user data joins
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


def spawn_core(lay: Layout, name: str, argv: list[str], env: dict[str, str]) -> procs.ProcRecord:
    """Start a process in the background and record it, so stop() ends it; its output goes to logs/NAME.log."""
    proc = procs.spawn_detached(argv, env=env, log_path=lay.logs_dir / f"{name}.log")
    layout.write_atomically(lay.procs_dir / f"{name}.json", proc.to_json())
    return proc


def start_parts(lay: Layout, *, boot_s: float, attach_s: float, region: str) -> Endpoints:
    """Start moto, Redis, the strict EC2 layer and the swarm manager; returns once all answer."""
    dirs = (lay.logs_dir, lay.procs_dir, lay.nodes_dir, lay.redis_dir, lay.image_tar.parent, lay.node_cache_path)
    for directory in dirs:
        directory.mkdir(parents=True, exist_ok=True)
    lay.image_tar.write_bytes(build_rootfs_tar(find_busybox()))

    # moto takes a second or two to import: let it start while the manager boots.
    moto_port = procs.free_tcp_port()
    moto = spawn_core(
        lay,
        "moto",
        [sys.executable, "-m", "warmswarm_sandbox", "moto-server", "--port", str(moto_port)],
        # Without the default AMIs moto answers its first EC2 call in ms instead of seconds.
        child_env(MOTO_EC2_LOAD_DEFAULT_AMIS="false"),
    )
    redis_port = procs.free_tcp_port()
    redis = spawn_core(
        lay,
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
    strict = spawn_core(
        lay,
        "strict-ec2",
        [
            *(sys.executable, "-m", "warmswarm_sandbox.strict_ec2", "--upstream", moto_url),
            *("--port", str(strict_port), "--pending-s", str(boot_s), "--attach-s", str(attach_s)),
            # Each instance's private address is the address its machine will use on the sandbox's own
            # bridge, as on EC2 where the node is seen at its instance's address.
            *("--node-subnet", str(lay.subnet), "--first-host-index", str(FIRST_NODE_HOST_INDEX)),
            *("--log-level", "WARNING"),
        ],
        child_env(),
    )
    manager_host = start_manager(lay)
    wait_for_http(moto_url + "/moto-api/", moto, MOTO_START_TIMEOUT_S, lay.logs_dir / "moto.log")
    ec2_endpoint_url = f"http://127.0.0.1:{strict_port}"
    wait_for_http(ec2_endpoint_url + "/strict/config", strict, MOTO_START_TIMEOUT_S, lay.logs_dir / "strict-ec2.log")
    wait_for_redis(redis_port, redis, REDIS_START_TIMEOUT_S, lay.logs_dir / "redis.log")
    return Endpoints(
        ec2_endpoint_url=ec2_endpoint_url,
        aws_region=region,
        docker_host=manager_host,
        redis_url=f"redis://127.0.0.1:{redis_port}/0",
        sandbox_image=SANDBOX_IMAGE,
        swarm_manager_addr=f"{lay.manager_addr}:{SWARM_PORT}",
        node_cache_path=str(lay.node_cache_path),
        moto_endpoint_url=moto_url,
    )


def start_manager(lay: Layout) -> str:
    """Power on the swarm manager, make it a one-manager swarm with nothing scheduled on it; its DOCKER_HOST."""
    host.add_hub(lay.hub_netns)
    record = node.power_on(
        name="manager",
        addr=lay.manager_addr,
        netns=lay.netns(MANAGER_HOST_INDEX),
        hub_netns=lay.hub_netns,
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


def child_env(**extra: str) -> dict[str, str]:
    """Our environment minus proxy settings: everything the sandbox runs talks to loopback only."""
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    return env | extra


def wait_for_http(url: str, proc: procs.ProcRecord, timeout_s: float, log_path: Path) -> None:
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


def wait_for_redis(port: int, proc: procs.ProcRecord, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if _redis_answers(port):
            return
        if not procs.is_alive(proc) or time.monotonic() >= deadline:
            tail = _log_tail(log_path)
            raise SandboxError(f"redis on port {port} did not answer within {timeout_s} s; {log_path}:\n{tail}")
        time.sleep(0.05)


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
