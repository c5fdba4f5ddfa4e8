"""The ports the director talks through (the swarm, the group store, the autoscaler), in its own types.

The adapters (swarm.py, groups.py, autoscaler.py) implement them on aiodocker, Redis and httpx; the
unit tests implement them in memory. Failures come out as DirectorError subclasses (errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from warmswarm_models import GroupProperties

from warmswarm_director.errors import DirectorError
from warmswarm_director.status import AutoscalerView, TaskView


class NameTaken(DirectorError):
    """A service with this name appeared between our look and our create (a concurrent request)."""

    status_code = 409


@dataclass(frozen=True, slots=True)
class ServiceView:
    id: str
    name: str
    labels: Mapping[str, str]
    created_at_s: float | None = None  # epoch s (its CreatedAt): when the session was asked for; None unknown


@dataclass(frozen=True, slots=True)
class NodeView:
    id: str
    labels: Mapping[str, str]  # the node's swarm labels (Spec.Labels)
    engine_labels: Mapping[str, str]  # its Docker daemon's labels (Description.Engine.Labels)


class SwarmPort(Protocol):
    async def find_service(self, name: str) -> ServiceView | None:
        """The service of exactly this name, None when there is none."""
        ...

    async def create_service(self, spec: Mapping[str, Any]) -> str:
        """Create it from an Engine API ServiceSpec; returns its id. Raises NameTaken, BadRequest (refused)."""
        ...

    async def delete_service(self, service_id: str) -> None:
        """Raises NotFound when it is gone already."""
        ...

    async def tasks(self, service_id: str) -> list[TaskView]:
        """The service's tasks the swarm means to run (desired state running), newest first."""
        ...

    async def node(self, node_id: str) -> NodeView: ...

    async def ping(self) -> None: ...


class GroupStorePort(Protocol):
    async def get(self, group_id: str) -> GroupProperties | None: ...

    async def get_many(self, group_ids: Sequence[str]) -> dict[str, GroupProperties | None]:
        """Each group's properties, None where none are stored."""
        ...

    async def put(self, group_id: str, properties: GroupProperties) -> None: ...

    async def ping(self) -> None: ...


class AutoscalerPort(Protocol):
    async def view(self) -> AutoscalerView:
        """Why tasks wait, as the autoscaler says; never raises (a failure is the view's `problem`)."""
        ...
