"""docker-compose.yml deployed onto a sandbox's swarm with `docker stack deploy`, as ops deploy it, plus the override.

What it sets up around the stack (docs/operations.md, "The stack in the sandbox"): the manager takes work (the
stack runs on managers), the images are built or loaded into it (stack_images.py), a relay connects the
manager's namespace and this machine's loopback both ways (relay.py), and the variables an operator puts in
.env are given the sandbox's values.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, host, node, procs
from warmswarm_sandbox.cloud import Endpoints, Sandbox, SandboxError
from warmswarm_sandbox.cloud_parts import child_env
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.layout import Layout, SandboxRecord
from warmswarm_sandbox.services import FAST_AUTOSCALING, SANDBOX_CACHE_MOUNT_PATH, SANDBOX_IMAGE_ID

from warmswarm_demos.stack_images import IMAGE_PREFIX, StackImages, ensure_images

STACK_NAME = "warmswarm"
COMPOSE_FILE = "docker-compose.yml"
OVERRIDE_FILE = "docker-compose.sandbox.yml"
RELAY = "stack-relay"
AUTOSCALING_PORT = 8000
DIRECTOR_PORT = 8001
READY_TIMEOUT_S = 120.0
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# us-east-1 list prices of the types the sandbox allows (services.FAST_AUTOSCALING; only their order matters):
# an operator's .env must give them, as a compose default cannot hold JSON.
PRICE_PER_HOUR = {"t3.medium": 0.0416, "t3.large": 0.0832, "m5.large": 0.096, "m5.xlarge": 0.192, "g4dn.xlarge": 0.526}


@dataclass(frozen=True)
class DeployedStack:
    """The stack on the sandbox's swarm: where its APIs answer on loopback (through the relay), and its tokens."""

    name: str
    cluster: str
    director_url: str
    autoscaler_urls: tuple[str, ...]  # one per replica, by slot (1, 2, …)
    ops_token: str
    api_token: str
    images: StackImages
    env: dict[str, str] = field(repr=False)  # the variables the deploy read, as an operator's .env


