"""The reconcile loop: observe → plan → apply, on swarm events and on a periodic resync."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from warmswarm_models import NODE_LABEL_INSTANCE_ID, Owner

from warmswarm_autoscaling.actions import Action
from warmswarm_autoscaling.apply import LaunchTemplate, Outcome, apply
from warmswarm_autoscaling.observe import InstanceCatalogue, ObservationFailed, observe
from warmswarm_autoscaling.plan import Plan, Waiting, plan
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import Ec2, Swarm
from warmswarm_autoscaling.snapshot import Snapshot

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
    action: str
    reason: str
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
    ) -> None:
        self._swarm = swarm
        self._ec2 = ec2
        self._policy = policy
        self._template = template
        self._catalogue = catalogue
        self._timing = timing
        self._clock = clock
        # Bookkeeping that may be lost without harm: a restart only restarts idle clocks and backoffs.
        self._idle_since: dict[str, float] = {}
        self._unavailable: dict[tuple[str, str], float] = {}
        self._reported: dict[str, str] = {}  # task id -> the reason last logged for it
        self._wake = asyncio.Event()
        self.status = Status()

    async def cycle(self) -> CycleReport:
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
            return report

        result = plan(snapshot, self._policy)
        self._idle_since = dict(result.idle_since)
        self._unavailable = dict(result.unavailable_offerings)
        outcomes = await apply(result.actions, self._swarm, self._ec2, self._template)
        for outcome in outcomes:
            self._record(outcome, started)
        self._report_waiting(result.waiting)

        report = CycleReport(started, time.monotonic() - monotonic, ok=True, actions=len(result.actions))
        self.status.last_cycle = report
        self.status.last_success_at = started
        self.status.snapshot = snapshot
        self.status.plan = result
        return report

    def _record(self, outcome: Outcome, now: float) -> None:
        action = outcome.action
        name = type(action).__name__
        target = _target(action)
        if outcome.ok:
            created = outcome.instance_id or outcome.volume_id
            suffix = f" -> {created}" if created else ""
            log.info("%s %s%s: %s", name, target, suffix, action.reason)
        else:
            log.error("%s %s failed: %s (reason was: %s)", name, target, outcome.error, action.reason)
        if outcome.unavailable_offering is not None:
            self._unavailable[outcome.unavailable_offering] = now + self._policy.capacity_backoff_s
        self.status.decisions.append(
            Decision(now, f"{name} {target}", action.reason, outcome.error, outcome.instance_id or outcome.volume_id)
        )

    def _report_waiting(self, waiting: tuple[Waiting, ...]) -> None:
        # Each reason is logged once per task, not every cycle: a stuck task does not flood the log.
        current = {w.task_id: w.reason for w in waiting}
        for w in waiting:
            if self._reported.get(w.task_id) != w.reason:
                level = logging.WARNING if w.unschedulable else logging.INFO
                log.log(level, "task %s of %s (%s) waits: %s", w.task_id, w.service_name, w.owner, w.reason)
        self._reported = current

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
        if result.actions or result.waiting:
            return timing.busy_resync_interval_s
        deadlines = [since + self._policy.idle_grace_s for since in result.idle_since.values()]
        deadlines += [
            i.launched_at + self._policy.max_start_s
            for i in snapshot.instances
            if i.is_live and not _joined(i.id, snapshot)
        ]
        if any(i.state in ("shutting-down", "stopping") for i in snapshot.instances) or any(
            n.state != "ready" and n.engine_instance_id for n in snapshot.nodes
        ):
            return timing.busy_resync_interval_s
        delay_s = timing.resync_interval_s
        if deadlines:
            delay_s = min(delay_s, max(0.0, min(deadlines) - snapshot.now) + 0.05)
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
                    "owner": Owner.from_labels(node.labels).labels(),
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
                "owner": Owner.from_labels(i.tags).labels(),
                "age_s": round(now - i.launched_at, 1),
            }
            for i in snapshot.instances
            if i.is_live and not _joined(i.id, snapshot)
        ]
        return body


def _joined(instance_id: str, snapshot: Snapshot) -> bool:
    return any(n.engine_instance_id == instance_id and n.state == "ready" for n in snapshot.nodes)


def _target(action: Action) -> str:
    for attribute in ("node_id", "volume_id", "instance_id"):
        value = getattr(action, attribute, None)
        if value:
            return str(value)
    return f"{getattr(action, 'instance_type', '')} in {getattr(action, 'availability_zone', '')}"
