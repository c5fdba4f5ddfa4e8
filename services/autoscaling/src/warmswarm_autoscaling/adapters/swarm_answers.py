"""What the Engine API answers about nodes, services and tasks, read into the snapshot's values once per version.

Every node, service and task in the swarm store carries a version that the store bumps on every change to
it (its spec and its status alike). A reading made at a version stays right while the version holds, so
the next listing reuses it instead of parsing the same answer again: an idle cycle at 10,000 nodes reads
back what it read before. The readings are immutable values, which makes sharing them between snapshots safe.

The `*_json` methods take the answer's bytes (or the chunks they arrived in) and are meant for a worker thread: they
decode and read in one pass (see swarm_listings), under a lock of their own, so the event loop never decodes a listing.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from types import MappingProxyType
from typing import Any, Final, Generic, NamedTuple, TypeVar

from warmswarm_models import Resources
from warmswarm_models.swarm_time import docker_time

from warmswarm_autoscaling.adapters.swarm_listings import Entry, Unsplittable, decoded, elements_in, version_of
from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.snapshot import Node, Task

T = TypeVar("T")

# A listing's answer: its bytes, or the chunks they arrived in (swarm_listings.engine_chunks), read without joining.
Answer = bytes | Sequence[bytes]


class SwarmAnswers:
    """Reads listings of nodes, services and tasks, reusing last listing's unchanged readings."""

    def __init__(self) -> None:
        self._nodes = ByVersion[Node]()
        self._services = ByVersion[_Service]()
        self._tasks = ByVersion[Task]()
        self._by_service: Mapping[str, _Service] = {}
        # How many services listings changed something: a tasks answer is only reused under the same services.
        self._services_read = 0
        # The last tasks answer (its digest, under which services read, its readings): an unchanged answer is not
        # decoded at all. A digest, not the 20 MB of bytes at 10,000 tasks: SHA-256 takes ~10 ms and lets go of
        # the GIL while it runs; a collision is beyond reach.
        self._last_tasks: tuple[bytes, int, list[Task]] | None = None
        # The readings are not for two threads at once (the adapter may give up waiting on one that still runs).
        self._lock = threading.Lock()

    def nodes(self, raw_nodes: Iterable[Mapping[str, Any]]) -> list[Node]:
        return self._nodes.read(raw_nodes, _node)

    def tasks(self, raw_tasks: Iterable[Mapping[str, Any]], raw_services: Sequence[Mapping[str, Any]]) -> list[Task]:
        self._read_services(_entries(raw_services))
        return self._read_tasks(_entries(raw_tasks))[0]

    def nodes_json(self, body: Answer) -> list[Node]:
        with self._lock:
            return _read_json(self._nodes, _chunks(body), _node)

    def services_json(self, body: Answer) -> None:
        """The services the next tasks are read with."""
        chunks = _chunks(body)
        with self._lock:
            try:
                self._read_services(elements_in(chunks))
            except Unsplittable:
                self._read_services(decoded(b"".join(chunks)))

    def tasks_json(self, body: Answer) -> tuple[list[Task], frozenset[str]]:
        """The tasks, and the services they name that the last services listing did not hold (their tasks are
        read without them, and read again next time: list the services and read the tasks again)."""
        chunks = _chunks(body)
        with self._lock:
            hashed = hashlib.sha256()
            for chunk in chunks:
                hashed.update(chunk)
            digest = hashed.digest()
            last = self._last_tasks
            if last is not None and last[1] == self._services_read and last[0] == digest:
                return list(last[2]), frozenset()
            self._last_tasks = None
            try:
                tasks, unknown = self._read_tasks(elements_in(chunks))
            except Unsplittable:
                tasks, unknown = self._read_tasks(decoded(b"".join(chunks)))
            if not unknown:
                self._last_tasks = (digest, self._services_read, tasks)
            return list(tasks), unknown

    def _read_services(self, entries: Iterable[Entry]) -> None:
        read = self._services.read_entries(entries, _service)
        # A task is read with its service's name and labels: when the service changed (ops turned its
        # cache on) or went, its tasks are read again, whatever their own version says.
        changed = self._services.changed
        if changed:
            self._by_service = {service.id: service for service in read}
            self._services_read += 1
            self._tasks.forget(lambda task: task.service_id in changed)

    def _read_tasks(self, entries: Iterable[Entry]) -> tuple[list[Task], frozenset[str]]:
        services = self._by_service
        tasks = self._tasks.read_entries(entries, lambda raw: _task(raw, services))
        # Their tasks are read again once the service is listed: a new service is among the changed ones then.
        unknown = frozenset(task.service_id for task in tasks if task.service_id and task.service_id not in services)
        return tasks, unknown


