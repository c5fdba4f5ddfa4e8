"""Work for the sandbox's swarm: owner-pinned services as users start them, and waiting on their tasks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiodocker

T = TypeVar("T")

_NANO = 1_000_000_000


def owner_constraints(owner: Mapping[str, str]) -> list[str]:
    """The placement constraints that pin a service to its owner's nodes (the models' rule, spelled out)."""
    return [f"node.labels.{key}=={value}" for key, value in owner.items()]


async def create_service(
    docker: aiodocker.Docker,
    name: str,
    image: str,
    *,
    owner: Mapping[str, str] | None = None,
    cpus: float = 0.0,
    memory_bytes: int = 0,
    constraints: list[str] | None = None,
    command: list[str] | None = None,
) -> str:
    """Create a one-replica service reserving cpus/memory, pinned to `owner`; returns the service id."""
    task_template: dict[str, Any] = {
        "ContainerSpec": {
            "Image": image,
            "Command": command or ["sleep", "100000"],
            # busybox sleep as PID 1 ignores SIGTERM: without a short grace, every stop costs 10 s.
            "StopGracePeriod": _NANO,
        },
        "Resources": {
            "Reservations": {"NanoCPUs": round(cpus * _NANO), "MemoryBytes": memory_bytes},
        },
        "Placement": {"Constraints": owner_constraints(owner or {}) + list(constraints or [])},
        "RestartPolicy": {"Condition": "on-failure", "Delay": _NANO},
    }
    service = await docker.services.create(task_template, name=name, labels=dict(owner or {}))
    return str(service["ID"])


async def running_task(docker: aiodocker.Docker, service_id: str) -> dict[str, Any] | None:
    """The service's running task, or None."""
    tasks = await docker.tasks.list(filters={"service": service_id, "desired-state": "running"})
    return next((dict(t) for t in tasks if t["Status"]["State"] == "running"), None)


def running_task_of(docker: aiodocker.Docker, service_id: str) -> Callable[[], Awaitable[dict[str, Any] | None]]:
    """A probe for wait_for: the service's running task."""
    return lambda: running_task(docker, service_id)


async def wait_for(
    what: str, probe: Callable[[], Awaitable[T | None]], timeout_s: float, interval_s: float = 0.2
) -> tuple[T, float]:
    """Poll `probe` until it returns something truthy; returns it with the seconds it took."""
    started = time.monotonic()
    while True:
        value = await probe()
        if value:
            return value, time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        await asyncio.sleep(interval_s)
