"""The reconcile loop: observe → plan → apply, on swarm events, at the plan's deadline, and on a periodic resync.

Only the leader acts, and it proves it at each step: every mutating call asks the lease (by the clock)
right before it is sent, a plan whose snapshot is older than the lease's safety margin is not applied,
and the planner runs off the event loop so that a long plan never starves the lease's renewals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from warmswarm_models import format_timestamp
from warmswarm_models.answers import AutoscalerStatusOut, CycleOut, ExpiredOut, VolumesOut
from warmswarm_models.reservation import ReservationIn, ReservationOut, ReservationsOut

from warmswarm_autoscaling import views
from warmswarm_autoscaling.apply import apply
from warmswarm_autoscaling.bookings import Bookings, unreadable_records
from warmswarm_autoscaling.ec2_book import Ec2Book
from warmswarm_autoscaling.journal import Journal
from warmswarm_autoscaling.metrics import AwsCallCounts, Metrics
from warmswarm_autoscaling.observe import InstanceCatalogue, ObservationFailed, observe
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.plan import Plan, plan
from warmswarm_autoscaling.plan.carried import after
from warmswarm_autoscaling.plan.cluster import clock_skew_notice
from warmswarm_autoscaling.plan.volumes import Refused, expire_now
from warmswarm_autoscaling.plan_reuse import Planned, reusable
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import Ec2, PortError, ReservationStore, Swarm
from warmswarm_autoscaling.requests import LaunchTemplate
from warmswarm_autoscaling.snapshot import Carried, Snapshot

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
        timing: LoopTiming,
        clock: Callable[[], float],
        *,
        dry_run: bool,
        metrics: Metrics | None,
        lease_valid: Callable[[], bool],
        max_plan_age_s: float,
        reservations: ReservationStore | None = None,
        full_listing_interval_s: float,
        first_cycle_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """Assembled by wiring.build_reconciler alone, which derives every argument from the settings.

        `first_cycle_scope`: what the first cycle runs inside (main.py pauses the cycle collector through it while
        that cycle reads the whole cluster: warmswarm_runtime.memory.collector_paused)."""
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
        cap = policy.max_stopped_instances
        self.metrics = (
            metrics if metrics is not None else Metrics(aws_calls=aws_calls, dry_run=dry_run, max_stopped_instances=cap)
        )
        self.journal = Journal(self.metrics)
        self._leader = True  # one replica, no election: it leads
        # The lease, asked at each mutating call: the flag above says a term runs, this that its lease holds now.
        self._lease_valid = lease_valid
        # A plan decided from a world older than this (monotonic s since its observation) is not applied.
        self._max_plan_age_s = max_plan_age_s
        # Bookkeeping that may be lost without harm: a restart only restarts clocks and backoffs.
        self._carried = Carried()
        self._acted = False  # whether the last cycle applied its actions
        # The last plan made (not reused), which a cycle that finds the same world takes again (plan_reuse.py).
        self._planned: Planned | None = None
        self.plans_reused = 0  # cycles that took the last plan instead of planning (for the benchmarks and tests)
        # A cycle and an operator's expire never interleave: a cycle that observed a volume before
        # the expire tag was written would otherwise overwrite it with a later expiry.
        self._world_lock = asyncio.Lock()
        self._alarm = Alarm()
        self.last = LastCycle()
        # Ops' reservations: read by every cycle's observation, written by the API (any replica: the store is shared).
        self._reservations = reservations
        self.bookings = Bookings(reservations, policy)
        # The instances and volumes between cycles: an idle cycle describes by id only what can move (ec2_book.py).
        self.ec2_book = Ec2Book(ec2, policy.cluster, full_listing_interval_s)
        self._first_cycle_scope: Callable[[], AbstractContextManager[object]] | None = first_cycle_scope

    @property
    def is_leader(self) -> bool:
        return self._leader

    def set_leader(self, is_leader: bool) -> None:
        """For the leader election; a replica that is not the leader applies nothing."""
        self._leader = is_leader
        self.metrics.set_leader(is_leader)

    # The read side (the API and the tests ask these, never the loop's parts).

    def status(self, now: float) -> AutoscalerStatusOut:
        """GET /v1/status: the world as the last good cycle saw it, why tasks wait, the decisions newest first."""
        last = self.last
        return views.status(
            cluster=self.policy.cluster,
            dry_run=self.dry_run,
            leader=self._leader,
            last_cycle=last.report,
            snapshot=last.snapshot,
            plan=last.plan,
            decisions=self.journal.decisions,
            now=now,
            policy=self.policy,
            unreadable=unreadable_records(self._reservations),
        )

    def unknown_instance_types(self) -> tuple[str, ...]:
        """GET /ready: the allowed instance types EC2 does not know, as the catalogue last found them."""
        return self._catalogue.unknown

    def volumes(self, user_id: str | None) -> VolumesOut | None:
        """GET /v1/volumes (one user's, or all); None before a cycle has observed them."""
        return views.volumes(self.last.snapshot, user_id)

    async def reserve(self, request: ReservationIn, now: float) -> ReservationOut:
        """POST /v1/reservations: checked against the types the last cycle saw, stored, and the next cycle woken."""
        answer = await self.bookings.add(request, now, self.last.snapshot)
        self.wake()  # the next cycle plans for it, not a resync later
        return answer

    def reservations(self, now: float) -> Awaitable[ReservationsOut]:
        """GET /v1/reservations: each stored one as the last plan holds it."""
        return self.bookings.listed(now, self.last.plan, self.last.snapshot)

    async def unreserve(self, reservation_id: str) -> None:
        """DELETE /v1/reservations/{id}: forgotten, and the next cycle woken to let its machines go."""
        await self.bookings.delete(reservation_id)
        self.wake()

    async def cycle(self) -> CycleOut:
        async with self._world_lock:
            scope, self._first_cycle_scope = self._first_cycle_scope, None
            if scope is None:
                return await self._cycle()
            with scope():
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
                self._carried,
                self._reservations,
                book=self.ec2_book,
            )
        except ObservationFailed as error:
            log.warning("observation failed, applying nothing this cycle: %s", error)
            report = CycleOut(started_at=started, duration_s=time.monotonic() - monotonic, ok=False, error=str(error))
            self.last.report = report
            self.metrics.record_cycle(report.duration_s, ok=False)
            return report

        # On the event loop's clock (time.monotonic in production; the simulator's virtual seconds in a campaign).
        observed = asyncio.get_running_loop().time()
        result = reusable(self._planned, snapshot)
        if result is None:
            # In a worker thread: a large plan takes CPU time the lease's renewals must not wait for.
            result = await asyncio.to_thread(plan, snapshot, self.policy)
            self._planned = Planned(snapshot, result, started)
        else:
            self.plans_reused += 1
        self._carried = result.carried
        self.journal.notices(result.notices)
        age_s = asyncio.get_running_loop().time() - observed
        act = self._leader and not self.dry_run
        if act and age_s > self._max_plan_age_s:
            act = False
            log.warning(
                "not applying %d action(s): the plan's view of the world is %.1f s old, more than the lease's"
                " safety margin of %g s; the next cycle looks again",
                len(result.actions),
                age_s,
                self._max_plan_age_s,
            )
        if act:
            outcomes = await apply(
                result.actions, self._swarm, self._ec2, self._template, gate=self._gate, clock=self._clock
            )
            # What was acted on is read by id for a while; a failed or unclear action brings a full listing.
            self.ec2_book.note_outcomes(outcomes, started)
            # On the plan's clock, AWS's, as every carried moment is (plan/clock.py).
            plan_now = started if snapshot.aws_now is None else snapshot.aws_now
            self._carried = after(result.carried, outcomes, self.policy, plan_now)
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
            now = self._clock()
            skew = clock_skew_notice(self._ec2.aws_clock(), now, self.policy)
            decided = expire_now(volume_id, cluster, volumes, instances, now, clock_skew=skew)
            if isinstance(decided, Refused):
                raise (VolumeNotFound if decided.missing else VolumeBusy)(decided.reason)
            self._check_may_act()
            (outcome,) = await apply((decided,), self._swarm, self._ec2, self._template, gate=self._gate)
            self.ec2_book.note_outcomes((outcome,), now)
            refused, at = _refusal(outcome), self._clock()
            self.journal.operator(decided, at, error=outcome.error or outcome.skipped)
            if refused is not None:
                raise refused
        self.wake()  # the janitor deletes it in the next cycle, not at the next resync
        return ExpiredOut(volume_id=volume_id, expires_at=format_timestamp(decided.expires_at))

    def _gate(self) -> str | None:
        if not self._leader or not self._lease_valid():
            return "this replica's lease is no longer valid; the leader acts"
        return None

    def _check_may_act(self) -> None:
        if not self._leader or not self._lease_valid():
            raise NotLeader("not the leader; ask the leader")
        if self.dry_run:
            raise ReadOnly("dry run (AUTOSCALING_DRY_RUN=true): this autoscaler changes nothing")

    def begin_term(self) -> None:
        """Forget the clocks an earlier term kept (spent tokens stay: they are AWS's facts, not ours), and list every
        instance and volume again: another replica may have acted while this one did not lead."""
        self._carried = self._carried.next_term()
        self._planned = None  # a new term plans afresh
        self.ec2_book.request_full_listing("a new term")

    def request_full_listing(self, reason: str) -> None:
        """The next cycle lists every instance and cache volume of the cluster, not only what can move."""
        self.ec2_book.request_full_listing(reason)

    def wake(self) -> None:
        self._alarm.ring()

    async def run(self, stop: asyncio.Event) -> None:
        """One term: cycle until `stop` is set; a failing cycle backs off, it never ends the loop.

        Each term starts its clocks afresh: what an earlier term saw (a node idle an hour ago) says nothing
        about what happened while another replica led.
        """
        self.begin_term()
        events = asyncio.create_task(self._alarm.follow(self._swarm.events(), stop))
        try:
            while not stop.is_set():
                try:
                    await self.cycle()
                    delay_s = self._next_delay_s()
                except Exception:  # a bug in one cycle must not stop the autoscaler
                    log.exception("cycle crashed; retrying in %s s", self._timing.failure_backoff_s)
                    self.metrics.record_crash()
                    delay_s = self._timing.failure_backoff_s
                if await self._alarm.sleep(delay_s, stop):
                    # Woken by an event: let a burst of events settle into one cycle.
                    await asyncio.sleep(self._timing.debounce_s)
        finally:
            events.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await events

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


class Alarm:
    """What ends the loop's sleep early: a swarm event, an operator's act; rings once per sleep."""

    def __init__(self) -> None:
        self._rung = asyncio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def sleep(self, delay_s: float, stop: asyncio.Event) -> bool:
        """Sleep up to delay_s; True when the alarm rang first."""
        self._rung.clear()
        waiters = [asyncio.create_task(self._rung.wait()), asyncio.create_task(stop.wait())]
        _done, pending = await asyncio.wait(waiters, timeout=delay_s, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return self._rung.is_set() and not stop.is_set()

    async def follow(self, events: AsyncIterator[str], stop: asyncio.Event) -> None:
        """Ring at each swarm event until `stop` is set."""
        async for _kind in events:
            if stop.is_set():
                return
            self._rung.set()


def _refusal(outcome: Outcome) -> NotLeader | PortError | None:
    """Why an operator's expiry tagged nothing: the lease lapsed between the last check and the call (apply then
    sends nothing, and the operator must not hear of an expiry that will never come), or EC2 failed."""
    if outcome.skipped is not None:
        return NotLeader(outcome.skipped)
    return PortError(outcome.error) if outcome.error is not None else None