def deploy_stack(
    sandbox: Sandbox,
    repo: Path,
    *,
    cluster: str = "stack",
    replicas: int = 2,
    settings: Mapping[str, str] | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> DeployedStack:
    """Build or load the images, deploy docker-compose.yml (with the override) and wait until every replica answers."""
    lay = _layout(sandbox)
    manager = _manager(lay)
    engine = Engine(manager.docker_host)
    _take_work(engine)
    images = ensure_images(manager.docker_host, repo, say=say)
    endpoints = sandbox.endpoints
    ec2_port, redis_port = _port(endpoints.ec2_endpoint_url), _port(endpoints.redis_url)
    urls = _start_relay(sandbox, lay, manager, ec2_port, redis_port, replicas)
    ops_token, api_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    socket_path = manager.docker_host.removeprefix("unix://")
    env = stack_env(
        endpoints,
        network=_aws_network(endpoints.ec2_endpoint_url, endpoints.aws_region),
        manager_addr=manager.addr,
        docker_socket=socket_path,
        docker_gid=os.stat(socket_path).st_gid,
        tokens=(ops_token, api_token),
        version=images.version,
        cluster=cluster,
        replicas=replicas,
    )
    env |= dict(settings or {})
    say(f"docker stack deploy -c {COMPOSE_FILE} -c {OVERRIDE_FILE} {STACK_NAME}")
    _docker(
        manager.docker_host,
        env,
        "stack", "deploy", "--resolve-image", "never",
        "-c", str(repo / COMPOSE_FILE), "-c", str(repo / OVERRIDE_FILE), STACK_NAME,
    )  # fmt: skip
    stack = DeployedStack(STACK_NAME, cluster, urls[0], tuple(urls[1:]), ops_token, api_token, images, env)
    # Deployed as `docker stack services` tells an operator: every replica running, which with a HEALTHCHECK
    # means healthy; by then the swarm's DNS knows every task (a lookup before that is forwarded, and times out).
    _wait_converged(engine, STACK_NAME, READY_TIMEOUT_S)
    for url in urls:
        _wait_answers(f"{url}/health", READY_TIMEOUT_S)
    return stack


def stack_env(
    endpoints: Endpoints,
    *,
    network: Mapping[str, str],
    manager_addr: str,
    docker_socket: str,
    docker_gid: int,
    tokens: tuple[str, str],
    version: str,
    cluster: str,
    replicas: int,
) -> dict[str, str]:
    """The variables `docker stack deploy` reads: .env.example's, with the sandbox's values, and the override's."""
    ops_token, api_token = tokens
    return {
        **network,
        "DOCKER_GID": str(docker_gid),
        "WARMSWARM_CLUSTER": cluster,
        "AWS_REGION": endpoints.aws_region,
        "AUTOSCALING_IMAGE_ID": SANDBOX_IMAGE_ID,
        "AUTOSCALING_PRICE_PER_HOUR": json.dumps(PRICE_PER_HOUR),
        "OPS_TOKEN": ops_token,
        "DIRECTOR_API_TOKEN": api_token,
        "WARMSWARM_IMAGE_PREFIX": IMAGE_PREFIX,
        "WARMSWARM_VERSION": version,
        "AUTOSCALING_REPLICAS": str(replicas),
        # The sandbox's Redis, through the relay on the manager's address.
        "REDIS_URL": f"redis://{manager_addr}:{_port(endpoints.redis_url)}/0",
        "NODE_CACHE_PATH": endpoints.node_cache_path,
        "DIRECTOR_CACHE_MOUNT_PATH": SANDBOX_CACHE_MOUNT_PATH,
        # busybox `sleep` as PID 1 ignores SIGTERM: a long grace only slows every stop down.
        "DIRECTOR_STOP_GRACE_S": "1",
        # Every replica by the swarm's DNS: no virtual IP without IPVS (the sandbox's kernel has none).
        "DIRECTOR_AUTOSCALING_URL": f"http://tasks.autoscaling:{AUTOSCALING_PORT}",
        **FAST_AUTOSCALING,
        # The override's own.
        "SANDBOX_EC2_ENDPOINT_URL": f"http://{manager_addr}:{_port(endpoints.ec2_endpoint_url)}",
        "SANDBOX_DOCKER_SOCKET": docker_socket,
    }


def remove_stack(sandbox: Sandbox, stack: DeployedStack) -> None:
    """`docker stack rm`, and the relay; the instances the stack launched are the sandbox's to stop."""
    manager = _manager(_layout(sandbox))
    _docker(manager.docker_host, stack.env, "stack", "rm", stack.name)
    sandbox.kill(RELAY)


def _layout(sandbox: Sandbox) -> Layout:
    return Layout(state_dir=sandbox.state_dir, subnet=SandboxRecord.load(sandbox.state_dir).subnet)


def _manager(lay: Layout) -> node.NodeRecord:
    path = lay.manager_dir / "node.json"
    record = node.NodeRecord.load(path) if path.exists() else None
    if record is None or not record.is_powered_on():
        raise SandboxError(f"the swarm manager of the sandbox in {lay.state_dir} is not running: start the sandbox")
    return record


def _take_work(engine: Engine) -> None:
    """The manager as ops run one: active, so the stack's services (placed on managers) can run there."""
    info = engine.get("/info")
    node_id = info["Swarm"]["NodeID"]
    current = engine.get(f"/nodes/{node_id}")
    active = current["Spec"] | {"Availability": "active"}
    engine.post(f"/nodes/{node_id}/update", active, query={"version": str(current["Version"]["Index"])})


def _start_relay(
    sandbox: Sandbox, lay: Layout, manager: node.NodeRecord, ec2_port: int, redis_port: int, replicas: int
) -> list[str]:
    """The relay process; the loopback URLs of the director, then of each autoscaler replica."""
    targets = [f"{STACK_NAME}_director:{DIRECTOR_PORT}"]
    targets += [f"{STACK_NAME}_autoscaling.{slot}:{AUTOSCALING_PORT}" for slot in range(1, replicas + 1)]
    ports = [procs.free_tcp_port() for _ in targets]
    ready = lay.run_dir / f"{RELAY}.ready"
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "warmswarm_sandbox.relay", "--netns", str(host.NETNS_DIR / manager.netns)]
    argv += ["--docker-host", manager.docker_host, "--ready-file", str(ready)]
    # Inside, on the manager's address, at the same port numbers as here.
    for port in (ec2_port, redis_port):
        argv += ["--inbound", f"{manager.addr}:{port}=127.0.0.1:{port}"]
    for port, target in zip(ports, targets, strict=True):
        argv += ["--outbound", f"127.0.0.1:{port}={target}"]
    sandbox.spawn(RELAY, argv, child_env())
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline:
            raise SandboxError(f"the stack's relay did not start; see {lay.logs_dir / RELAY}.log")
        time.sleep(0.05)
    return [f"http://127.0.0.1:{port}" for port in ports]


