"""`python -m warmswarm_director` as a process on the sandbox's swarm and Redis: serves, then stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from warmswarm_director.groups import group_key

OPS_TOKEN = "process-test-token-0123456789"
API_TOKEN = "process-test-platform-token-0123"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def director_url(endpoints: Any) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("DIRECTOR_")}
    env.update(
        {
            "DOCKER_HOST": str(endpoints.docker_host),
            "REDIS_URL": str(endpoints.redis_url),
            "OPS_TOKEN": OPS_TOKEN,
            "DIRECTOR_API_TOKEN": API_TOKEN,
            "DIRECTOR_HTTP_HOST": "127.0.0.1",
            "DIRECTOR_HTTP_PORT": str(port),
        }
    )
    process = subprocess.Popen([sys.executable, "-m", "warmswarm_director"], env=env, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, f"the director exited: {process.stderr.read() if process.stderr else ''}"
            try:
                if httpx.get(f"{url}/ready", trust_env=False, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the director did not become ready"
            # Nothing to wait on but the port opening: poll it.
            time.sleep(0.1)
        yield url, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_the_process_serves_the_api_and_stops_cleanly_on_sigterm(
    director_url: tuple[str, subprocess.Popen[str]], endpoints: Any
) -> None:
    url, process = director_url
    group = f"g-{uuid.uuid4().hex[:10]}"
    # The platform's client: it presents the API token (the PUT presents the ops token instead).
    platform = {"Authorization": f"Bearer {API_TOKEN}"}
    with httpx.Client(base_url=url, trust_env=False, timeout=10, headers=platform) as client:
        put = client.put(
            f"/v1/groups/{group}/properties",
            json={"ebs_cache_enabled": True},
            headers={"Authorization": f"Bearer {OPS_TOKEN}"},
        )
        got = client.get(f"/v1/groups/{group}/properties")
        unknown = client.get(f"/v1/services/n-{uuid.uuid4().hex[:10]}")

    assert put.status_code == 200, put.text
    assert got.json()["ebs_cache_enabled"] is True
    assert unknown.status_code == 404

    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=STOP_TIMEOUT_S) == 0
    with redis.Redis.from_url(str(endpoints.redis_url)) as store:
        store.delete(group_key(group))
