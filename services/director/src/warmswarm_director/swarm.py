"""The swarm via aiodocker: create, find, delete a service, read its tasks and node; Docker errors become ours."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Mapping
from typing import Any, Final, TypeVar

import aiodocker
import aiohttp
from warmswarm_models.swarm_time import docker_time

from warmswarm_director.errors import BackendUnavailable, BadRequest, NotFound
from warmswarm_director.ports import NameTaken, NodeView, ServiceView
from warmswarm_director.status import TaskView

T = TypeVar("T")

# aiodocker's status for "the daemon could not be reached" (no HTTP answer at all).
_NO_ANSWER: Final = 900


class Swarm:
    """Implements ports.SwarmPort on one swarm manager's Engine API."""

    def __init__(self, docker: aiodocker.Docker) -> None:
        self._docker = docker

    async def find_service(self, name: str) -> ServiceView | None:
        try:
            raw = await self._docker.services.inspect(name)
        except aiodocker.DockerError as error:
            if error.status == 404:
                return None
            raise _failure(f"inspect service {name}", error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure(f"inspect service {name}", error) from error
        spec = raw.get("Spec") or {}
        found = ServiceView(
            str(raw["ID"]),
            str(spec.get("Name", "")),
            dict(spec.get("Labels") or {}),
            docker_time(str(raw.get("CreatedAt") or "")),
        )
        # Docker also matches an id prefix; only an exact name is this service.
        return found if found.name == name else None

    async def create_service(self, spec: Mapping[str, Any]) -> str:
        # aiodocker's create() rewrites ContainerSpec.Env in place and takes the spec apart; a copy of
        # our spec, whole, keeps what was asked for exactly what is sent.
        body = json.loads(json.dumps(spec))
        try:
            created = await self._docker.services.create(
                body["TaskTemplate"], name=body["Name"], labels=body["Labels"], mode=body["Mode"]
            )
        except aiodocker.DockerError as error:
            if error.status == 409:
                raise NameTaken(f"a service named {body['Name']} was created by another request") from error
            if error.status == 400:
                raise BadRequest(f"the swarm refused the service: {error.message}") from error
            raise _failure(f"create service {body['Name']}", error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure(f"create service {body['Name']}", error) from error
        return str(created["ID"])

    async def delete_service(self, service_id: str) -> None:
        await self._call(f"delete service {service_id}", self._docker.services.delete(service_id))

    async def tasks(self, service_id: str) -> list[TaskView]:
        """The service's tasks the swarm means to run (desired state running), newest first."""
        raw_tasks = await self._call(
            f"list the tasks of service {service_id}",
            self._docker.tasks.list(filters={"service": service_id, "desired-state": "running"}),
        )
        views = [_task(raw) for raw in raw_tasks if str(raw.get("ServiceID", "")) == service_id]
        return sorted(views, key=lambda t: t.created_at, reverse=True)

    async def node(self, node_id: str) -> NodeView:
        raw = await self._call(f"inspect node {node_id}", self._docker.nodes.inspect(node_id=node_id))
        engine = (raw.get("Description") or {}).get("Engine") or {}
        return NodeView(
            str(raw["ID"]), dict((raw.get("Spec") or {}).get("Labels") or {}), dict(engine.get("Labels") or {})
        )

    async def ping(self) -> None:
        await self._call("reach the Docker daemon", self._docker.system.info())

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except aiodocker.DockerError as error:
            if error.status == 404:
                raise NotFound(f"could not {what}: it does not exist (any more)") from error
            raise _failure(what, error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise _failure(what, error) from error


def _failure(what: str, error: Exception) -> BackendUnavailable:
    if isinstance(error, aiodocker.DockerError):
        if error.status == _NO_ANSWER:
            return BackendUnavailable(f"could not {what}: {error.message}; check DOCKER_HOST and that the daemon runs")
        if error.status == 503:
            return BackendUnavailable(
                f"could not {what}: Docker answered [503] {error.message};"
                " point DOCKER_HOST at a swarm manager (or the swarm has lost quorum)"
            )
        return BackendUnavailable(f"could not {what}: Docker answered [{error.status}] {error.message}")
    return BackendUnavailable(f"could not {what}: {type(error).__name__} {error}; check that the daemon answers")


def _task(raw: Mapping[str, Any]) -> TaskView:
    status = raw.get("Status") or {}
    return TaskView(
        id=str(raw["ID"]),
        state=str(status.get("State", "")),
        node_id=str(raw["NodeID"]) if raw.get("NodeID") else None,
        err=str(status["Err"]) if status.get("Err") else None,
        message=str(status["Message"]) if status.get("Message") else None,
        created_at=str(raw.get("CreatedAt", "")),
        status_at_s=docker_time(str(status.get("Timestamp") or "")),
    )
