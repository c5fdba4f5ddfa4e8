"""Starts warmswarm's own services as processes inside a running sandbox (for `make up`, the demo and tests)."""

from __future__ import annotations

import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import NamedTuple

from warmswarm_sandbox.cloud import Endpoints, Sandbox, SandboxError
from warmswarm_sandbox.ports import free_port as free_port  # tests and demos take it from here

# moto accepts any image id; real AWS needs an AMI with Docker (see the README).
SANDBOX_IMAGE_ID = "ami-12345678"

# Where a user's service sees its cache inside the container.
SANDBOX_CACHE_MOUNT_PATH = "/cache"

# Sandbox defaults: short clocks so a demo or a test sees a whole node lifecycle in seconds.
FAST_AUTOSCALING = {
    "AUTOSCALING_IDLE_GRACE_S": "5",
    "AUTOSCALING_MAX_START_S": "60",
    "AUTOSCALING_RESYNC_INTERVAL_S": "5",
    "AUTOSCALING_BUSY_RESYNC_INTERVAL_S": "1",
    "AUTOSCALING_DEBOUNCE_S": "0.3",
    "AUTOSCALING_MAX_INSTANCES": "6",
    "AUTOSCALING_ALLOWED_INSTANCE_TYPES": "t3.medium,t3.large,m5.large,m5.xlarge,g4dn.xlarge",
}


def new_ops_token() -> str:
    """A random ops token for one sandbox: the director and the autoscaler are given the same one."""
    return secrets.token_urlsafe(24)


def new_api_token() -> str:
    """A random director API token for one sandbox: what the platform (here the demo, a test) presents."""
    return secrets.token_urlsafe(24)


class StartedDirector(NamedTuple):
    """A director process of the sandbox: where it answers, and the two tokens it takes."""

    url: str
    ops_token: str
    api_token: str


def autoscaler_env(
    endpoints: Endpoints, port: int, settings: Mapping[str, str], ops_token: str | None = None
) -> dict[str, str]:
    # Nothing of the caller's own OPS_TOKEN leaks in: without ops_token, the status, the volumes and expiring
    # through the API are off (403).
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALING_") and k != "OPS_TOKEN"}
    env.update(
        {
            "EC2_ENDPOINT_URL": endpoints.ec2_endpoint_url,
            "AWS_REGION": endpoints.aws_region,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "DOCKER_HOST": endpoints.docker_host,
            "REDIS_URL": endpoints.redis_url,
            "AUTOSCALING_IMAGE_ID": SANDBOX_IMAGE_ID,
            "AUTOSCALING_HTTP_HOST": "127.0.0.1",
            "AUTOSCALING_HTTP_PORT": str(port),
            # Where the boot script it renders mounts an owner's volume: the sandbox's, not /var/lib.
            "AUTOSCALING_NODE_CACHE_PATH": endpoints.node_cache_path,
            **FAST_AUTOSCALING,
            **settings,
        }
    )
    if ops_token is not None:
        env["OPS_TOKEN"] = ops_token
    return env


# The autoscaler's settings the sandbox itself sets (its AMI, where it listens, where nodes mount a volume): a
# caller's value for one of these would point the autoscaler away from the sandbox.
SANDBOX_OWNED_SETTINGS = frozenset(
    {"AUTOSCALING_IMAGE_ID", "AUTOSCALING_HTTP_HOST", "AUTOSCALING_HTTP_PORT", "AUTOSCALING_NODE_CACHE_PATH"}
)


def caller_settings(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The caller's AUTOSCALING_* settings for the sandbox's autoscaler (`make up` with buffers, recycling, a
    cap), and the names it leaves out because the sandbox sets them."""
    named = {k: v for k, v in environ.items() if k.startswith("AUTOSCALING_")}
    return (
        {k: v for k, v in named.items() if k not in SANDBOX_OWNED_SETTINGS},
        sorted(k for k in named if k in SANDBOX_OWNED_SETTINGS),
    )


def start_autoscaler(
    sandbox: Sandbox,
    *,
    name: str = "autoscaling",
    settings: Mapping[str, str] | None = None,
    ops_token: str | None = None,
    ready_timeout_s: float = 60,
) -> str:
    """Spawn `python -m warmswarm_autoscaling` against the sandbox; returns its URL once it is ready."""
    port = free_port()
    env = autoscaler_env(sandbox.endpoints, port, settings or {}, ops_token)
    sandbox.spawn(name, [sys.executable, "-m", "warmswarm_autoscaling"], env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, ready_timeout_s, alive=lambda: sandbox.spawned_alive(name))
    except ProcessExited:
        # A setting it refused (AUTOSCALING_WARM_BUFFER=oops): its own words, not a minute's timeout.
        raise SandboxError(
            f"the autoscaler exited before it was ready; its log ends:\n{sandbox.log_tail(name)}"
        ) from None
    return url


def director_env(
    endpoints: Endpoints, port: int, ops_token: str, api_token: str, autoscaling_url: str | None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIRECTOR_")}
    env.update(
        {
            "DOCKER_HOST": endpoints.docker_host,
            "REDIS_URL": endpoints.redis_url,
            "OPS_TOKEN": ops_token,
            "DIRECTOR_API_TOKEN": api_token,
            "NODE_CACHE_PATH": endpoints.node_cache_path,
            "CACHE_MOUNT_PATH": SANDBOX_CACHE_MOUNT_PATH,
            "DIRECTOR_HTTP_HOST": "127.0.0.1",
            "DIRECTOR_HTTP_PORT": str(port),
            # busybox `sleep` as PID 1 ignores SIGTERM: a long grace only slows every stop down.
            "DIRECTOR_STOP_GRACE_S": "1",
        }
    )
    if autoscaling_url:
        env["AUTOSCALING_URL"] = autoscaling_url
    return env


def start_director(
    sandbox: Sandbox,
    *,
    name: str = "director",
    autoscaling_url: str | None = None,
    ops_token: str | None = None,
    api_token: str | None = None,
    ready_timeout_s: float = 60,
) -> StartedDirector:
    """Spawn `python -m warmswarm_director` against the sandbox; returns its URL and its tokens.

    Each token is the one given, or a new one. The ops token is also what the director shows the autoscaler
    at `autoscaling_url`: start that one with the same.
    """
    port = free_port()
    ops_token = ops_token or new_ops_token()
    api_token = api_token or new_api_token()
    env = director_env(sandbox.endpoints, port, ops_token, api_token, autoscaling_url)
    sandbox.spawn(name, [sys.executable, "-m", "warmswarm_director"], env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, ready_timeout_s)
    return StartedDirector(url, ops_token, api_token)


class ProcessExited(RuntimeError):
    """The process a wait was for is gone: it will never be ready."""


def wait_ready(url: str, timeout_s: float, alive: Callable[[], bool] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if alive is not None and not alive():
            raise ProcessExited(url)
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} was not ready within {timeout_s:g} s")
        time.sleep(0.2)
