"""The ports the director talks through (the swarm, the group store, the autoscaler), in its own types.

The adapters (swarm.py, groups.py, autoscaler.py) implement them on aiodocker, Redis and httpx; the
unit tests implement them in memory. Failures come out as DirectorError subclasses (errors.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from warmswarm_models import GroupProperties

from warmswarm_director.errors import DirectorError
from warmswarm_director.status import AutoscalerView, TaskView

# The expected tags of a GroupStorePort.write that are not a stored value's tag: any record or none (an
# unconditional write), and no record at all (a create that must not overwrite).
ANY_RECORD: Final = "*"
NO_RECORD: Final = ""


class StaleEtag(Exception):
    """A write whose expected tag was not the stored value's: someone else wrote in between (or deleted it)."""

    def __init__(self, group_id: str, expected_etag: str, current_etag: str | None) -> None:
        super().__init__(f"group {group_id!r}: expected tag {expected_etag!r}, stored {current_etag!r}")
        self.group_id = group_id
        self.expected_etag = expected_etag
        self.current_etag = current_etag  # None: nothing is stored


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """A group's properties as read, with the tag of the stored value (its HTTP ETag, without the quotes)."""

    properties: GroupProperties
    etag: str


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

    async def read(self, group_id: str) -> StoredGroup | None:
        """The group's properties and their tag; None when none are stored."""
        ...

    async def write(self, group_id: str, properties: GroupProperties, *, expected_etag: str = ANY_RECORD) -> str:
        """Store them, in one step with the check that the stored value's tag is `expected_etag` (ANY_RECORD: no
        check; NO_RECORD: none may be stored). Returns the new tag; raises StaleEtag when the check fails."""
        ...

    async def ping(self) -> None: ...


class AutoscalerPort(Protocol):
    async def view(self) -> AutoscalerView:
        """Why tasks wait, as the autoscaler says; never raises (a failure is the view's `problem`)."""
        ...
