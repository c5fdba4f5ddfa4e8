"""What each request does: read groups, decide the policy, create/find/delete the service, tell its status."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from pydantic import ValidationError
from warmswarm_models import (
    CachePolicy,
    GroupProperties,
    InvalidCachePolicy,
    InvalidOwner,
    Owner,
    effective_cache_policy,
)
from warmswarm_models.answers import CacheOut, DecidedOut, ServiceOut
from warmswarm_models.cache import GroupsDecision, RecyclingDecisions, recycling_decisions
from warmswarm_models.keys import SERVICE_LABEL_GROUPS_APPLIED
from warmswarm_models.start import StartPath, cache_hit, start_path

from warmswarm_director.errors import BadRequest, Conflict, NotFound, PreconditionFailed, StoredDataUnreadable
from warmswarm_director.metrics import SessionMetrics, Sessions
from warmswarm_director.placement import (
    ACCEPT_RECYCLED_DECIDED_BY_LABEL,
    RECYCLE_MACHINES_DECIDED_BY_LABEL,
    PlacementConfig,
    is_managed,
    legacy_service_name,
    service_name,
    service_spec,
)
from warmswarm_director.ports import (
    ANY_RECORD,
    NO_RECORD,
    AutoscalerPort,
    GroupStorePort,
    NameTaken,
    ServiceView,
    StaleEtag,
    StoredGroup,
    SwarmPort,
)
from warmswarm_director.schemas import GroupPropertiesPatch, ServiceRequest
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

# A PATCH without If-Match merges into whatever is stored; when another edit lands between its read and its write it
# reads again and merges again. Each retry means another edit did land, so this bounds only a storm of edits.
MAX_MERGE_ATTEMPTS: Final = 10


@dataclass(frozen=True, slots=True)
class GroupTerms:
    """A request's effective cache policy, the groups whose properties made it (the request's order), and which of
    them decided each recycling property (a refusal wins)."""

    policy: CachePolicy
    applied: list[str]
    recycling: RecyclingDecisions


class Director:
    """The director's rules, over its ports: idempotent creates, races, ownership, the cache policy, status."""

    def __init__(
        self,
        swarm: SwarmPort,
        groups: GroupStorePort,
        autoscaler: AutoscalerPort,
        placement: PlacementConfig,
        sessions: Sessions | None = None,
        *,
        strict_groups: bool = False,
    ) -> None:
        self._swarm = swarm
        self._groups = groups
        self._autoscaler = autoscaler
        self._placement = placement
        self._strict_groups = strict_groups
        self.sessions = sessions or Sessions(SessionMetrics(), since=0.0)

    async def create_service(self, request: ServiceRequest) -> tuple[ServiceOut, bool]:
        """The owner's service, created now (True) or found from an earlier request for its node_id (False)."""
        terms = await self.group_terms(request.groups)
        policy = terms.policy
        spec = service_spec(request, policy, self._placement, groups_applied=terms.applied, recycling=terms.recycling)
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
                    node_id=request.node_id,
                    service_id=service_id,
                    service_name=name,
                    cache=_terms(policy, terms.recycling),
                    groups_applied=terms.applied,
                ), True
        return self._repeat(existing, request), False

    async def group_terms(self, group_ids: Sequence[str]) -> GroupTerms:
        """The policy the request's groups make together. The platform sends every group of its user (everyone,
        the user's own, organisations, products) and ops set properties for a few: a group without any contributes
        nothing, and with none at all the defaults apply (cache off). Strict mode refuses a group without them."""
        stored = await self._groups.get_many(group_ids)
        missing = [group_id for group_id, properties in stored.items() if properties is None]
        if missing and self._strict_groups:
            raise BadRequest(
                "; ".join(
                    f"group {group_id!r} has no properties; ops set them with PUT /v1/groups/{group_id}/properties"
                    for group_id in missing
                )
            )
        found = {group_id: properties for group_id, properties in stored.items() if properties is not None}
        return GroupTerms(effective_cache_policy(found.values()), list(found), recycling_decisions(found))

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

    async def group_properties(self, group_id: str) -> StoredGroup:
        stored = await self._groups.read(group_id)
        if stored is None:
            raise NotFound(
                f"group {group_id!r} has no properties stored; ops set them with PUT /v1/groups/{group_id}/properties"
            )
        return stored

    async def set_group_properties(
        self, group_id: str, properties: GroupProperties, *, if_match: str | None = None
    ) -> StoredGroup:
        """Replace them; with `if_match` (an ETag the caller read) only if they are still that version."""
        expected = ANY_RECORD if if_match is None else if_match
        if if_match == ANY_RECORD:
            # "*": any version, but some: a group without properties is not replaced, it is a 412.
            current = await self._groups.read(group_id)
            if current is None:
                raise _stale(StaleEtag(group_id, if_match, None))
            expected = current.etag
        try:
            etag = await self._groups.write(group_id, properties, expected_etag=expected)
        except StaleEtag as stale:
            raise _stale(stale) from None
        log.info("group %s properties set: %s", group_id, properties.model_dump_json())
        return StoredGroup(properties, etag)

    async def patch_group_properties(
        self, group_id: str, patch: GroupPropertiesPatch, *, if_match: str | None = None
    ) -> StoredGroup:
        """Change only the fields the patch sends. With `if_match`, only if the stored version is still that one
        (412 otherwise); without it, merged into whatever is stored then, so two edits of different fields both
        land, and two edits of one field land in turn (the later wins, as it would one after the other)."""
        for _ in range(MAX_MERGE_ATTEMPTS):
            current = await self._groups.read(group_id)
            if if_match is not None and (current is None or if_match not in (ANY_RECORD, current.etag)):
                raise _stale(StaleEtag(group_id, if_match, None if current is None else current.etag))
            try:
                properties = patch.applied_to(None if current is None else current.properties)
            except ValidationError as error:
                raise BadRequest(f"group {group_id!r} after this change breaks a rule: {error}") from None
            try:
                etag = await self._groups.write(
                    group_id, properties, expected_etag=NO_RECORD if current is None else current.etag
                )
            except StaleEtag as stale:
                if if_match not in (None, ANY_RECORD):
                    raise _stale(stale) from None
                continue  # another edit landed between our read and our write: merge into it
            log.info("group %s properties changed: %s", group_id, properties.model_dump_json())
            return StoredGroup(properties, etag)
        raise Conflict(
            f"group {group_id!r} changed {MAX_MERGE_ATTEMPTS} times while this change was merged into it; send it again"
        )

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
            cache=_terms(_policy(existing), _recycling_deciders(existing)),
            groups_applied=_groups_applied(existing),
        )


