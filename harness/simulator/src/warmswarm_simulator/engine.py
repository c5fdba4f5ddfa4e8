"""One run: a policy against a trace on a fresh modelled world, on virtual time, until the world is quiet again.

warmswarm runs as in production: its real Reconciler (observe -> plan -> apply, events, deadlines, busy resyncs)
over the simulator's implementations of its ports. The baseline runs its own loop over the same ports. The run
lasts until every session has ended and the cluster holds nothing (no machine, no volume), so the bill includes
what the day left behind: idle machines winding down and cache volumes kept for their TTL. A warm buffer is never
left behind in that sense: it stands around the clock, refilled behind every claim. The run ends when nothing but
its stopped, unclaimed machines is left, and the meter bills a standing buffer for exactly the 24 h of the day,
whenever the run ends (billing.py's docstring gives the rule). The baseline's
buffers (hot and warm, osparc's) stand until every session has ended and the day is over, then wind down like any idle
machine; the meter bills them by the same rule (billing.BUFFER_MEMBER_TAG).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warmswarm_autoscaling.wiring import build_reconciler
from warmswarm_models import GroupProperties

from warmswarm_simulator.baseline import Baseline
from warmswarm_simulator.baseline_buffers import PRE_PULL_IMAGES
from warmswarm_simulator.baseline_rules import BaselineSettings, platform_room
from warmswarm_simulator.billing import DAY_S
from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.cache_writes import CacheWriter
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import Model
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.platform import Placement, Platform
from warmswarm_simulator.policies import PolicySpec, warmswarm_settings
from warmswarm_simulator.reserved import DayReservation, DayReservations
from warmswarm_simulator.results import RunResult, collect
from warmswarm_simulator.simports import SimEc2, SimSwarmPort
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.workload import Session
from warmswarm_simulator.world import World

# How often the run checks whether the world is quiet (every session over, no volume and no machine left but the
# standing warm buffer's).
_QUIET_CHECK_S = 60.0
# A run never lasts longer than this after the day's midnight: a stuck world is reported, not waited for.
_MAX_HORIZON_S = 5 * 86_400.0


@dataclass(slots=True)
class _Parts:
    world: World
    cloud: Cloud
    swarm: Swarm
    ec2: SimEc2
    swarm_port: SimSwarmPort
    platform: Platform
    machines: Machines


def run_policy(
    model: Model,
    spec: PolicySpec,
    sessions: list[Session],
    day_groups: Mapping[str, GroupProperties],
    max_instances: int,
    reservations: Sequence[DayReservation] = (),
) -> RunResult:
    """Simulate `sessions` under `spec`; the same inputs give the same result, to the last digit. `reservations`: the
    day's classes, declared to warmswarm when the policy says so (spec.reserve_classes), to nobody otherwise."""
    if spec.reserve_classes and not reservations:
        raise ValueError(f"policy {spec.name} declares the day's classes, and the run was given none")
    loop = VirtualLoop()
    quiet = logging.getLogger("warmswarm_autoscaling")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the journal's lines, thousands a day, say nothing the result does not
    try:
        return loop.run_until_complete(_run(loop, model, spec, sessions, day_groups, max_instances, reservations))
    finally:
        quiet.setLevel(level)
        leftovers = asyncio.all_tasks(loop)  # the loop's own waiters (an alarm's sleep, the event stream)
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(_settle(leftovers))
        loop.close()


async def _settle(tasks: set[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


async def _run(
    loop: VirtualLoop,
    model: Model,
    spec: PolicySpec,
    sessions: list[Session],
    day_groups: Mapping[str, GroupProperties],
    max_instances: int,
    reservations: Sequence[DayReservation],
) -> RunResult:
    world = World(loop, model.day_epoch_s)
    cloud = Cloud(world, model)
    swarm = Swarm(world, model.swarm)
    ec2 = SimEc2(world, model, cloud, Throttle(model.throttling))
    swarm_port = SimSwarmPort(world, model, swarm)
    groups = spec.group_properties(day_groups)
    stop = asyncio.Event()
    controller: Coroutine[Any, Any, None]
    sessions_over: Callable[[], None] = _nothing  # what the policy does once every session has ended
    if spec.kind == "warmswarm":
        settings = warmswarm_settings(spec, max_instances, model.platform)
        machines = Machines.of_warmswarm(world, model, cloud, swarm, settings)
        placement = Placement.OWNER
        # Wired as production wires it, with the simulator's ports and the world's clock; the reservation store
        # only when the policy declares the classes (None: the autoscaler keeps none, as without Redis).
        store = DayReservations(reservations, model.day_epoch_s) if spec.reserve_classes else None
        controller = build_reconciler(settings, swarm=swarm_port, ec2=ec2, clock=world.epoch, reservations=store).run(
            stop
        )
    else:
        baseline_settings = BaselineSettings(**{**platform_room(model.platform), **spec.settings})
        machines = Machines(
            world, model, cloud, swarm, join_availability="active", device_wait_s=0.0, buffer_images=PRE_PULL_IMAGES
        )
        placement = Placement.SHARED if baseline_settings.share_machines else Placement.SESSION
        baseline = Baseline(
            world,
            dict(model.instance_types),
            model.availability_zones,
            ec2,
            swarm_port,
            baseline_settings,
            max_instances,
        )
        controller = baseline.run(stop)

        # Its buffers would stay for ever and the world would never be quiet: released once the sessions are over
        # and the day is, whichever is later (a standing buffer stands the whole day, as warmswarm's, and is billed
        # for its 24 h by the same rule).
        def sessions_over() -> None:
            world.at(max(world.now_s, DAY_S), baseline.release_buffers)

    # The baseline keeps no cache (osparc's has none): nothing of it is written to a volume.
    writer = CacheWriter(world, cloud.volumes, swarm, model.writes) if spec.kind == "warmswarm" else None
    platform = Platform(
        world,
        swarm,
        cloud,
        placement=placement,
        groups=groups,
        download_mb_per_s=model.download_mb_per_s,
        writer=writer,
    )
    parts = _Parts(world, cloud, swarm, ec2, swarm_port, platform, machines)
    platform.start(sessions)
    running = loop.create_task(controller)
    await _until_quiet(parts, sessions_over)
    stop.set()
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    return collect(spec, parts.world.now_s, cloud, swarm, ec2, platform, machines)


def _nothing() -> None:
    pass


async def _until_quiet(parts: _Parts, sessions_over: Callable[[], None]) -> None:
    try:
        await asyncio.wait_for(parts.platform.all_ended.wait(), timeout=_MAX_HORIZON_S)
    except TimeoutError:
        return  # sessions that never ran: the result reports them
    sessions_over()
    while parts.world.now_s < _MAX_HORIZON_S:
        if parts.cloud.only_standing_buffer() and not parts.cloud.volumes.volumes:
            return
        await asyncio.sleep(_QUIET_CHECK_S)
