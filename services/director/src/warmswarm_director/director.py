"""What each request does: read groups, decide the policy, create/find/delete the service, tell its status."""

from __future__ import annotations

import logging
from dataclasses import replace

from warmswarm_models import (
    CachePolicy,
    GroupProperties,
    InvalidCachePolicy,
    InvalidOwner,
    Owner,
    effective_cache_policy,
)
from warmswarm_models.answers import CacheOut, ServiceOut
from warmswarm_models.start import StartPath, cache_hit, start_path

from warmswarm_director.errors import BadRequest, Conflict, NotFound, StoredDataUnreadable
from warmswarm_director.metrics import SessionMetrics, Sessions
from warmswarm_director.placement import (
    PlacementConfig,
    is_managed,
    legacy_service_name,
    service_name,
    service_spec,
)
from warmswarm_director.ports import AutoscalerPort, GroupStorePort, NameTaken, ServiceView, SwarmPort
from warmswarm_director.schemas import ServiceRequest
from warmswarm_director.status import (
    RUNNING,
    AutoscalerView,
    Status,
    TaskView,
    current_task,
    needs_autoscaler,
    running_status,
    waiting_status,
)

log = logging.getLogger(__name__)


class Director:
    """The director's rules, over its ports: idempotent creates, races, ownership, the cache policy, status."""

    def __init__(
        self,
        swarm: SwarmPort,
        groups: GroupStorePort,
        autoscaler: AutoscalerPort,
        placement: PlacementConfig,
        sessions: Sessions | None = None,
    ) -> None:
        self._swarm = swarm
        self._groups = groups
        self._autoscaler = autoscaler
        self._placement = placement
        self.sessions = sessions or Sessions(SessionMetrics(), since=0.0)

    async def create_service(self, request: ServiceRequest) -> tuple[ServiceOut, bool]:
        """The owner's service, created now (True) or found from an earlier request for its node_id (False)."""
        policy = await self.cache_policy(request.groups)
        spec = service_spec(request, policy, self._placement)
        name = str(spec["Name"])
        existing = await self._swarm.find_service(name) or await self._under_legacy_name(request.node_id)
        if existing is None:
            try:
                service_id = await self._swarm.create_service(spec)
            except NameTaken:
                # A concurrent request for the same node_id won the race; answer as for a repeat.
                existing = await self._swarm.find_service(name)
                if existing is None:
                    raise Conflict(
                        f"the service for node_id {request.node_id!r} was created and removed while this request"
                        " ran; send it again"
                    ) from None
            else:
                log.info(
                    "created service %s (%s) for %s; cache %s",
                    name,
                    service_id,
                    request.owner,
                    "on" if policy.enabled else "off",
                )
                return ServiceOut(
                    node_id=request.node_id, service_id=service_id, service_name=name, cache=_terms(policy)
                ), True
        return self._repeat(existing, request), False

    async def cache_policy(self, group_ids: list[str]) -> CachePolicy:
        stored = await self._groups.get_many(group_ids)
        missing = [group_id for group_id, properties in stored.items() if properties is None]
        if missing:
            raise BadRequest(
                "; ".join(
                    f"group {group_id!r} has no properties; ops set them with PUT /v1/groups/{group_id}/properties"
                    for group_id in missing
                )
            )
        return effective_cache_policy(p for p in stored.values() if p is not None)

    async def status(self, node_id: str) -> Status:
        service = await self._managed_service(node_id)
        task = current_task(await self._swarm.tasks(service.id))
        if task is not None and task.state == RUNNING and task.node_id is not None:
            node = await self._swarm.node(task.node_id)
            cache_enabled = _policy(service).enabled
            running = running_status(task, node.labels, node.engine_labels, cache_enabled=cache_enabled)
            path = await self._start_path(service, task, running.instance_id, cache_enabled=cache_enabled)
            return replace(running, start_path=path)
        view = await self._autoscaler.view() if needs_autoscaler(task) else AutoscalerView(enabled=False)
        return waiting_status(task, service.name, view)

    async def _start_path(
        self, service: ServiceView, task: TaskView, instance_id: str | None, *, cache_enabled: bool
    ) -> StartPath | None:
        """The running session's start path: its machine's facts asked of the autoscaler once, at the session's
        first "running" answer (its one observation in the metrics), and kept."""
        told = self.sessions.get(service.id)
        if told is not None:
            return told.path
        requested_at = service.created_at_s
        view = await self._autoscaler.view() if instance_id else AutoscalerView(enabled=False)
        machine = view.machines.get(instance_id or "")
        path: StartPath | None = None
        hit: bool | None = None
        if machine is not None and requested_at is not None:
            path = start_path(requested_at, machine)
            hit = cache_hit(requested_at, machine) if cache_enabled else None
        return self.sessions.decide(
            service.id,
            path,
            requested_at=requested_at,
            running_at=task.status_at_s,
            cache_hit=hit,
        )

    async def delete_service(self, node_id: str) -> None:
        service = await self._managed_service(node_id)
        try:
            await self._swarm.delete_service(service.id)
        except NotFound:
            raise _unknown(node_id) from None
        log.info("deleted service %s (%s)", service.name, service.id)

    async def group_properties(self, group_id: str) -> GroupProperties:
        properties = await self._groups.get(group_id)
        if properties is None:
            raise NotFound(
                f"group {group_id!r} has no properties stored; ops set them with PUT /v1/groups/{group_id}/properties"
            )
        return properties

    async def set_group_properties(self, group_id: str, properties: GroupProperties) -> GroupProperties:
        await self._groups.put(group_id, properties)
        log.info("group %s properties set: %s", group_id, properties.model_dump_json())
        return properties

    async def ready(self) -> None:
        await self._swarm.ping()
        await self._groups.ping()

    async def _managed_service(self, node_id: str) -> ServiceView:
        try:
            Owner(node_id=node_id)
        except InvalidOwner as error:
            raise BadRequest(str(error)) from None
        service = await self._swarm.find_service(service_name(node_id))
        # A service of that name the director did not create is not one it answers for.
        if service is not None and _serves(service, node_id):
            return service
        legacy = await self._under_legacy_name(node_id)
        if legacy is None:
            raise _unknown(node_id)
        return legacy

    async def _under_legacy_name(self, node_id: str) -> ServiceView | None:
        """The node id's service under the name an earlier director gave it, if it has one there.

        That name may be another node id's name today (the old forms could meet), so only a service the
        director made for this very node id counts; anything else there is neither found nor in the way.
        """
        name = legacy_service_name(node_id)
        found = None if name is None else await self._swarm.find_service(name)
        return found if found is not None and _serves(found, node_id) else None

    def _repeat(self, existing: ServiceView, request: ServiceRequest) -> ServiceOut:
        if not is_managed(existing.labels):
            raise Conflict(
                f"a service named {existing.name} exists that the director did not create; remove it or use"
                " another node_id"
            )
        if Owner.from_labels(existing.labels) != request.owner:
            # The other owner's ids are theirs: say that it is taken, not by whom.
            raise Conflict(f"node_id {request.node_id!r} is already in use by another user or project")
        return ServiceOut(
            node_id=request.node_id,
            service_id=existing.id,
            service_name=existing.name,
            cache=_terms(_policy(existing)),
        )


def _serves(service: ServiceView, node_id: str) -> bool:
    return is_managed(service.labels) and service.labels.get("node_id") == node_id


def _policy(service: ServiceView) -> CachePolicy:
    try:
        return CachePolicy.from_labels(service.labels)
    except InvalidCachePolicy as error:
        raise StoredDataUnreadable(f"service {service.name} has cache labels that cannot be read: {error}") from None


def _terms(policy: CachePolicy) -> CacheOut:
    return CacheOut(
        enabled=policy.enabled,
        ttl_s=policy.ttl_s,
        size_gib=policy.size_gib,
        volume_type=policy.volume_type,
        warm_ttl_s=policy.warm_ttl_s,
    )


def _unknown(node_id: str) -> NotFound:
    return NotFound(f"no service for node_id {node_id!r}; create one with POST /v1/services")