def _aws_network(ec2_endpoint_url: str, region: str) -> dict[str, str]:
    """The default VPC's subnet in each zone and its default security group, as an operator lists theirs."""
    ec2: Any = aws.ec2_client(ec2_endpoint_url, region)
    subnets = ec2.describe_subnets(Filters=[{"Name": "default-for-az", "Values": ["true"]}])["Subnets"]
    by_zone = {s["AvailabilityZone"]: s["SubnetId"] for s in subnets}
    zones = sorted(by_zone)[:3]
    groups = ec2.describe_security_groups(Filters=[{"Name": "group-name", "Values": ["default"]}])["SecurityGroups"]
    return {
        "AUTOSCALING_AVAILABILITY_ZONES": ",".join(zones),
        "AUTOSCALING_SUBNET_IDS": json.dumps({zone: by_zone[zone] for zone in zones}),
        "AUTOSCALING_SECURITY_GROUP_IDS": groups[0]["GroupId"],
    }


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def _docker(docker_host: str, env: Mapping[str, str], *args: str) -> str:
    cli = shutil.which("docker")
    if cli is None:
        raise SandboxError("the docker command is not installed (apt-get install docker.io)")
    # Only the stack's variables and what the CLI itself needs: nothing of the caller's .env leaks in.
    run_env = {"PATH": os.environ.get("PATH", procs.SYSTEM_PATH), "HOME": os.environ.get("HOME", "/root")}
    run_env |= {**env, "DOCKER_HOST": docker_host, "DOCKER_CLI_HINTS": "false"}
    done = subprocess.run([cli, *args], env=run_env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"docker {' '.join(args[:2])} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _wait_converged(engine: Engine, name: str, timeout_s: float) -> None:
    filters = json.dumps({"label": [f"com.docker.stack.namespace={name}"]})
    deadline = time.monotonic() + timeout_s
    while True:
        services = engine.get("/services", query={"status": "true", "filters": filters})
        counts = {s["Spec"]["Name"]: s.get("ServiceStatus", {}) for s in services}
        if counts and all(c.get("RunningTasks") == c.get("DesiredTasks") for c in counts.values()):
            return
        if time.monotonic() > deadline:
            shown = {n: f"{c.get('RunningTasks')}/{c.get('DesiredTasks')}" for n, c in counts.items()}
            raise SandboxError(f"the stack did not converge within {timeout_s:g} s: {shown} (docker service ps)")
        time.sleep(0.5)


def _wait_answers(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with _NO_PROXY.open(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # an answer
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SandboxError(f"{url} did not answer within {timeout_s:g} s (docker service ps {STACK_NAME}_…)")
        time.sleep(0.5)
