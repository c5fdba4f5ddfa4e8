"""The reconcile loop: observe → plan → apply, on swarm events and on a periodic resync."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from warmswarm_models import (
    INSTANCE_VOLUME_TAG,
    NODE_LABEL_INSTANCE_ID,
    OWNER_KEYS,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    format_timestamp,
    parse_timestamp,
)

from warmswarm_autoscaling.actions import Action, CreateVolume, Launch, Terminate
from warmswarm_autoscaling.apply import LaunchTemplate, Outcome, apply
from warmswarm_autoscaling.metrics import (
    EXPIRE_VOLUME,
    AwsCallCounts,
    Metrics,
    action_kind,
)
from warmswarm_autoscaling.observe import InstanceCatalogue, ObservationFailed, observe
from warmswarm_autoscaling.plan import Plan, Waiting, plan
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import Ec2, PortError, Swarm
from warmswarm_autoscaling.snapshot import Snapshot, Volume

log = logging.getLogger(__name__)

_DECISIONS_KEPT = 100


@dataclass(frozen=True, slots=True)
class LoopTiming:
    resync_interval_s: float = 30.0
    busy_resync_interval_s: float = 3.0
    debounce_s: float = 0.5
    failure_backoff_s: float = 5.0


@dataclass(slots=True)
class Decision:
    at: float
    kind: str  # "launch", "terminate", "expire_volume", ... (metrics.ACTION_KINDS)
    target: str  # the node, instance or volume id it acts on; "<type> in <zone>" for a launch
    action: str  # "<ActionClass> <target>", for people
    reason: str
    dry_run: bool = False  # decided but not applied: AUTOSCALING_DRY_RUN is on
    error: str | None = None
    created: str | None = None  # the instance or volume id an action created


@dataclass(slots=True)
class CycleReport:
    started_at: float
    duration_s: float
    ok: bool
    error: str | None = None
    actions: int = 0


@dataclass(slots=True)
class Status:
    """What /v1/status answers: the world as the last cycle saw it and what was decided."""

    last_cycle: CycleReport | None = None
    last_success_at: float | None = None
    snapshot: Snapshot | None = None
    plan: Plan | None = None
    decisions: deque[Decision] = field(default_factory=lambda: deque(maxlen=_DECISIONS_KEPT))


class ExpireRefused(Exception):
    """POST /v1/volumes/{id}/expire did nothing; the message says why."""


class NotLeader(ExpireRefused):
    pass


class ReadOnly(ExpireRefused):
    """A dry run changes nothing, an operator's request included."""


class VolumeNotFound(ExpireRefused):
    pass


class VolumeBusy(ExpireRefused):
    """The volume is in use or about to be: expiring it would pull data from under its owner."""


@dataclass(frozen=True, slots=True)
class ExpiredVolume:
    volume_id: str
    expires_at: str  # ISO 8601 UTC, as in the warmswarm:expires-at tag


