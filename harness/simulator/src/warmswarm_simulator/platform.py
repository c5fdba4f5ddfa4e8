"""The platform's side of a session: the director creates its service, the session fetches its data, runs, and ends.

A session waits from its arrival until its task runs and its data is in place: read in place when the node mounts
the owner's cache volume holding it (a hit), else downloaded at the modelled rate (and then written to the volume, if
one is mounted and the data fits). The user then works for the session's duration and closes it (the service is
removed). A return of an owner whose previous session still runs waits for it to end (counted as deferred).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import Enum

from warmswarm_models import (
    ENGINE_LABEL_CACHE_VOLUME,
    GPU,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLED_TAG,
    CachePolicy,
    GroupProperties,
    Owner,
    Resources,
)
from warmswarm_models.cache import effective_cache_policy

from warmswarm_simulator.cache_writes import CacheWriter
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_values import SimInstance
from warmswarm_simulator.config import GIB
from warmswarm_simulator.phases import Marks
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.workload import Session
from warmswarm_simulator.world import World

SESSION_IMAGE = "simcore/services/dynamic/session:1.0"
SESSION_LABEL = "osparc.session"


class Placement(Enum):
    OWNER = "owner"  # warmswarm's director: owner constraints and the group's cache labels
    SESSION = "session"  # an osparc-like platform that pins each session to its own machine by a label
    SHARED = "shared"  # an osparc-like platform without per-session labels: any machine with room


# How a session's first run got its machine. A recycled machine is one that served another owner and was scrubbed
# (its warmswarm:recycled tag), counted as such only for its first session of its new owner; a warm buffer's machine
# was claimed and started for the session, a hot one claimed running; the owner's warm machine was stopped and started
# again for it; a cold launch is a machine launched after the session was requested; a running machine was up before
# (the owner's, another of the owner's sessions', or a batch's).
START_PATHS = ("cold launch", "warm buffer", "hot buffer", "recycled", "own warm machine", "running machine")


def start_path(
    instance: SimInstance | None, record: SessionRecord, started: bool, claimed: bool, owner_was_here: bool
) -> str:
    """Which of START_PATHS a session's first run took, read from the machine it ran on."""
    if instance is None:
        return "running machine"
    if instance.tags.get(INSTANCE_RECYCLED_TAG, "0") not in ("", "0") and not owner_was_here:
        return "recycled"
    if claimed and not owner_was_here:
        return "warm buffer" if started else "hot buffer"
    if started:
        return "own warm machine"
    return "cold launch" if instance.launched_at_s >= record.requested_s else "running machine"


@dataclass(slots=True)
class SessionRecord:
    session: Session
    cache: CachePolicy  # what the owner's groups keep (whether the platform writes it or not)
    requested_s: float
    previous_end_s: float | None = None  # when the owner's previous session of the day ended
    deferred: bool = False
    started_s: float | None = None  # its service was created
    ready_s: float | None = None  # first time running with its data in place
    end_at_s: float | None = None
    ended_s: float | None = None
    hit: bool | None = None  # its data was in place when it first ran
    resumed: bool | None = None  # it first ran on a stopped machine started again since it was requested (warm)
    # It first ran on a machine of the warm buffer, claimed and started for it: the first session that machine ran.
    from_buffer: bool | None = None
    downloaded_gb: float = 0.0
    interruptions: int = 0
    service_id: str | None = None
    running_on: str | None = None
    generation: int = 0
    # The events of the run that first put its data in place (phases.py), and whether its machine had run another
    # owner's session before it.
    marks: Marks | None = None
    reused_across_owners: bool = False
    start_path: str | None = None  # how its first run got its machine: one of START_PATHS
    run_marks: tuple[float | None, float, float, float, float] | None = None
    index: int = -1  # its place in the platform's records
    volume_id: str | None = None  # the cache volume mounted where it runs now

    @property
    def wait_s(self) -> float | None:
        return None if self.ready_s is None else self.ready_s - self.requested_s

    @property
    def gap_s(self) -> float | None:
        return None if self.previous_end_s is None else self.requested_s - self.previous_end_s


