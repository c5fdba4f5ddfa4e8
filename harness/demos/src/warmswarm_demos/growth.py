"""A session's cache volume filled past the growth threshold, and what its container sees grow (tests, benchmarks)."""

from __future__ import annotations

import asyncio
import subprocess
import time
from dataclasses import dataclass

from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.workload import wait_for

# The session: a writer appending numbered lines to its cache volume every 50 ms for as long as it runs. A gap in
# the numbers would be a write lost while the volume grew.
WRITER_SCRIPT = 'i=0; while :; do i=$((i + 1)); echo "$i" >> /cache/sequence; sleep 0.05; done'
CACHE_PATH = "/cache"


class ContainerError(RuntimeError):
    """A command in the session's container failed; the message has its output."""


@dataclass(frozen=True)
class Grown:
    """What the container saw: its filesystem's size before and after, and how long after the fill it grew."""

    container_id: str
    size_before_kib: int
    size_after_kib: int
    fill_to_grown_s: float


def docker_host_of(sandbox: Sandbox, instance_id: str) -> str:
    (machine,) = [i for i in sandbox.status()["instances"] if i["instance_id"] == instance_id]
    docker_host = machine["docker_host"]
    if docker_host is None:
        raise ContainerError(f"{instance_id} has no running daemon")
    return str(docker_host)


def docker(docker_host: str, *args: str) -> str:
    """The docker CLI against a sandbox machine's own daemon; its output."""
    done = subprocess.run(["docker", "-H", docker_host, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ContainerError(f"docker {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def session_container(docker_host: str) -> str:
    """The one container on the machine (running or not): the session's."""
    ids = docker(docker_host, "ps", "--all", "--quiet", "--no-trunc").split()
    if len(ids) != 1:
        raise ContainerError(f"expected the session's one container, found {ids}")
    return ids[0]


def cache_size_kib(docker_host: str, container_id: str) -> int:
    """The size of the cache filesystem as the container's df sees it (1024-byte blocks)."""
    lines = docker(docker_host, "exec", container_id, "df", "-P", CACHE_PATH).splitlines()
    return int(lines[1].split()[1])


def fill_to(docker_host: str, container_id: str, fill_percent: int) -> int:
    """Fill the session's cache filesystem to fill_percent used (fallocate: the blocks taken, no bytes written, so
    it is quick); its size before, in KiB."""
    _, size_kib, used_kib, *_ = (
        docker(docker_host, "exec", container_id, "df", "-P", CACHE_PATH).splitlines()[1].split()
    )
    ballast_kib = int(size_kib) * fill_percent // 100 - int(used_kib)
    docker(docker_host, "exec", container_id, "fallocate", "-l", f"{ballast_kib}KiB", f"{CACHE_PATH}/ballast")
    return int(size_kib)


async def fill_until_grown(
    sandbox: Sandbox, instance_id: str, *, fill_percent: int = 88, timeout_s: float = 90
) -> Grown:
    """Fill the session's cache filesystem to fill_percent, then wait until the container's df shows it larger;
    timed from the fill's end."""
    docker_host = docker_host_of(sandbox, instance_id)
    container_id = session_container(docker_host)
    size_before_kib = await asyncio.to_thread(fill_to, docker_host, container_id, fill_percent)
    filled_at = time.monotonic()

    async def grown() -> int | None:
        size_kib = await asyncio.to_thread(cache_size_kib, docker_host, container_id)
        return size_kib if size_kib > size_before_kib else None

    size_after_kib, _ = await wait_for("the container's cache filesystem grown", grown, timeout_s=timeout_s)
    return Grown(container_id, size_before_kib, size_after_kib, time.monotonic() - filled_at)
