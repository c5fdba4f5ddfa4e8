"""What the Engine API answers about nodes, services and tasks, read into the snapshot's values once per version.

Every node, service and task in the swarm store carries a version that the store bumps on every change to
it (its spec and its status alike). A reading made at a version stays right while the version holds, so
the next listing reuses it instead of parsing the same answer again: an idle cycle at 10,000 nodes reads
back what it read before. The readings are immutable values, which makes sharing them between snapshots safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final, Generic, NamedTuple, TypeVar

from warmswarm_models import Resources
from warmswarm_models.swarm_time import docker_time

from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.snapshot import Node, Task

T = TypeVar("T")


class SwarmAnswers:
    """Reads listings of nodes and of tasks (with their services), reusing last listing's unchanged readings."""

    def __init__(self) -> None:
        self._nodes = ByVersion[Node]()
        self._services = ByVersion[_Service]()
        self._tasks = ByVersion[Task]()

    def nodes(self, raw_nodes: Iterable[Mapping[str, Any]]) -> list[Node]:
        return self._nodes.read(raw_nodes, _node)

    def tasks(self, raw_tasks: Iterable[Mapping[str, Any]], raw_services: Sequence[Mapping[str, Any]]) -> list[Task]:
        read = self._services.read(raw_services, _service)
        services = dict(zip((str(s["ID"]) for s in raw_services), read, strict=True))
        # A task is read with its service's name and labels: when the service changed (ops turned its
        # cache on) or went, its tasks are read again, whatever their own version says.
        changed = self._services.changed
        if changed:
            self._tasks.forget(lambda task: task.service_id in changed)
        return self._tasks.read(raw_tasks, lambda raw: _task(raw, services))


class ByVersion(Generic[T]):
    """The last listing's readings by object id, each with the version it was read at."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[int | None, T]] = {}
        # Ids the last listing read afresh (new or of a new version) or no longer holds.
        self.changed: frozenset[str] = frozenset()

    def read(self, raws: Iterable[Mapping[str, Any]], parse: Callable[[Mapping[str, Any]], T]) -> list[T]:
        """Each raw object read, or reused when its version is the one read last time.

        A raw object without a version is always read afresh. Only this listing's objects are kept for
        the next: a removed one is forgotten, so the memory is the size of the cluster.
        """
        earlier_kept, kept = self._kept, {}
        changed: set[str] = set()
        readings: list[T] = []
        for raw in raws:
            object_id = str(raw["ID"])
            version = _version(raw)
            earlier = earlier_kept.get(object_id)
            if version is not None and earlier is not None and earlier[0] == version:
                reading = earlier[1]
            else:
                reading = parse(raw)
                changed.add(object_id)
            kept[object_id] = (version, reading)
            readings.append(reading)
        changed.update(earlier_kept.keys() - kept.keys())
        self._kept, self.changed = kept, frozenset(changed)
        return readings

    def forget(self, drop: Callable[[T], bool]) -> None:
        """The readings for which `drop` holds are read afresh next time."""
        self._kept = {key: value for key, value in self._kept.items() if not drop(value[1])}


def _resources(raw: Mapping[str, Any] | None) -> Resources:
    """Engine API resources: NanoCPUs, MemoryBytes and GenericResources (discrete counts or named units)."""
    raw = raw or {}
    generic: dict[str, int] = {}
    for item in raw.get("GenericResources") or []:
        if discrete := item.get("DiscreteResourceSpec"):
            kind = str(discrete["Kind"])
            generic[kind] = generic.get(kind, 0) + int(discrete["Value"])
        elif named := item.get("NamedResourceSpec"):
            # One entry per named unit (e.g. one GPU UUID): the count is what placement needs.
            kind = str(named["Kind"])
            generic[kind] = generic.get(kind, 0) + 1
    return Resources.from_nano_cpus(int(raw.get("NanoCPUs") or 0), int(raw.get("MemoryBytes") or 0), generic)


def _version(raw: Mapping[str, Any]) -> int | None:
    """The swarm object's version: the store bumps it on every change, its status included."""
    index = (raw.get("Version") or {}).get("Index")
    return index if isinstance(index, int) else None


def _node(raw: Mapping[str, Any]) -> Node:
    description = raw.get("Description") or {}
    spec = raw.get("Spec") or {}
    engine_labels = (description.get("Engine") or {}).get("Labels") or {}
    return read_node(
        id=str(raw["ID"]),
        hostname=str(description.get("Hostname", "")),
        state=str((raw.get("Status") or {}).get("State", "unknown")),
        availability=str(spec.get("Availability", "active")),
        role=str(spec.get("Role", "worker")),
        resources=_resources(description.get("Resources")),
        labels={str(k): str(v) for k, v in (spec.get("Labels") or {}).items()},
        engine_labels={str(k): str(v) for k, v in engine_labels.items()},
        addr=str((raw.get("Status") or {}).get("Addr", "")),
    )


class _Service(NamedTuple):
    name: str
    labels: Mapping[str, str]
    is_global: bool


# A service removed between the two reads: its tasks are on their way out, no name and no labels.
_GONE: Final = _Service("", MappingProxyType({}), is_global=False)
# Service modes that run one task per node (a global job runs to completion on each node once).
_GLOBAL_MODES: Final = ("Global", "GlobalJob")


def _service(raw: Mapping[str, Any]) -> _Service:
    spec = raw.get("Spec") or {}
    return _Service(
        name=str(spec.get("Name", "")),
        labels=MappingProxyType({str(k): str(v) for k, v in (spec.get("Labels") or {}).items()}),
        is_global=any(mode in (spec.get("Mode") or {}) for mode in _GLOBAL_MODES),
    )


def _task(raw: Mapping[str, Any], services: Mapping[str, _Service]) -> Task:
    spec = raw.get("Spec") or {}
    status = raw.get("Status") or {}
    service_id = str(raw.get("ServiceID", ""))
    node_id = raw.get("NodeID")
    # One _Service per service, shared by all its tasks: the labels are read-only, so sharing is safe.
    service = services.get(service_id, _GONE)
    return read_task(
        id=str(raw["ID"]),
        service_id=service_id,
        service_name=service.name,
        state=str(status.get("State", "")),
        desired_state=str(raw.get("DesiredState", "")),
        reservations=_resources((spec.get("Resources") or {}).get("Reservations")),
        constraints=[str(c) for c in (spec.get("Placement") or {}).get("Constraints") or ()],
        node_id=str(node_id) if node_id else None,
        err=str(status.get("Err", "")),
        service_labels=service.labels,
        global_service=service.is_global,
        created_at=docker_time(str(raw.get("CreatedAt") or "")),
    )
