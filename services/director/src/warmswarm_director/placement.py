"""Pure placement: the swarm service spec for a request (name, labels, constraints, resources, cache mount); no I/O."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from warmswarm_models import GPU, SERVICE_LABEL_GROUPS_APPLIED, CachePolicy, Owner
from warmswarm_models.cache import RecyclingDecisions

from warmswarm_director.schemas import ServiceRequest

# Marks the services the director created: it reads, answers for and deletes only those.
# (A candidate for warmswarm_models.keys once another service needs to read it.)
MANAGED_BY_LABEL: Final = "warmswarm.managed-by"
MANAGED_BY_DIRECTOR: Final = "director"
# Which of the request's groups decided each recycling property (comma-separated, in the request's order; empty: no
# group had an opinion), beside the property's own label, so that a repeat of the request answers with them. Read by
# the director only, as groups-applied is; the autoscaler reads the properties' own labels.
RECYCLE_MACHINES_DECIDED_BY_LABEL: Final = "warmswarm.recycle-machines.decided-by"
ACCEPT_RECYCLED_DECIDED_BY_LABEL: Final = "warmswarm.accept-recycled.decided-by"

SERVICE_NAME_PREFIX: Final = "ws-"
# A hashed name starts "ws--": a node id starts with a letter or a digit, so no id used as is ("ws-" + id) can
# ever be named like one, whatever id a caller picks.
_HASHED_PREFIX: Final = SERVICE_NAME_PREFIX + "-"
_NANO: Final = 1_000_000_000
# swarmkit's rule for service names: a DNS label of at most 63 characters, no dots; starts and ends with a letter
# or digit. Written without nested quantifiers: one refusing 'ws-aaa…a_' took time exponential in its length.
_SWARM_NAME: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]*[A-Za-z0-9])?")
_SWARM_NAME_MAX: Final = 63
_NOT_IN_SWARM_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
# 32 base32 characters are 160 bits of sha256: another id with the same name would take about 2^160 tries
# (and any two colliding ids at all about 2^80), where the 48 bits of the old 12 hex were within reach.
_HASH_CHARS: Final = 32
_READABLE_PART_MAX: Final = _SWARM_NAME_MAX - len(_HASHED_PREFIX) - 1 - _HASH_CHARS
# Before names were made disjoint: "ws-" + readable + "-" + 12 hex, which an id used as is could equal.
_LEGACY_READABLE_PART_MAX: Final = 40
_LEGACY_HASH_HEX_CHARS: Final = 12


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """The settings placement needs, as plain values (so this module never sees the environment)."""

    cache_mount_path: str
    node_cache_path: str
    stop_grace_s: float


def service_name(node_id: str) -> str:
    """`ws-<node_id>`, or, for a node id swarm cannot take in a name, `ws--<readable part>-<hash of the id>`.

    Owner ids may hold dots and may be 128 characters long; swarm names may not. The hash keeps the
    name a function of the node id alone, which is what makes a repeated request find its service;
    the two forms never meet (see _HASHED_PREFIX), and two hashed names meet only by a sha256 collision.
    """
    plain = SERVICE_NAME_PREFIX + node_id
    if _swarm_accepts(plain):
        return plain
    digest = base64.b32encode(hashlib.sha256(node_id.encode()).digest()).decode().lower()[:_HASH_CHARS]
    return f"{_HASHED_PREFIX}{_readable(node_id, _READABLE_PART_MAX)}-{digest}"


def legacy_service_name(node_id: str) -> str | None:
    """The name an earlier director gave this node id, where it differs from today's (its service is still found)."""
    if _swarm_accepts(SERVICE_NAME_PREFIX + node_id):
        return None
    digest = hashlib.sha256(node_id.encode()).hexdigest()[:_LEGACY_HASH_HEX_CHARS]
    return f"{SERVICE_NAME_PREFIX}{_readable(node_id, _LEGACY_READABLE_PART_MAX)}-{digest}"


def _swarm_accepts(name: str) -> bool:
    return len(name) <= _SWARM_NAME_MAX and _SWARM_NAME.fullmatch(name) is not None


def _readable(node_id: str, max_chars: int) -> str:
    # A node id starts with a letter or digit, so something readable is always left.
    return _NOT_IN_SWARM_NAMES.sub("-", node_id)[:max_chars].rstrip("-_")


def service_labels(owner: Owner, policy: CachePolicy) -> dict[str, str]:
    return {**owner.labels(), **policy.to_labels(), MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR}


def deciders_labels(recycling: RecyclingDecisions) -> dict[str, str]:
    return {
        RECYCLE_MACHINES_DECIDED_BY_LABEL: ",".join(recycling.recycle_machines.decided_by),
        ACCEPT_RECYCLED_DECIDED_BY_LABEL: ",".join(recycling.accept_recycled.decided_by),
    }


def is_managed(labels: Mapping[str, str]) -> bool:
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_DIRECTOR


def service_spec(
    request: ServiceRequest,
    policy: CachePolicy,
    config: PlacementConfig,
    *,
    groups_applied: Sequence[str] = (),
    recycling: RecyclingDecisions | None = None,
) -> dict[str, Any]:
    """The Engine API ServiceSpec (POST /services/create body) for one request; `groups_applied` are the groups
    whose properties made `policy`, and `recycling` which of them decided its recycling properties, kept on the
    service so that a repeat of the request can say them."""
    owner = request.owner
    nano_cpus = round(request.resources.cpus * _NANO)
    memory_bytes = request.resources.memory_bytes
    reservations: dict[str, Any] = {"NanoCPUs": nano_cpus, "MemoryBytes": memory_bytes}
    if request.resources.gpus:
        reservations["GenericResources"] = [{"DiscreteResourceSpec": {"Kind": GPU, "Value": request.resources.gpus}}]
    container: dict[str, Any] = {
        "Image": request.image,
        "StopGracePeriod": round(config.stop_grace_s * _NANO),
        "Labels": owner.labels(),
    }
    if request.command is not None:
        container["Command"] = list(request.command)
    if policy.enabled:
        # The node has the owner's volume mounted at node_cache_path (the autoscaler attached it
        # before the node joined); the service sees it at cache_mount_path.
        container["Mounts"] = [{"Type": "bind", "Source": config.node_cache_path, "Target": config.cache_mount_path}]
    return {
        "Name": service_name(request.node_id),
        "Labels": {
            **service_labels(owner, policy),
            SERVICE_LABEL_GROUPS_APPLIED: ",".join(groups_applied),
            **(deciders_labels(recycling) if recycling is not None else {}),
        },
        "TaskTemplate": {
            "ContainerSpec": container,
            # Limits equal to reservations: a session gets what it asked for, and no more, on a machine
            # sized for it. Swarm limits have no generic resources, so GPUs are only reserved.
            "Resources": {
                "Reservations": reservations,
                "Limits": {"NanoCPUs": nano_cpus, "MemoryBytes": memory_bytes},
            },
            # A service that exits cleanly has ended its session; only a crash is worth a restart.
            "RestartPolicy": {"Condition": "on-failure"},
            "Placement": {"Constraints": owner.constraints()},
        },
        "Mode": {"Replicated": {"Replicas": 1}},
    }
