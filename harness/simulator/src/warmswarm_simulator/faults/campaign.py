"""One campaign: the real reconciler (wiring.build_reconciler) cycled over the modelled world while faults strike.

The driver takes the loop's place: it calls `cycle()`, checks the invariants on the world, lets the world strike,
and sleeps (virtual seconds) as the loop would: a busy resync while anything moves, else until the plan's next
deadline or the resync, the failure back-off after a cycle that failed. Swarm events, which wake the real loop
sooner, are not modelled: fewer cycles per virtual second, never more. The stale leader (replica B) is a second
Reconciler over the same world with a lease of its own; while it holds the lock the leader (A) applies nothing,
and A begins a new term once B's lock has expired.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.wiring import build_reconciler

from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.faults import liveness
from warmswarm_simulator.faults.causes import Causes, avoided_offerings
from warmswarm_simulator.faults.checks import CYCLE_RAISES
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.ec2_faults import AwsState, FaultyEc2
from warmswarm_simulator.faults.history import History
from warmswarm_simulator.faults.invariants import Invariants
from warmswarm_simulator.faults.recycling import Recycling
from warmswarm_simulator.faults.reservations import MemoryReservations
from warmswarm_simulator.faults.scenario import UNKNOWN_TYPE, Scenario
from warmswarm_simulator.faults.swarm_faults import FaultySwarm
from warmswarm_simulator.faults.world_faults import WorldFaults
from warmswarm_simulator.faults.worldparts import Parts
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.platform import Placement, Platform
from warmswarm_simulator.simports import SimEc2, SimSwarmPort
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

_SKEWS_S = (30.0, 120.0, 900.0, 3600.0)  # how far a drifting clock is off (the janitor tolerates 60 s ahead)
_SKEW_CYCLES = (3, 8, 15)
_LEASE_LEFT_S = (0.5, 2.0, 6.0)  # how long the stale replica's lease still holds when it observes
_FREEZES_S = (0.0, 4.0, 12.0, 30.0)  # how long it then freezes before its observation completes
_MARGIN_SHARE = 0.2  # lease.py's safety margin: a fifth of the lock's ttl


@dataclass(slots=True)
class Outcome:
    """What a campaign left: its history (faults, calls, failures), cycles run and virtual seconds they took."""

    seed: int
    history: History
    cycles: int
    virtual_s: float
    views: list[liveness.CycleView] = field(default_factory=list)
    marks: int = 0  # machines the autoscaler marked for recycling (scrub tag pending-), a mark each
    proofs: int = 0  # scrubs it marked proven (scrub tag done-)


class Campaign:
    def __init__(
        self,
        scenario: Scenario,
        kept: frozenset[str] | None = None,
        stop_on: str = "",
        explain: bool = False,
    ) -> None:
        self.scenario = scenario
        self._stop_on = stop_on
        self._explain = explain  # note each plan's actions and their reasons in the history (a replay, to debug)
        self.history = History()
        self.dice = Dice(scenario.seed, scenario.rates, self.history, kept)
        self.loop = VirtualLoop()
        model, settings = scenario.model, scenario.settings
        world = World(self.loop, model.day_epoch_s)
        cloud = Cloud(world, model)
        swarm = Swarm(world, model.swarm)
        machines = Machines.of_warmswarm(world, model, cloud, swarm, settings)
        platform = Platform(
            world,
            swarm,
            cloud,
            placement=Placement.OWNER,
            groups=dict(scenario.groups),
            download_mb_per_s=model.download_mb_per_s,
        )
        self.parts = Parts(world, cloud, swarm, machines, platform)
        self.invariants = Invariants(self.parts, scenario, self.dice)
        self.causes = Causes(self.parts, scenario, self.dice)
        self.recycling = Recycling(self.parts, scenario, self.dice)
        self.world_faults = WorldFaults(self.parts, self.dice)
        sim_ec2 = SimEc2(world, model, cloud, Throttle(model.throttling))
        sim_swarm = SimSwarmPort(world, model, swarm)
        known = frozenset(model.instance_types)
        settings = _set_up(settings, self.dice)
        self._skew = {"A": 0.0, "B": 0.0}
        self._skew_until = 0
        self._episode_end_s = float("-inf")  # when the stale replica's lock expires (A leads again)
        self._stale_lease_end_s = float("-inf")
        self._a_term_pending = False
        self._terms_s: list[float] = [0.0]  # when each of the leader's terms began (virtual s)
        self._b_task: asyncio.Task[Any] | None = None
        self._b_plan_stall_s = 0.0  # how long B's next plan stalls (the "leader" kind, frozen in its plan)
        self.loop.stall_s = self._stall_s

        aws = AwsState()

        def ports(replica: str) -> tuple[FaultyEc2, FaultySwarm]:
            ec2 = FaultyEc2(
                sim_ec2,
                cloud,
                world,
                self.dice,
                aws,
                replica=replica,
                known_types=known,
                latency=model.api.of,
                watch=self.invariants.watch,
            )
            return ec2, FaultySwarm(sim_swarm, world, self.dice, replica=replica, watch=self.invariants.watch)

        # One store for both replicas, as production's Redis is.
        self.reservations = MemoryReservations()
        ec2_a, swarm_a = ports("A")
        self.a = build_reconciler(
            settings,
            swarm=swarm_a,
            ec2=ec2_a,
            clock=lambda: world.epoch() + self._skew["A"],
            lease_valid=lambda: world.now_s >= self._episode_end_s,
            max_plan_age_s=scenario.max_plan_age_s,
            reservations=self.reservations,
        )
        ec2_b, self._swarm_b = ports("B")
        self.b = build_reconciler(
            settings,
            swarm=self._swarm_b,
            ec2=ec2_b,
            clock=lambda: world.epoch() + self._skew["B"],
            lease_valid=lambda: world.now_s < self._stale_lease_end_s,
            max_plan_age_s=scenario.max_plan_age_s,
            reservations=self.reservations,
        )
        self._margin_s = settings.leader_lock_ttl_s * _MARGIN_SHARE

    # -- running ---------------------------------------------------------------------------------------------------

    def run(self) -> Outcome:
        quiet = logging.getLogger("warmswarm_autoscaling")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # thousands of journal lines a campaign, all in the history already
        try:
            return self.loop.run_until_complete(self._run())
        finally:
            quiet.setLevel(level)
            leftovers = asyncio.all_tasks(self.loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                self.loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
            self.loop.close()

    async def _run(self) -> Outcome:
        scenario, dice, parts = self.scenario, self.dice, self.parts
        for note in scenario.notes:
            self.history.notes.append((0, note))
        parts.platform.start(list(scenario.sessions))
        views: list[liveness.CycleView] = []
        cycles = 0
        # Liveness is owed to the sessions requested before the last K cycles began: they had K calm cycles.
        owed_before_s = float("inf")
        calm_epoch_s = float("inf")
        owed_before_epoch = float("inf")
        for cycle in range(1, scenario.cycles + 1):
            cycles = cycle
            dice.cycle = cycle
            if cycle == scenario.cycles - scenario.liveness_cycles + 1:
                owed_before_s = parts.world.now_s
                owed_before_epoch = parts.world.epoch()
            if cycle == scenario.calm_from:
                calm_epoch_s = parts.world.epoch()
                self._calm()
            self._book(cycle)
            if dice.on:
                self.world_faults.strike()
                self.recycling.strike()
                self._clock()
                self._stale_leader()
            self._term()
            self.causes.late()
            views.append(await self._cycle(cycle))
            self.world_faults.count_strikes()
            self.invariants.after_cycle()
            self.recycling.after_cycle()
            # Only a plan made this cycle says what is avoided now (a failed observation leaves the last one).
            self.causes.after_cycle(self._avoided() if views[-1].plan else [], self._terms_s)
            if self._stop_on and any(f.check == self._stop_on for f in self.history.failures):
                break
            await asyncio.sleep(self._delay_s(views[-1]))
        if self._b_task is not None:
            await asyncio.gather(self._b_task, return_exceptions=True)
            self.invariants.after_cycle()
        if cycles == scenario.cycles:
            self.recycling.at_end()
            ends_by_s = liveness.backoff_ends_by(calm_epoch_s, scenario.settings)
            for check, message in liveness.check(
                parts, views, scenario.settings.max_instances, owed_before_s, ends_by_s, owed_before_epoch
            ):
                self.history.fail(cycles, check, message)
        recycling = self.recycling
        return Outcome(
            scenario.seed,
            self.history,
            cycles,
            parts.world.now_s,
            views,
            marks=len(recycling.marks),
            proofs=len(recycling.proofs),
        )

    async def _cycle(self, cycle: int) -> liveness.CycleView:
        try:
            report = await self.a.cycle()
        except Exception as error:  # the loop would log it and back off; a campaign counts it as broken
            self.history.fail(cycle, CYCLE_RAISES, f"{type(error).__name__}: {error}")
            return liveness.CycleView(cycle, False, {}, f"the cycle raised {type(error).__name__}")
        last = self.a.last
        if not report.ok or last.plan is None:
            return liveness.CycleView(cycle, False, {}, f"observation failed: {report.error}")
        if self._explain:
            for action in last.plan.actions:
                self.history.notes.append((cycle, f"A plans {action.title}: {action.reason}"))
        waits = {
            w.service_name: liveness.Wait(w.reason, w.starting, w.unschedulable, w.until) for w in last.plan.waiting
        }
        return liveness.CycleView(cycle, True, waits)

    def _avoided(self) -> list[tuple[str, str]]:
        """The offerings the leader's last plan avoids (it reports them in its carried state for the next cycle)."""
        last = self.a.last
        if last.plan is None or last.snapshot is None:
            return []
        return avoided_offerings(last.plan.carried.unavailable_offerings, last.snapshot)

    def _delay_s(self, view: liveness.CycleView) -> float:
        """How long the loop sleeps after this cycle (reconciler._next_delay_s, from what the cycle left)."""
        settings, last = self.scenario.settings, self.a.last
        if not view.plan or last.plan is None or last.snapshot is None:
            return float(settings.failure_backoff_s)
        if last.plan.actions or last.plan.busy:
            return float(settings.busy_resync_interval_s)
        delay_s = float(settings.resync_interval_s)
        if last.plan.deadline is not None:
            delay_s = min(delay_s, last.plan.deadline - last.snapshot.now + 0.05)
        return max(delay_s, 0.05)

    def _book(self, cycle: int) -> None:
        """Ops make the reservations due this cycle (by the API, on AWS's clock)."""
        for booking in self.scenario.bookings:
            if booking.made_cycle == cycle:
                made = self.reservations.book(booking, self.parts.world.epoch())
                self.history.notes.append(
                    (
                        cycle,
                        f"ops reserve {made.id}: {booking.sessions} session(s) of group"
                        f" {made.group} {booking.after_s:.0f} s from now",
                    )
                )

    # -- faults of time and leadership (those of the setup: _set_up, below) -------------------------------------

    def _calm(self) -> None:
        self.dice.on = False
        self.world_faults.calm()
        if self._skew["A"]:
            self.history.notes.append((self.dice.cycle, "the calm: the leader's clock agrees with AWS's again"))
        self._skew["A"] = 0.0

    def _clock(self) -> None:
        dice, cycle = self.dice, self.dice.cycle
        if self._skew["A"] and cycle >= self._skew_until:
            self._skew["A"] = 0.0
            self.history.notes.append((cycle, "the leader's clock agrees with AWS's again"))
        if self._skew["A"]:
            return
        sign = dice.pick((-1.0, 1.0), f"c{cycle} clock sign")
        skew_s = sign * dice.pick(_SKEWS_S, f"c{cycle} clock how far")
        length = dice.pick(_SKEW_CYCLES, f"c{cycle} clock how long")
        way = "ahead of" if skew_s > 0 else "behind"
        detail = f"the leader's clock is {abs(skew_s):g} s {way} AWS's for {length} cycles"
        if dice.fires("clock", "A clock", detail, owner="*"):
            self._skew["A"] = skew_s
            self._skew_until = cycle + length

    def _stale_leader(self) -> None:
        dice, cycle, now_s = self.dice, self.dice.cycle, self.parts.world.now_s
        if now_s < self._episode_end_s or (self._b_task is not None and not self._b_task.done()):
            return
        left_s = dice.pick(_LEASE_LEFT_S, f"c{cycle} leader lease")
        freeze_s = dice.pick(_FREEZES_S, f"c{cycle} leader freeze")
        # In its observation (the world it plans from is old when it is read) or in its plan (the production guard,
        # max_plan_age_s, is what holds that plan back).
        where = dice.pick(("observation", "plan"), f"c{cycle} leader freeze where")
        skew_s = dice.pick((0.0, -300.0, 300.0), f"c{cycle} leader skew") if "clock" in dice.rates else 0.0
        detail = f"replica B takes the lease for {left_s:g} s, freezes {freeze_s:g} s in its {where}" + (
            f", its clock {skew_s:+g} s off AWS's" if skew_s else ""
        )
        if not dice.fires("leader", "B lease", detail, owner="*"):
            return
        self._stale_lease_end_s = now_s + left_s
        self._episode_end_s = self._stale_lease_end_s + self._margin_s
        self.invariants.stale_leases.append((now_s, self._stale_lease_end_s, self._episode_end_s))
        self._skew["B"] = skew_s
        if where == "plan":
            self._b_plan_stall_s = freeze_s
        else:
            self._swarm_b.freeze_s = freeze_s
        self._a_term_pending = True
        self.b.begin_term()
        self._b_task = self.loop.create_task(self._b_cycle())

    async def _b_cycle(self) -> None:
        calls_before = len(self.history.calls)
        try:
            report = await self.b.cycle()
        except Exception as error:
            self.history.fail(self.dice.cycle, CYCLE_RAISES, f"replica B: {type(error).__name__}: {error}")
            return
        planned = report.actions if report.ok else 0
        sent = sum(1 for c in self.history.calls[calls_before:] if c.replica == "B")
        self.history.notes.append(
            (
                self.dice.cycle,
                f"B's cycle ended at {self.parts.world.now_s:.1f} s: {planned} action(s) planned,"
                f" {sent} call(s) sent (its lease ended at {self._stale_lease_end_s:.1f} s)",
            )
        )

    def _stall_s(self) -> float:
        """How long the plan handed to a thread now stalls: B's, once, when its freeze falls in its plan."""
        if self._b_task is None or asyncio.current_task(self.loop) is not self._b_task:
            return 0.0
        stall_s, self._b_plan_stall_s = self._b_plan_stall_s, 0.0
        return stall_s

    def _term(self) -> None:
        """A leads again once B's lock has expired: a new term, its clocks afresh (as lease.py starts one)."""
        if self._a_term_pending and self.parts.world.now_s >= self._episode_end_s:
            self._a_term_pending = False
            self.a.begin_term()
            self.invariants.term_started_s = self.parts.world.now_s
            self._terms_s.append(self.parts.world.now_s)
            self.history.notes.append((self.dice.cycle, "A leads again (B's lock expired): a new term"))


def _set_up(settings: AutoscalingSettings, dice: Dice) -> AutoscalingSettings:
    """The settings with the setup faults this run keeps: scenario.draw put an unknown type among the allowed ones
    when the kind is on; it is recorded as a fault here, so that a replay (the shrinker's) may leave it out."""
    if UNKNOWN_TYPE not in settings.allowed_instance_types:
        return settings
    if dice.setup("unknown-type", f"{UNKNOWN_TYPE}, which EC2 does not know, is an allowed instance type"):
        return settings
    allowed = [t for t in settings.allowed_instance_types if t != UNKNOWN_TYPE]
    return settings.model_copy(update={"allowed_instance_types": allowed})