class Platform:
    def __init__(
        self,
        world: World,
        swarm: Swarm,
        cloud: Cloud,
        *,
        placement: Placement,
        groups: dict[str, GroupProperties],
        download_mb_per_s: float,
        writer: CacheWriter | None = None,
    ) -> None:
        self._world = world
        self._swarm = swarm
        self._cloud = cloud
        self._placement = placement
        self._groups = groups
        self._download_mb_per_s = download_mb_per_s
        self.writer = writer  # sessions' writes to their owners' volumes (None: the data stays as downloaded)
        self.records: list[SessionRecord] = []
        self._active: dict[tuple[str, str, str], SessionRecord] = {}
        self._deferred: dict[tuple[str, str, str], list[SessionRecord]] = {}
        self._last_end: dict[tuple[str, str, str], float] = {}
        self.open = 0
        self.running_series: list[tuple[float, int]] = [(0.0, 0)]
        self._running = 0
        self.all_ended = asyncio.Event()
        self._owners_on: dict[str, set[tuple[str, str, str]]] = {}  # instance id -> the owners that ran there
        self._served: set[str] = set()  # instances some session has run on

    def cache_of(self, session: Session) -> CachePolicy:
        return effective_cache_policy(self._groups.get(g, GroupProperties()) for g in session.groups)

    def start(self, sessions: list[Session]) -> None:
        for session in sessions:
            record = SessionRecord(session, self.cache_of(session), session.arrival_s, index=len(self.records))
            self.records.append(record)
            self.open += 1
            self._world.at(session.arrival_s, self._arrive, record)
        if not sessions:
            self.all_ended.set()

    def _arrive(self, record: SessionRecord) -> None:
        owner = record.session.owner
        if owner in self._active:
            record.deferred = True
            self._deferred.setdefault(owner, []).append(record)
            return
        self._open_service(record)

    def _open_service(self, record: SessionRecord) -> None:
        session = record.session
        owner = session.owner
        self._active[owner] = record
        record.previous_end_s = self._last_end.get(owner)
        if record.deferred:
            record.requested_s = self._world.now_s
        record.started_s = self._world.now_s
        labels: dict[str, str] = {}
        if self._placement is Placement.OWNER:
            labels = record.cache.to_labels()
            constraints = tuple(Owner(*owner).constraints())
        elif self._placement is Placement.SESSION:
            constraints = (f"node.labels.{SESSION_LABEL}=={session_key(session)}",)
        else:
            constraints = ()
        reservations = Resources(
            session.cpus, int(session.memory_gib * GIB), {GPU: session.gpus} if session.gpus else {}
        )
        record.service_id = self._swarm.create_service(
            f"ws-{'-'.join(owner)}",
            labels,
            constraints,
            reservations,
            SESSION_IMAGE,
            on_running=lambda node_id: self._running_on(record, node_id),
            on_interrupted=lambda: self._interrupted(record),
        )

    def _running_on(self, record: SessionRecord, node_id: str) -> None:
        record.generation += 1
        record.running_on = node_id
        node = self._swarm.nodes[node_id]
        mounted = node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME)
        volume = self._cloud.volumes.get(mounted) if mounted else None
        record.volume_id = mounted
        key = record.session.data_key
        in_place = volume is not None and key in volume.data
        instance = self._cloud.instances.get(node.instance_id)
        if record.hit is None:
            record.hit = in_place
            started_s = instance.started_s if instance is not None else None
            started = started_s is not None and started_s >= record.requested_s
            claimed = instance is not None and instance.tags.get(INSTANCE_BUFFER_TAG) == "true"
            record.from_buffer = started and claimed and node.instance_id not in self._served
            record.resumed = started and not record.from_buffer
            owners = self._owners_on.setdefault(node.instance_id, set())
            record.start_path = start_path(instance, record, started, claimed, record.session.owner in owners)
            record.reused_across_owners = bool(owners - {record.session.owner})
            owners.add(record.session.owner)
        self._served.add(node.instance_id)
        record.run_marks = self._marks_of_run(record, node.instance_id, node.up_since_s)
        if in_place:
            self._ready(record, record.generation)
            return
        download_s = record.session.data_gb * 1000.0 / self._download_mb_per_s
        record.downloaded_gb += record.session.data_gb
        self._world.after(download_s, self._downloaded, record, record.generation, mounted)

    def _marks_of_run(
        self, record: SessionRecord, instance_id: str, joined_s: float
    ) -> tuple[float | None, float, float, float, float]:
        """This run's launch call, join, assignment, image and start (day s), read where the model keeps them."""
        instance = self._cloud.instances.get(instance_id)
        launch_call_s: float | None = None
        if instance is not None:
            started_s = instance.started_s
            # A stopped machine started again for this session (a resume, a warm buffer's claim): its start call.
            resumed = started_s is not None and started_s >= record.requested_s
            launch_call_s = started_s if resumed else instance.launched_at_s
        now_s = self._world.now_s
        service = self._swarm.services.get(record.service_id or "")
        task = self._swarm.tasks.get(service.task_id or "") if service is not None else None
        assigned_s = task.assigned_s if task is not None and task.assigned_s is not None else now_s
        image_ready_s = task.image_ready_s if task is not None and task.image_ready_s is not None else now_s
        return launch_call_s, joined_s, assigned_s, image_ready_s, now_s

    def _downloaded(self, record: SessionRecord, generation: int, mounted: str | None) -> None:
        if generation != record.generation:
            return  # interrupted while downloading
        volume = self._cloud.volumes.get(mounted) if mounted else None
        if volume is not None and self.writer is not None:
            self.writer.downloaded(record.index, volume, record.session.data_key, record.session.data_gb)
        elif volume is not None and record.session.data_gb <= volume.size_gib:
            volume.data.add(record.session.data_key)
        self._ready(record, generation)

    def _ready(self, record: SessionRecord, generation: int) -> None:
        now_s = self._world.now_s
        self._running += 1
        self.running_series.append((now_s, self._running))
        if record.ready_s is None:
            record.ready_s = now_s
            record.end_at_s = now_s + record.session.duration_s
            if record.run_marks is not None:
                launch_call_s, joined_s, assigned_s, image_ready_s, running_s = record.run_marks
                record.marks = Marks(
                    record.requested_s, launch_call_s, joined_s, assigned_s, image_ready_s, running_s, now_s
                )
        assert record.end_at_s is not None
        self._world.at(record.end_at_s, self._end, record, generation)
        volume = self._cloud.volumes.get(record.volume_id) if record.volume_id else None
        if self.writer is not None and volume is not None and record.running_on is not None:
            session = record.session
            self.writer.start(record.index, ".".join(session.owner), session.data_gb, record.running_on, volume)

    def _interrupted(self, record: SessionRecord) -> None:
        """Its running task was stopped (its node drained, lost or removed): it runs again where swarm puts it."""
        record.generation += 1
        record.interruptions += 1
        if self.writer is not None:
            self.writer.stop(record.index, record.volume_id)
        if record.running_on is not None:
            self._running -= 1
            self.running_series.append((self._world.now_s, self._running))
            record.running_on = None
        # The user leaves at the planned time all the same: the time lost is lost (end_at_s is kept).

    def _end(self, record: SessionRecord, generation: int) -> None:
        if generation != record.generation or record.service_id is None:
            return
        now_s = self._world.now_s
        record.ended_s = now_s
        if self.writer is not None:
            self.writer.stop(record.index, record.volume_id)
        self._running -= 1
        self.running_series.append((now_s, self._running))
        self._swarm.remove_service(record.service_id)
        owner = record.session.owner
        del self._active[owner]
        self._last_end[owner] = now_s
        self.open -= 1
        waiting = self._deferred.get(owner)
        if waiting:
            self._open_service(waiting.pop(0))
        if self.open == 0:
            self.all_ended.set()


def session_key(session: Session) -> str:
    """The label value that pins a session to its own machine on an osparc-like platform."""
    return ".".join(session.owner)
