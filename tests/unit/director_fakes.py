"""In-memory fakes of the director's own ports (swarm, group store, autoscaler): plain state, no mocks; and what
the director's tests share: its placement settings, alice's owner ids, the service names an earlier release gave.

Each fake keeps what a test sets up and records what the director asked; `down` makes every call fail the way
the adapter fails when its backend does not answer (BackendUnavailable, a 503).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from warmswarm_director.errors import BackendUnavailable, NotFound
from warmswarm_director.placement import PlacementConfig
from warmswarm_director.ports import ANY_RECORD, NO_RECORD, NameTaken, NodeView, ServiceView, StaleEtag, StoredGroup
from warmswarm_director.status import AutoscalerView, TaskView
from warmswarm_models import GroupProperties

PLACEMENT = PlacementConfig(cache_mount_path="/cache", node_cache_path="/var/lib/warmswarm/cache", stop_grace_s=10.0)
ALICE = {"user_id": "alice", "project_id": "p1", "node_id": "n1"}


def legacy_name(node_id: str) -> str:
    """The name an earlier director gave a node id it could not use as is: ws-<readable>-<12 hex of sha256>."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", node_id)[:40].rstrip("-_")
    return f"ws-{readable}-{hashlib.sha256(node_id.encode()).hexdigest()[:12]}"


@dataclass
class FakeSwarm:
    services: dict[str, ServiceView] = field(default_factory=dict)  # by name
    specs: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # by name, as created
    tasks_of: dict[str, list[TaskView]] = field(default_factory=dict)  # by service id
    nodes: dict[str, NodeView] = field(default_factory=dict)
    down: bool = False
    # Runs inside create_service before the name is checked: a concurrent request's create, say.
    before_create: Callable[[], Awaitable[None]] | None = None
    created: int = 0

    def _answer(self) -> None:
        if self.down:
            raise BackendUnavailable("could not reach the Docker daemon: Docker answered [503] (fake)")

    def add(self, name: str, labels: Mapping[str, str]) -> ServiceView:
        """A service that exists already (created by an earlier request, or by someone else)."""
        self.created += 1
        view = ServiceView(f"svc{self.created}", name, dict(labels))
        self.services[name] = view
        return view

    async def find_service(self, name: str) -> ServiceView | None:
        self._answer()
        return self.services.get(name)

    async def create_service(self, spec: Mapping[str, Any]) -> str:
        self._answer()
        if self.before_create is not None:
            hook, self.before_create = self.before_create, None
            await hook()
        name = str(spec["Name"])
        if name in self.services:
            raise NameTaken(f"a service named {name} was created by another request")
        self.specs[name] = spec
        return self.add(name, spec["Labels"]).id

    async def delete_service(self, service_id: str) -> None:
        self._answer()
        for name, view in list(self.services.items()):
            if view.id == service_id:
                del self.services[name]
                return
        raise NotFound("could not delete service: it does not exist (any more)")

    async def tasks(self, service_id: str) -> list[TaskView]:
        self._answer()
        return list(self.tasks_of.get(service_id, []))

    async def node(self, node_id: str) -> NodeView:
        self._answer()
        if node_id not in self.nodes:
            raise NotFound(f"could not inspect node {node_id}: it does not exist (any more)")
        return self.nodes[node_id]

    async def ping(self) -> None:
        self._answer()


@dataclass
class FakeGroups:
    stored: dict[str, GroupProperties] = field(default_factory=dict)
    down: bool = False
    # What a group nobody stored has; None: nothing (as in Redis). Set, every group the platform names exists.
    every_group: GroupProperties | None = None

    def _answer(self) -> None:
        if self.down:
            raise BackendUnavailable("cannot read group properties from Redis: Connection refused (fake)")

    async def get(self, group_id: str) -> GroupProperties | None:
        return (await self.get_many([group_id]))[group_id]

    async def get_many(self, group_ids: Sequence[str]) -> dict[str, GroupProperties | None]:
        self._answer()
        return {group_id: self.stored.get(group_id, self.every_group) for group_id in group_ids}

    async def read(self, group_id: str) -> StoredGroup | None:
        properties = await self.get(group_id)
        return None if properties is None else StoredGroup(properties, _etag(properties))

    async def write(self, group_id: str, properties: GroupProperties, *, expected_etag: str = ANY_RECORD) -> str:
        current = await self.get(group_id)
        current_etag = NO_RECORD if current is None else _etag(current)
        if expected_etag not in (ANY_RECORD, current_etag):
            raise StaleEtag(group_id, expected_etag, current_etag or None)
        self.stored[group_id] = properties
        return _etag(properties)

    async def ping(self) -> None:
        self._answer()


def _etag(properties: GroupProperties) -> str:
    return hashlib.sha1(properties.model_dump_json().encode(), usedforsecurity=False).hexdigest()


@dataclass
class FakeAutoscaler:
    view_now: AutoscalerView = field(default_factory=lambda: AutoscalerView(enabled=True))
    asked: int = 0

    async def view(self) -> AutoscalerView:
        self.asked += 1
        return self.view_now
