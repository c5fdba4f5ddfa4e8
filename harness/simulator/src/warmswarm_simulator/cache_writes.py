"""Owners' cached data growing as their sessions write, the fill their node reports, and writes on a full volume."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from warmswarm_models import ENGINE_LABEL_CACHE_FILL, ENGINE_LABEL_CACHE_VOLUME

from warmswarm_simulator.cloud_values import SimVolume
from warmswarm_simulator.cloud_volumes import VolumeStore
from warmswarm_simulator.config import GIB, DataWrites
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.world import World

_GB = 1e9  # data is counted in GB (the trace's data_gb), volumes in GiB (EBS's sizes)


def capacity_gb(usable_gib: int) -> float:
    """What a file system of `usable_gib` holds, GB. [assumed] all of it: no file system overhead or reserve."""
    return usable_gib * GIB / _GB


def fill_percent(used_gb: float, usable_gib: int, step_percent: int) -> int:
    """The used percent a node reports, rounded down to `step_percent` as a node's check would (df, then a whole
    step, so that its label changes a few times a volume, not at every write); 100 only when it is full."""
    if usable_gib <= 0:
        return 100
    exact = 100.0 * used_gb / capacity_gb(usable_gib)
    if exact >= 100.0:
        return 100
    step = max(1, step_percent)
    return max(0, min(100 - step, math.floor(exact / step + 1e-9) * step))


def fill_label(volume_id: str, percent: int) -> str:
    """The engine label's value, `<volume id>:<used percent>` (readings.cache_fill reads it)."""
    return f"{volume_id}:{percent}"


def seconds_to_next_step(used_gb: float, rate_gb_per_s: float, usable_gib: int, step_percent: int) -> float:
    """How long writing at `rate_gb_per_s` takes to reach the next reported step (or the full volume): when the
    node's label changes next. Infinite when nothing is written."""
    if rate_gb_per_s <= 0.0:
        return math.inf
    capacity = capacity_gb(usable_gib)
    step = max(1, step_percent)
    next_percent = fill_percent(used_gb, usable_gib, step) + step
    target_gb = capacity if next_percent >= 100 else capacity * next_percent / 100.0
    return max(0.0, (target_gb - used_gb) / rate_gb_per_s)


def write_rate_gb_per_h(owner: str, data_gb: float, writes: DataWrites) -> float:
    """The owner's write rate while a session of theirs runs: a lognormal draw of the model's median and sigma, at
    most its max, seeded by the owner and their data, so that every policy sees the same owner write alike and each
    seed's owners draw anew, without touching the trace generator's random stream."""
    if writes.write_gb_per_h_median <= 0.0:
        return 0.0
    rng = random.Random(f"writes|{owner}|{data_gb:.3f}")  # a str seed is hashed by SHA-512: no PYTHONHASHSEED
    drawn = rng.lognormvariate(math.log(writes.write_gb_per_h_median), writes.write_gb_per_h_sigma)
    return min(writes.write_gb_per_h_max, drawn) if writes.write_gb_per_h_max > 0 else drawn


@dataclass(slots=True)
class _Writer:
    """One running session writing to its owner's mounted volume."""

    session: int  # the platform's record index
    owner: str
    node_id: str
    volume_id: str
    rate_gb_per_s: float
    since_s: float  # used_gb is up to date at this time
    full_since_s: float | None = None  # writing waits on a full volume since then
    pending_gb: float = 0.0  # downloaded data that found no room yet
    pending_key: str = ""  # the data key written to the volume once pending_gb is
    token: int = 0  # bumped at every change: a timer set before it does nothing


