"""The reconcile loop: observe → plan → apply, on swarm events, at the plan's deadline, and on a periodic resync."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from warmswarm_models.answers import CycleOut, ExpiredOut

from warmswarm_autoscaling.actions import EXPIRE_VOLUME
from warmswarm_autoscaling.apply import LaunchTemplate, apply
from warmswarm_autoscaling.journal import Journal
from warmswarm_autoscaling.metrics import AwsCallCounts, Metrics
from warmswarm_autoscaling.observe import InstanceCatalogue, ObservationFailed, observe
from warmswarm_autoscaling.plan import Plan, plan
from warmswarm_autoscaling.plan.volumes import Refused, expire_now
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import Ec2, PortError, Swarm
from warmswarm_autoscaling.snapshot import Snapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoopTiming:
    resync_interval_s: float = 30.0
    busy_resync_interval_s: float = 3.0
    debounce_s: float = 0.5
    failure_backoff_s: float = 5.0


@dataclass(slots=True)
class LastCycle:
    """What the last cycles left for the read side: the report, and the world and plan of the last good one."""

    report: CycleOut | None = None
    last_success_at: float | None = None
    snapshot: Snapshot | None = None
    plan: Plan | None = None


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


class Reconciler:
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
        self.policy = policy
        self._template = template
        self._catalogue = catalogue
        self._timing = timing
        self._clock = clock
        self.dry_run = dry_run
        # An EC2 port that counts its calls (the aiobotocore adapter does) feeds warmswarm_aws_calls_total.
        aws_calls = ec2 if isinstance(ec2, AwsCallCounts) else None
        self.metrics = metrics if metrics is not None else Metrics(aws_calls=aws_calls, dry_run=dry_run)
        self.journal = Journal(self.metrics)
        self._leader = True  # one replica, no election: it leads
        # Bookkeeping that may be lost without harm: a restart only restarts idle clocks and backoffs.
        self._idle_since: dict[str, float] = {}
        self._unavailable: dict[tuple[str, str], float] = {}
        self._acted = False  # whether the last cycle applied its actions
        # A cycle and an operator's expire never interleave: a cycle that observed a volume before
        # the expire tag was written would otherwise overwrite it with a later expiry.
        self._world_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self.last = LastCycle()

    @property
    def is_leader(self) -> bool:
        return self._leader

    def set_leader(self, is_leader: bool) -> None:
        """For the leader election; a replica that is not the leader applies nothing."""
        self._leader = is_leader
        self.metrics.set_leader(is_leader)

    async def cycle(self) -> CycleOut:
        async with self._world_lock:
            return await self._cycle()

    async def _cycle(self) -> CycleOut:
        started = self._clock()
        monotonic = time.monotonic()
        try:
            snapshot = await observe(
                self._swarm,
                self._ec2,
                self._catalogue,
                self.policy.cluster,
                started,
                self._idle_since,
                self._unavailable,
            )
        except ObservationFailed as error:
            log.warning("observation failed, applying nothing this cycle: %s", error)
            report = CycleOut(started_at=started, duration_s=time.monotonic() - monotonic, ok=False, error=str(error))
            self.last.report = report
            self.metrics.record_cycle(report.duration_s, ok=False)
            return report

        result = plan(snapshot, self.policy)
        self._idle_since = dict(result.idle_since)
        self._unavailable = dict(result.unavailable_offerings)
        # Read once: leadership may change while the actions are applied, which must not split them.
        act = self._leader and not self.dry_run
        if act:
            outcomes = await apply(result.actions, self._swarm, self._ec2, self._template)
            for outcome in outcomes:
                if outcome.unavailable_offering is not None:
                    self._unavailable[outcome.unavailable_offering] = started + self.policy.capacity_backoff_s
            self.journal.applied(outcomes, started)
        elif self._leader:
            self.journal.not_applied(result.actions, started)
        elif result.actions:
            log.debug("not the leader: %d planned action(s) left to the leader", len(result.actions))
        self._acted = act
        self.journal.waiting(result.waiting)

        report = CycleOut(
            started_at=started, duration_s=time.monotonic() - monotonic, ok=True, actions=len(result.actions)
        )
        self.last = LastCycle(report, started, snapshot, result)
        self.metrics.observed(snapshot, result)
        self.metrics.record_cycle(report.duration_s, ok=True, started_at=started)
        return report

    async def expire_volume(self, volume_id: str) -> ExpiredOut:
        """Make an available cache volume of this cluster expire now: the janitor deletes it on its next cycle.

        Reads the volume fresh from EC2 (the last snapshot may be a resync old). Raises ExpireRefused
        (NotLeader, ReadOnly, VolumeNotFound, VolumeBusy) when it does nothing, PortError when EC2 fails.
        """
        self._check_may_act()
        async with self._world_lock:
            self._check_may_act()  # leadership may have moved while a cycle held the lock
            cluster = self.policy.cluster
            volumes, instances = await asyncio.gather(
                self._ec2.list_volumes(cluster), self._ec2.list_instances(cluster)
            )
            decided = expire_now(volume_id, cluster, volumes, instances, self._clock())
            if isinstance(decided, Refused):
                raise (VolumeNotFound if decided.missing else VolumeBusy)(decided.reason)
            self._check_may_act()
            (outcome,) = await apply((decided,), self._swarm, self._ec2, self._template)
            self.journal.operator(EXPIRE_VOLUME, volume_id, decided.reason, self._clock(), error=outcome.error)
            if outcome.error is not None:
                raise PortError(outcome.error)
        self.wake()  # the janitor deletes it in the next cycle, not at the next resync
        return ExpiredOut(volume_id=volume_id, expires_at=next(iter(decided.set_tags.values())))

    def _check_may_act(self) -> None:
        if not self._leader:
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
        """Soon while something is in motion; at the plan's next deadline; else at the resync."""
        timing, last = self._timing, self.last
        if last.report is None or not last.report.ok or last.plan is None or last.snapshot is None:
            return timing.failure_backoff_s
        result = last.plan
        # Actions that were not applied (dry run, not the leader) set nothing in motion.
        if (result.actions and self._acted) or result.busy:
            return timing.busy_resync_interval_s
        delay_s = timing.resync_interval_s
        if result.deadline is not None:
            delay_s = min(delay_s, result.deadline - last.snapshot.now + 0.05)
        return max(delay_s, 0.05)

    async def _watch_events(self, stop: asyncio.Event) -> None:
        async for _kind in self._swarm.events():
            if stop.is_set():
                return
            self._wake.set()