def _serves(service: ServiceView, node_id: str) -> bool:
    return is_managed(service.labels) and service.labels.get("node_id") == node_id


def _policy(service: ServiceView) -> CachePolicy:
    try:
        return CachePolicy.from_labels(service.labels)
    except InvalidCachePolicy as error:
        raise StoredDataUnreadable(f"service {service.name} has cache labels that cannot be read: {error}") from None


def _groups_applied(service: ServiceView) -> list[str] | None:
    """The groups whose properties the service was made with; None when its director did not record them."""
    raw = service.labels.get(SERVICE_LABEL_GROUPS_APPLIED)
    if raw is None:
        return None
    return [group_id for group_id in raw.split(",") if group_id]


def _stale(stale: StaleEtag) -> PreconditionFailed:
    if stale.expected_etag == ANY_RECORD:
        return PreconditionFailed(
            f"group {stale.group_id!r} has no properties stored, and If-Match: * asks for some; set them with PUT"
            f" /v1/groups/{stale.group_id}/properties"
        )
    now = "none are stored now" if stale.current_etag is None else f'they are at ETag "{stale.current_etag}" now'
    return PreconditionFailed(
        f'group {stale.group_id!r}\'s properties changed since ETag "{stale.expected_etag}" was read ({now});'
        f" read them again (GET /v1/groups/{stale.group_id}/properties) and send the change again"
    )


def _recycling_deciders(service: ServiceView) -> RecyclingDecisions | None:
    """Who decided the service's recycling properties, as its labels recorded; None when its director did not.
    The values are the properties' own labels (what the autoscaler obeys), never re-derived."""
    recycle = service.labels.get(RECYCLE_MACHINES_DECIDED_BY_LABEL)
    accept = service.labels.get(ACCEPT_RECYCLED_DECIDED_BY_LABEL)
    if recycle is None or accept is None:
        return None
    policy = _policy(service)
    return RecyclingDecisions(
        recycle_machines=GroupsDecision(policy.recycle_machines, tuple(g for g in recycle.split(",") if g)),
        accept_recycled=GroupsDecision(policy.accept_recycled, tuple(g for g in accept.split(",") if g)),
    )


def _terms(policy: CachePolicy, recycling: RecyclingDecisions | None) -> CacheOut:
    """The answer's terms; each recycling property with the groups that decided it (null when not recorded)."""

    def decided(value: bool, deciders: tuple[str, ...] | None) -> DecidedOut:
        return DecidedOut(value=value, decided_by=None if deciders is None else list(deciders))

    return CacheOut(
        enabled=policy.enabled,
        ttl_s=policy.ttl_s,
        size_gib=policy.size_gib,
        volume_type=policy.volume_type,
        warm_ttl_s=policy.warm_ttl_s,
        recycle_machines=decided(
            policy.recycle_machines, None if recycling is None else recycling.recycle_machines.decided_by
        ),
        accept_recycled=decided(
            policy.accept_recycled, None if recycling is None else recycling.accept_recycled.decided_by
        ),
    )


def _unknown(node_id: str) -> NotFound:
    return NotFound(f"no service for node_id {node_id!r}; create one with POST /v1/services")