class CacheWriter:
    """Each running session's writes to its owner's volume, the node's fill label, and the waits on a full volume:
    writing stops there (the session's work waits for room; the user leaves at the planned time all the same) until
    the volume is grown and AWS makes the new size usable, or the session ends."""

    def __init__(self, world: World, volumes: VolumeStore, swarm: Swarm, writes: DataWrites) -> None:
        self._world = world
        self._volumes = volumes
        self._swarm = swarm
        self._writes = writes
        self._writing: dict[str, _Writer] = {}  # volume id -> its writer
        self.full_sessions: set[int] = set()  # sessions whose writes found their volume full
        self.full_s = 0.0  # seconds sessions waited on a full volume
        self.owner_data_gb: dict[str, float] = {}  # owner -> their data on their volume when last seen
        # volume id -> (session, GB, data key): a download's part that found no room, written once there is
        self._pending: dict[str, tuple[int, float, str]] = {}
        volumes.listeners.append(self._volume_changed)

    def downloaded(self, session: int, volume: SimVolume, key: str, data_gb: float) -> None:
        """A session's data downloaded while its owner's volume is mounted: written to it, as far as it has room;
        what has none waits for room (the session counts as on a full volume once it writes)."""
        room_gb = capacity_gb(volume.usable_size_gib) - volume.used_gb
        missing_gb = max(0.0, data_gb - volume.used_gb)  # a volume holds one owner's data: what is not there yet
        if missing_gb <= room_gb:
            volume.used_gb += missing_gb
            volume.data.add(key)
            return
        volume.used_gb += max(0.0, room_gb)
        self._pending[volume.id] = (session, missing_gb - max(0.0, room_gb), key)

    def start(self, session: int, owner: str, data_gb: float, node_id: str, volume: SimVolume) -> None:
        """The session runs with its data in place on `node_id`, `volume` mounted there: it writes from now."""
        now_s = self._world.now_s
        rate_gb_per_s = write_rate_gb_per_h(owner, data_gb, self._writes) / 3600.0
        writer = _Writer(session, owner, node_id, volume.id, rate_gb_per_s, now_s)
        pending = self._pending.pop(volume.id, None)
        if pending is not None and pending[0] == session:
            writer.pending_gb, writer.pending_key = pending[1], pending[2]
        previous = self._writing.get(volume.id)
        if previous is not None:
            previous.token += 1
        self._writing[volume.id] = writer
        self._settle(writer, volume)

    def stop(self, session: int, volume_id: str | None) -> None:
        """The session stopped running (ended or interrupted): its writes stop; a wait on a full volume ends."""
        writer = self._writing.get(volume_id or "")
        if writer is None or writer.session != session:
            return
        volume = self._volumes.get(writer.volume_id)
        if volume is not None:
            self._advance(writer, volume)
            self.owner_data_gb[writer.owner] = volume.used_gb + writer.pending_gb
        if writer.full_since_s is not None:
            self.full_s += self._world.now_s - writer.full_since_s
        writer.token += 1
        del self._writing[writer.volume_id]

    def _advance(self, writer: _Writer, volume: SimVolume) -> None:
        """Bring the volume's data up to now: written at the session's rate until the volume is full."""
        now_s = self._world.now_s
        if writer.full_since_s is None and writer.rate_gb_per_s > 0.0:
            capacity = capacity_gb(volume.usable_size_gib)
            grown_gb = volume.used_gb + writer.rate_gb_per_s * (now_s - writer.since_s)
            if grown_gb >= capacity:
                writer.full_since_s = now_s - (grown_gb - capacity) / writer.rate_gb_per_s
                grown_gb = capacity
            volume.used_gb = max(volume.used_gb, grown_gb)
        writer.since_s = now_s

    def _settle(self, writer: _Writer, volume: SimVolume) -> None:
        """After any change: write what waits if there is room, mark a full volume, relabel, set the next timer."""
        now_s = self._world.now_s
        room_gb = capacity_gb(volume.usable_size_gib) - volume.used_gb
        if room_gb > 0.0 and writer.full_since_s is not None:
            self.full_s += now_s - writer.full_since_s
            writer.full_since_s = None
        if writer.pending_gb > 0.0 and room_gb > 0.0:
            written_gb = min(writer.pending_gb, room_gb)
            volume.used_gb += written_gb
            writer.pending_gb -= written_gb
            if writer.pending_gb <= 0.0:
                volume.data.add(writer.pending_key)
        full = volume.used_gb >= capacity_gb(volume.usable_size_gib) - 1e-9
        if full and (writer.pending_gb > 0.0 or writer.rate_gb_per_s > 0.0):
            if writer.full_since_s is None:
                writer.full_since_s = now_s
            self.full_sessions.add(writer.session)
        self._relabel(writer, volume)
        writer.token += 1
        if writer.full_since_s is None:
            step = self._writes.fill_step_percent
            wait_s = seconds_to_next_step(volume.used_gb, writer.rate_gb_per_s, volume.usable_size_gib, step)
            if math.isfinite(wait_s):
                self._world.after(wait_s, self._tick, writer, writer.token)

    def _tick(self, writer: _Writer, token: int) -> None:
        volume = self._volumes.get(writer.volume_id)
        if token != writer.token or volume is None or self._writing.get(writer.volume_id) is not writer:
            return
        self._advance(writer, volume)
        self._settle(writer, volume)

    def _volume_changed(self, volume: SimVolume) -> None:
        """A volume of a running session changed (a grown size made usable, most of all): settle its writer."""
        writer = self._writing.get(volume.id)
        if writer is None or volume.state == "deleted":
            return
        self._advance(writer, volume)
        if writer.full_since_s is not None or writer.pending_gb > 0.0:
            self._settle(writer, volume)
        else:
            self._relabel(writer, volume)

    def _relabel(self, writer: _Writer, volume: SimVolume) -> None:
        """The node's daemon reloads its labels when the reported step changes (as the node's check would)."""
        node = self._swarm.nodes.get(writer.node_id)
        if node is None or node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME) != volume.id:
            return
        label = fill_label(
            volume.id, fill_percent(volume.used_gb, volume.usable_size_gib, self._writes.fill_step_percent)
        )
        if node.engine_labels.get(ENGINE_LABEL_CACHE_FILL) != label:
            self._swarm.engine_labels_reloaded(node.id, {**node.engine_labels, ENGINE_LABEL_CACHE_FILL: label})


def boot_fill_label(volume: SimVolume | None, step_percent: int) -> dict[str, str]:
    """The fill label a boot writes with its mount (the node's first check): empty without a volume."""
    if volume is None:
        return {}
    return {
        ENGINE_LABEL_CACHE_FILL: fill_label(
            volume.id, fill_percent(volume.used_gb, volume.usable_size_gib, step_percent)
        )
    }
