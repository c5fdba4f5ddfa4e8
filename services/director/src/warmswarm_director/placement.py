"""Pure placement: the swarm service spec for a request (name, labels, constraints, resources, cache mount); no I/O."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from warmswarm_models import GPU, CachePolicy, Owner

from warmswarm_director.schemas import ServiceRequest

# Marks the services the director created: it reads, answers for and deletes only those.
# (A candidate for warmswarm_models.keys once another service needs to read it.)
MANAGED_BY_LABEL: Final = "warmswarm.managed-by"
MANAGED_BY_DIRECTOR: Final = "director"

SERVICE_NAME_PREFIX: Final = "ws-"
_NANO: Final = 1_000_000_000
# swarmkit's rule for service names: a DNS label of at most 63 characters, no dots.
_SWARM_NAME: Final = re.compile(r"[A-Za-z0-9](?:[-_]*[A-Za-z0-9]+)*")
_SWARM_NAME_MAX: Final = 63
_NOT_IN_SWARM_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
_READABLE_PART_MAX: Final = 40
_HASH_CHARS: Final = 12


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """The settings placement needs, as plain values (so this module never sees the environment)."""

    cache_mount_path: str
    node_cache_path: str
    stop_grace_s: float


def service_name(node_id: str) -> str:
    """`ws-<node_id>`, or, for a node id swarm cannot take in a name, a readable part and a hash of it.

    Owner ids may hold dots and may be 128 characters long; swarm names may not. The hash keeps the
    name a function of the node id alone, which is what makes a repeated request find its service.
    """
    plain = SERVICE_NAME_PREFIX + node_id
    if len(plain) <= _SWARM_NAME_MAX and _SWARM_NAME.fullmatch(plain):
        return plain
    readable = _NOT_IN_SWARM_NAMES.sub("-", node_id)[:_READABLE_PART_MAX].rstrip("-_")
    digest = hashlib.sha256(node_id.encode()).hexdigest()[:_HASH_CHARS]
    return f"{SERVICE_NAME_PREFIX}{readable}-{digest}"


def service_labels(owner: Owner, policy: CachePolicy) -> dict[str, str]:
    return {**owner.labels(), **policy.to_labels(), MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR}


def is_managed(labels: Mapping[str, str]) -> bool:
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_DIRECTOR


def service_spec(request: ServiceRequest, policy: CachePolicy, config: PlacementConfig) -> dict[str, Any]:
    """The Engine API ServiceSpec (POST /services/create body) for one request."""
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
        "Labels": service_labels(owner, policy),
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