class ByVersion(Generic[T]):
    """The last listing's readings by object id, each with the version it was read at."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[int | None, T]] = {}
        # Ids the last listing read afresh (new or of a new version) or no longer holds.
        self.changed: frozenset[str] = frozenset()

    def read(self, raws: Iterable[Mapping[str, Any]], parse: Callable[[Mapping[str, Any]], T]) -> list[T]:
        return self.read_entries(_entries(raws), parse)

    def read_entries(self, entries: Iterable[Entry], parse: Callable[[Mapping[str, Any]], T]) -> list[T]:
        """Each object read, or reused when its version is the one read last time (then it is not even decoded).

        An object without a version is always read afresh. Only this listing's objects are kept for
        the next: a removed one is forgotten, so the memory is the size of the cluster. Nothing is kept
        when the entries raise.

        What is kept is changed in place, by the changes alone: a listing at 10,000 objects that made
        10,000 long-lived tuples would wake the collector's full pass (which holds the GIL, and so the
        event loop) every cycle or two.
        """
        earlier_kept = self._kept
        fresh: dict[str, tuple[int | None, T]] = {}
        seen: set[str] = set()
        readings: list[T] = []
        for object_id, version, load in entries:
            seen.add(object_id)
            earlier = earlier_kept.get(object_id)
            if version is not None and earlier is not None and earlier[0] == version:
                reading = earlier[1]
            else:
                reading = parse(load())
                fresh[object_id] = (version, reading)
            readings.append(reading)
        removed = earlier_kept.keys() - seen
        for object_id in removed:
            del earlier_kept[object_id]
        earlier_kept.update(fresh)
        self.changed = frozenset(fresh.keys() | removed)
        return readings

    def forget(self, drop: Callable[[T], bool]) -> None:
        """The readings for which `drop` holds are read afresh next time."""
        self._kept = {key: value for key, value in self._kept.items() if not drop(value[1])}


def _entries(raws: Iterable[Mapping[str, Any]]) -> Iterator[Entry]:
    for raw in raws:
        yield str(raw["ID"]), version_of(raw), partial(_itself, raw)


def _itself(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw


def _chunks(body: Answer) -> Sequence[bytes]:
    return (body,) if isinstance(body, bytes) else body


def _read_json(by_version: ByVersion[T], chunks: Sequence[bytes], parse: Callable[[Mapping[str, Any]], T]) -> list[T]:
    try:
        return by_version.read_entries(elements_in(chunks), parse)
    except Unsplittable:
        # Only an answer not written as the Engine writes it is joined, to be decoded whole.
        return by_version.read_entries(decoded(b"".join(chunks)), parse)


def _resources(raw: Mapping[str, Any] | None) -> Resources:
    """Engine API resources: NanoCPUs, MemoryBytes and GenericResources (discrete counts or named units)."""
    raw = raw or {}
    nano_cpus, memory_bytes = int(raw.get("NanoCPUs") or 0), int(raw.get("MemoryBytes") or 0)
    items = raw.get("GenericResources") or []
    if not items:
        return _plain_resources(nano_cpus, memory_bytes)
    generic: dict[str, int] = {}
    for item in items:
        if discrete := item.get("DiscreteResourceSpec"):
            kind = str(discrete["Kind"])
            generic[kind] = generic.get(kind, 0) + int(discrete["Value"])
        elif named := item.get("NamedResourceSpec"):
            # One entry per named unit (e.g. one GPU UUID): the count is what placement needs.
            kind = str(named["Kind"])
            generic[kind] = generic.get(kind, 0) + 1
    return Resources.from_nano_cpus(nano_cpus, memory_bytes, generic)


@functools.lru_cache(maxsize=1024)
def _plain_resources(nano_cpus: int, memory_bytes: int) -> Resources:
    """One value per amount, shared: a service's tasks reserve the same, a type's nodes offer the same, and a
    Resources is immutable (at 10,000 nodes and tasks, 20,000 values less kept)."""
    return Resources.from_nano_cpus(nano_cpus, memory_bytes)


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
    id: str
    name: str
    labels: Mapping[str, str]
    is_global: bool


# A service removed between the two reads: its tasks are on their way out, no name and no labels.
_GONE: Final = _Service("", "", MappingProxyType({}), is_global=False)
# Service modes that run one task per node (a global job runs to completion on each node once).
_GLOBAL_MODES: Final = ("Global", "GlobalJob")


def _service(raw: Mapping[str, Any]) -> _Service:
    spec = raw.get("Spec") or {}
    return _Service(
        id=str(raw["ID"]),
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