class Autoscaler:
    def __init__(
        self,
        swarm: Swarm,
        ec2: Ec2,
        policy: Policy,
        template: LaunchTemplate,
        catalogue: InstanceCatalogue,
        timing: LoopTiming = LoopTiming(),
        clock: Callable[[], float] = time.time,
        *,
        dry_run: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self._swarm = swarm
        self._ec2 = ec2
        self._policy = policy
        self._template = template
        self._catalogue = catalogue
        self._timing = timing
        self._clock = clock
        self.dry_run = dry_run
        # An EC2 port that counts its calls (the aiobotocore adapter does) feeds warmswarm_aws_calls_total.
        aws_calls = ec2 if isinstance(ec2, AwsCallCounts) else None
        self.metrics = metrics if metrics is not None else Metrics(aws_calls=aws_calls, dry_run=dry_run)
        # Bookkeeping that may be lost without harm: a restart only restarts idle clocks and backoffs.
        self._idle_since: dict[str, float] = {}
        self._unavailable: dict[tuple[str, str], float] = {}
        self._reported: dict[str, str] = {}  # task id -> the reason last logged for it
        # What the last cycles decided without applying (dry run): reported once, not every cycle.
        self._not_applied: set[tuple[str, str, str]] = set()
        self._acted = False  # whether the last cycle applied its actions
        # A cycle and an operator's expire never interleave: a cycle that observed a volume before
        # the expire tag was written would otherwise overwrite it with a later expiry.
        self._world_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self.status = Status()

    @property
    def is_leader(self) -> bool:
        return self.metrics.leader

    def set_leader(self, is_leader: bool) -> None:
        """For the leader election (it logs the changes); a replica that is not the leader applies nothing."""
        self.metrics.set_leader(is_leader)

    async def cycle(self) -> CycleReport:
        async with self._world_lock:
            return await self._cycle()

    async def _cycle(self) -> CycleReport:
        started = self._clock()
        monotonic = time.monotonic()
        try:
            snapshot = await observe(
                self._swarm,
                self._ec2,
                self._catalogue,
                self._policy.cluster,
                started,
                self._idle_since,
                self._unavailable,
            )
        except ObservationFailed as error:
            log.warning("observation failed, applying nothing this cycle: %s", error)
            report = CycleReport(started, time.monotonic() - monotonic, ok=False, error=str(error))
            self.status.last_cycle = report
            self.metrics.record_cycle(report.duration_s, ok=False)
            return report

        result = plan(snapshot, self._policy)
        self._idle_since = dict(result.idle_since)
        self._unavailable = dict(result.unavailable_offerings)
        # Read once: leadership may change while the actions are applied, which must not split them.
        act = self.metrics.leader and not self.dry_run
        if act:
            self._not_applied.clear()
            outcomes = await apply(result.actions, self._swarm, self._ec2, self._template)
            for outcome in outcomes:
                self._record(outcome, started, snapshot)
        elif self.metrics.leader:
            self._report_dry_run(result.actions, started)
        elif result.actions:
            log.debug("not the leader: %d planned action(s) left to the leader", len(result.actions))
        self._acted = act
        self._report_waiting(result.waiting)

        report = CycleReport(started, time.monotonic() - monotonic, ok=True, actions=len(result.actions))
        self.status.last_cycle = report
        self.status.last_success_at = started
        self.status.snapshot = snapshot
        self.status.plan = result
        self.metrics.record_cycle(report.duration_s, ok=True, started_at=started)
        return report

    def _record(self, outcome: Outcome, now: float, snapshot: Snapshot) -> None:
        action = outcome.action
        name = type(action).__name__
        kind = action_kind(action)
        target = _target(action)
        created = outcome.instance_id or outcome.volume_id
        fields = {"kind": kind, "target": target, "reason": action.reason, "dry_run": False}
        if outcome.ok:
            suffix = f" -> {created}" if created else ""
            log.info(
                "%s %s%s: %s",
                name,
                target,
                suffix,
                action.reason,
                extra={**fields, "outcome": "ok", "created_id": created},
            )
        else:
            log.error(
                "%s %s failed: %s (reason was: %s)",
                name,
                target,
                outcome.error,
                action.reason,
                extra={**fields, "outcome": "error", "error": outcome.error},
            )
        self.metrics.record_action(kind, ok=outcome.ok)
        if outcome.ok and isinstance(action, Launch):
            self.metrics.record_launch("pending_work")  # plan() launches for pending tasks only
        if outcome.ok and isinstance(action, Terminate):
            self.metrics.record_termination(action.cause)
        if outcome.unavailable_offering is not None:
            self._unavailable[outcome.unavailable_offering] = now + self._policy.capacity_backoff_s
        self.status.decisions.append(
            Decision(now, kind, target, f"{name} {target}", action.reason, error=outcome.error, created=created)
        )

    def _report_dry_run(self, actions: tuple[Action, ...], now: float) -> None:
        """Log and record what would be applied; an action still planned cycle after cycle is reported once."""
        planned: set[tuple[str, str, str]] = set()
        for action in actions:
            kind, target = action_kind(action), _target(action)
            key = (kind, target, _what_for(action))
            planned.add(key)
            if key in self._not_applied:
                continue
            name = type(action).__name__
            log.info(
                "dry run, would %s %s: %s",
                name,
                target,
                action.reason,
                extra={"kind": kind, "target": target, "reason": action.reason, "dry_run": True},
            )
            self.status.decisions.append(Decision(now, kind, target, f"{name} {target}", action.reason, dry_run=True))
        self._not_applied = planned

    def _report_waiting(self, waiting: tuple[Waiting, ...]) -> None:
        # Each reason is logged once per task, not every cycle: a stuck task does not flood the log.
        current = {w.task_id: w.reason for w in waiting}
        for w in waiting:
            if self._reported.get(w.task_id) != w.reason:
                level = logging.WARNING if w.unschedulable else logging.INFO
                log.log(
                    level,
                    "task %s of %s (%s) waits: %s",
                    w.task_id,
                    w.service_name,
                    w.owner,
                    w.reason,
                    extra={
                        "kind": "wait",
                        "target": w.task_id,
                        "service": w.service_name,
                        "reason": w.reason,
                        "unschedulable": w.unschedulable,
                    },
                )
        self._reported = current

    async def expire_volume(self, volume_id: str) -> ExpiredVolume:
        """Make an available cache volume of this cluster expire now: the janitor deletes it on its next cycle.

        Reads the volume fresh from EC2 (the last snapshot may be a resync old). Raises ExpireRefused
        (NotLeader, ReadOnly, VolumeNotFound, VolumeBusy) when it does nothing, PortError when EC2 fails.
        """
        self._check_may_act()
        async with self._world_lock:
            self._check_may_act()  # leadership may have moved while a cycle held the lock
            cluster = self._policy.cluster
            volumes, instances = await asyncio.gather(
                self._ec2.list_volumes(cluster), self._ec2.list_instances(cluster)
            )
            volume = next((v for v in volumes if v.id == volume_id), None)
            if volume is None:
                raise VolumeNotFound(f"no cache volume {volume_id} in cluster {cluster!r}")
            if volume.attachments:
                holder = volume.attachments[0]
                raise VolumeBusy(
                    f"volume {volume_id} is {holder.state} to {holder.instance_id}: it is in use by its owner's"
                    " machine; it can expire once that machine is gone and the volume is available"
                )
            if volume.state != "available":
                raise VolumeBusy(f"volume {volume_id} is {volume.state}; only an available volume can expire")
            waiting = next((i for i in instances if i.is_live and i.tags.get(INSTANCE_VOLUME_TAG) == volume_id), None)
            if waiting is not None:
                raise VolumeBusy(
                    f"volume {volume_id} is reserved for instance {waiting.id}, which is starting for its owner"
                    " and will attach it"
                )
            self._check_may_act()
            expires_at = format_timestamp(self._clock())
            reason = f"an operator asked for {volume_id} to expire now"
            fields = {"kind": EXPIRE_VOLUME, "target": volume_id, "reason": reason, "dry_run": False}
            try:
                await self._ec2.tag_volume(volume_id, {VOLUME_EXPIRES_AT_TAG: expires_at}, ())
            except PortError as error:
                self.metrics.record_action(EXPIRE_VOLUME, ok=False)
                log.error(
                    "expiring %s failed: %s",
                    volume_id,
                    error,
                    extra={**fields, "outcome": "error", "error": str(error)},
                )
                self.status.decisions.append(
                    Decision(
                        self._clock(), EXPIRE_VOLUME, volume_id, f"ExpireVolume {volume_id}", reason, error=str(error)
                    )
                )
                raise
        self.metrics.record_action(EXPIRE_VOLUME, ok=True)
        log.info(
            "ExpireVolume %s: %s (expires-at %s)", volume_id, reason, expires_at, extra={**fields, "outcome": "ok"}
        )
        self.status.decisions.append(
            Decision(self._clock(), EXPIRE_VOLUME, volume_id, f"ExpireVolume {volume_id}", reason)
        )
        self.wake()  # the janitor deletes it in the next cycle, not at the next resync
        return ExpiredVolume(volume_id, expires_at)

    def _check_may_act(self) -> None:
        if not self.metrics.leader:
            raise NotLeader("not the leader; ask the leader")
        if self.dry_run:
            raise ReadOnly("dry run (AUTOSCALING_DRY_RUN=true): this autoscaler changes nothing")

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle until `stop` is set; a failing cycle backs off, it never ends the loop."""
        events = asyncio.create_task(self._watch_events(stop))
        try:
            while not stop.is_set():
                try:
                    await self.cycle()
                    delay_s = self._next_delay_s()
                except Exception:  # a bug in one cycle must not stop the autoscaler
                    log.exception("cycle crashed; retrying in %s s", self._timing.failure_backoff_s)
                    self.metrics.record_crash()
                    delay_s = self._timing.failure_backoff_s
                if await self._sleep(delay_s, stop):
                    # Woken by an event: let a burst of events settle into one cycle.
                    await asyncio.sleep(self._timing.debounce_s)
        finally:
            events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await events

    async def _sleep(self, delay_s: float, stop: asyncio.Event) -> bool:
        """Sleep up to delay_s; True when woken early by an event."""
        self._wake.clear()
        waiters = [asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())]
        _done, pending = await asyncio.wait(waiters, timeout=delay_s, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return self._wake.is_set() and not stop.is_set()

    def _next_delay_s(self) -> float:
        """Soon while something is in motion; at the next deadline the planner cares about; else resync."""
        timing = self._timing
        result, snapshot = self.status.plan, self.status.snapshot
        if result is None or snapshot is None or self.status.last_cycle is None or not self.status.last_cycle.ok:
            return timing.failure_backoff_s
        # Actions that were not applied (dry run, not the leader) set nothing in motion.
        if (result.actions and self._acted) or result.waiting:
            return timing.busy_resync_interval_s
        # A new service's task is unplaced for a moment before swarm marks it "no suitable node";
        # no event follows that mark, so look again soon rather than after a full resync.
        if any(t.node_id is None and t.is_active for t in snapshot.tasks):
            return timing.busy_resync_interval_s
        deadlines = [since + self._policy.idle_grace_s for since in result.idle_since.values()]
        deadlines += [
            i.launched_at + self._policy.max_start_s
            for i in snapshot.instances
            if i.is_live and not _joined(i.id, snapshot)
        ]
        # The janitor's deadlines: a volume is deleted as soon as it expires, not a resync later.
        for volume in snapshot.volumes:
            expires_at = parse_timestamp(volume.tags.get(VOLUME_EXPIRES_AT_TAG, ""))
            if volume.state == "available" and expires_at is not None:
                deadlines.append(expires_at)
        if any(i.state in ("shutting-down", "stopping") for i in snapshot.instances) or any(
            n.state != "ready" and n.engine_instance_id for n in snapshot.nodes
        ):
            return timing.busy_resync_interval_s
        delay_s = timing.resync_interval_s
        # Only deadlines still ahead: one already past was acted on, or (dry run) never will be, and
        # waking at once for it again would spin.
        upcoming = [d for d in deadlines if d > snapshot.now]
        if upcoming:
            delay_s = min(delay_s, min(upcoming) - snapshot.now + 0.05)
        return max(delay_s, 0.05)

    async def _watch_events(self, stop: asyncio.Event) -> None:
        async for _kind in self._swarm.events():
            if stop.is_set():
                return
            self._wake.set()

    def status_json(self) -> dict[str, Any]:
        snapshot, result = self.status.snapshot, self.status.plan
        now = self._clock()
        body: dict[str, Any] = {
            "cluster": self._policy.cluster,
            "dry_run": self.dry_run,
            "leader": self.metrics.leader,
            "last_cycle": asdict(self.status.last_cycle) if self.status.last_cycle else None,
            "nodes": [],
            "pending": [],
            "launches_in_flight": [],
            "decisions": [asdict(d) for d in reversed(self.status.decisions)],
        }
        if snapshot is None or result is None:
            return body
        instances = {i.id: i for i in snapshot.instances}
        for node in snapshot.nodes:
            since = result.idle_since.get(node.id)
            instance = instances.get(node.engine_instance_id or "")
            body["nodes"].append(
                {
                    "node_id": node.id,
                    "hostname": node.hostname,
                    "role": node.role,
                    "state": node.state,
                    "availability": node.availability,
                    "owner": _owner_labels(node.labels),
                    "instance_id": node.labels.get(NODE_LABEL_INSTANCE_ID) or node.engine_instance_id,
                    "instance_type": instance.instance_type if instance else None,
                    "availability_zone": instance.availability_zone if instance else None,
                    "idle_s": round(now - since, 1) if since is not None else None,
                }
            )
        body["pending"] = [
            {
                "task_id": w.task_id,
                "service": w.service_name,
                "owner": w.owner.labels(),
                "reason": w.reason,
                "unschedulable": w.unschedulable,
                "starting": w.starting,
            }
            for w in result.waiting
        ]
        body["launches_in_flight"] = [
            {
                "instance_id": i.id,
                "instance_type": i.instance_type,
                "availability_zone": i.availability_zone,
                "state": i.state,
                "owner": _owner_labels(i.tags),
                "age_s": round(now - i.launched_at, 1),
            }
            for i in snapshot.instances
            if i.is_live and not _joined(i.id, snapshot)
        ]
        return body

    def volumes_json(self, user_id: str | None = None) -> list[dict[str, Any]] | None:
        """This cluster's cache volumes as the last cycle saw them (None before the first), optionally one user's."""
        snapshot = self.status.snapshot
        if snapshot is None:
            return None
        return [
            _volume_json(v)
            for v in sorted(snapshot.volumes, key=lambda v: v.id)
            if user_id is None or v.tags.get("user_id") == user_id
        ]


def _volume_json(volume: Volume) -> dict[str, Any]:
    return {
        "volume_id": volume.id,
        # Every key, null when unset: a reader need not guess which of the three a volume lacks.
        "owner": {key: volume.tags.get(key) for key in OWNER_KEYS},
        "availability_zone": volume.availability_zone,
        "state": volume.state,
        "size_gib": volume.size_gib,
        "volume_type": volume.volume_type,
        "attached_to": volume.attachments[0].instance_id if volume.attachments else None,
        "released_at": _timestamp_tag(volume, VOLUME_RELEASED_AT_TAG),
        "expires_at": _timestamp_tag(volume, VOLUME_EXPIRES_AT_TAG),
    }


def _timestamp_tag(volume: Volume, key: str) -> str | None:
    # A hand-edited value the janitor cannot read counts as unset for it, and so here.
    raw = volume.tags.get(key)
    epoch_s = parse_timestamp(raw) if raw is not None else None
    return format_timestamp(epoch_s) if epoch_s is not None else None


def _owner_labels(labels: Mapping[str, str]) -> dict[str, str]:
    # The raw ids, not Owner.from_labels: a node someone labelled with an unusable id must not break the status.
    return {key: labels[key] for key in OWNER_KEYS if key in labels}


def _joined(instance_id: str, snapshot: Snapshot) -> bool:
    return any(n.engine_instance_id == instance_id and n.state == "ready" for n in snapshot.nodes)


def _what_for(action: Action) -> str:
    """What tells two planned actions with one target apart, stable from cycle to cycle.

    Not the client token: it changes with each start window, and a dry run would then report the
    same waiting launch again every max_start_s.
    """
    if isinstance(action, Launch):
        return ",".join(action.task_ids)
    if isinstance(action, CreateVolume):
        return str(action.owner)
    return ""


def _target(action: Action) -> str:
    for attribute in ("node_id", "volume_id", "instance_id"):
        value = getattr(action, attribute, None)
        if value:
            return str(value)
    return f"{getattr(action, 'instance_type', '')} in {getattr(action, 'availability_zone', '')}"
