"""One size and shape of the cycle benchmark, measured: the real Reconciler over the real adapters and the stand-ins.

CPU is process CPU time (time.process_time: every thread, so the planner's worker thread counts). The parts are
each measured alone on the same adapters in the same state as the cycle they stand for (the cycle itself reads
EC2 and Docker concurrently); the rest is the cycle's total less the parts: apply (nothing to do here), the
snapshot, the journal, the metrics. The longest event-loop block comes from a loop-lag probe (LoopLagProbe),
run in cycles of its own (as many as the timed ones) so that its wakes do not count in the CPU figures. A first
cycle's clients are made before it (main.py makes them at start) and their creation is reported apart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiodocker
import aiohttp
from botocore.loaders import create_loader
from cycle_ec2_answers import TYPES
from cycle_lease import lease_through
from cycle_servers import TOUCH_PATH
from cycle_world import ZONES
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import ec2_client
from warmswarm_autoscaling.adapters.ec2_reader import Ec2Reader
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.plan_reuse import Planned, reusable
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.wiring import build_reconciler
from warmswarm_runtime.memory import collector_paused

REGION = "us-east-1"
EC2_MAX_ATTEMPTS = 3
PRICES_PER_HOUR = {"t3.medium": 0.0416, "m5.large": 0.096}


def settings(cluster: str, machines: int) -> AutoscalingSettings:
    """The autoscaler's settings for the fleet: room for every machine, its types, its zones."""
    return AutoscalingSettings.model_construct(
        cluster=cluster,
        image_id="ami-0bench000000000001",
        aws_region=REGION,
        availability_zones=list(ZONES),
        allowed_instance_types=list(TYPES),
        price_per_hour=dict(PRICES_PER_HOUR),
        max_instances=2 * machines + 10,
        idle_grace_s=300.0,
    )


@dataclass(frozen=True, slots=True)
class Stack:
    reconciler: Reconciler
    ec2: AiobotocoreEc2
    swarm: AiodockerSwarm
    docker: aiodocker.Docker


@asynccontextmanager
async def autoscaler(ec2_url: str, docker_url: str, cluster: str, machines: int) -> AsyncIterator[Stack]:
    """A reconciler as main.py wires one (an EC2 client, its reader, a Docker client), over the stand-ins."""
    docker_host = docker_url.replace("http://", "tcp://", 1)
    loader = create_loader()
    async with (
        aiodocker.Docker(url=docker_host) as docker,
        ec2_client(ec2_url, REGION, EC2_MAX_ATTEMPTS, loader=loader) as client,
        # As main.py: EC2's reads are parsed on a thread and client of their own, off the service's loop, sharing
        # the other client's parsed service model.
        Ec2Reader(ec2_url, REGION, EC2_MAX_ATTEMPTS, loader=loader) as reader,
    ):
        ec2, swarm = AiobotocoreEc2(client, reader=reader), AiodockerSwarm(docker)
        # The event stream read as the reconcile loop reads it: while it is open, nodes and services are listed only
        # when they may have changed (the stand-in's stream stays quiet).
        follower = asyncio.create_task(_follow(swarm))
        try:
            # As main.py: the first cycle runs with the cycle collector paused, and freezes what it read.
            reconciler = build_reconciler(
                settings(cluster, machines), swarm=swarm, ec2=ec2, first_cycle_scope=collector_paused
            )
            yield Stack(reconciler, ec2, swarm, docker)
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower


async def _follow(swarm: AiodockerSwarm) -> None:
    async for _kind in swarm.events():
        pass


class LoopLagProbe:
    """Wakes every `interval_s`; how late a wake comes is how long the loop was blocked (to within the interval).

    Two figures per run: the longest lateness on the wall clock (what a lease renewal would wait, which a loaded
    machine stretches), and the most CPU the loop's thread spent between two wakes (the same block in CPU, which
    the machine's load barely moves).
    """

    def __init__(self, interval_s: float = 0.005) -> None:
        self._interval_s = interval_s
        self.longest_block_s = 0.0
        self.longest_block_cpu_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLagProbe:
        self._task = asyncio.create_task(self._watch())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before_s, before_cpu_s = loop.time(), time.thread_time()
            await asyncio.sleep(self._interval_s)
            self.longest_block_s = max(self.longest_block_s, loop.time() - before_s - self._interval_s)
            self.longest_block_cpu_s = max(self.longest_block_cpu_s, time.thread_time() - before_cpu_s)


async def cpu_ms(run: Callable[[], Awaitable[Any]]) -> float:
    """Process CPU of one awaited call, after a collection so that earlier garbage is not charged to it."""
    gc.collect()
    started = time.process_time()
    await run()
    return (time.process_time() - started) * 1000


def peak_rss_mib() -> float:
    """VmHWM: this process's peak resident set (ru_maxrss would carry a parent's peak across exec)."""
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return kib / 1024


async def _ec2_reads(stack: Stack, cluster: str) -> None:
    await stack.ec2.list_instances(cluster)
    await stack.ec2.list_volumes(cluster)


async def _docker_reads(swarm: AiodockerSwarm) -> None:
    await swarm.list_nodes()
    await swarm.list_tasks()


async def measure(ec2_url: str, docker_url: str, cluster: str, machines: int, repeat: int) -> dict[str, Any]:
    """Every figure of one size: CPU ms per scenario and part (all repeats), the longest block, peak RSS."""
    figures: dict[str, list[float]] = {}

    def note(key: str, value: float) -> None:
        figures.setdefault(key, []).append(value)

    async with aiohttp.ClientSession() as control:

        async def touch() -> None:
            async with control.post(docker_url + TOUCH_PATH) as answer:
                answer.raise_for_status()

        # The service's life first, one reconciler as main.py holds it: its first cycle, idle ones, busy ones, and the
        # cycles that list all of EC2 (every AUTOSCALING_EC2_FULL_LISTING_INTERVAL_S, here asked for).
        async with autoscaler(ec2_url, docker_url, cluster, machines) as stack:
            reconciler = stack.reconciler
            cycle = reconciler.cycle

            async def full_cycle() -> None:
                reconciler.request_full_listing("the benchmark's full-listing cycle")
                await cycle()

            note("first/total", await cpu_ms(cycle))
            actions = [reconciler.last.report.actions if reconciler.last.report else -1]
            await cycle()  # the first cycle's carried clocks are new input: the second plans again
            reused_before = reconciler.plans_reused
            for _ in range(repeat):
                note("idle/total", await cpu_ms(cycle))
            for _ in range(repeat):
                await touch()
                note("busy/total", await cpu_ms(cycle))
            for _ in range(repeat):
                note("full/total", await cpu_ms(full_cycle))
            reused = reconciler.plans_reused - reused_before
            report = reconciler.last.report
            actions.append(report.actions if report is not None and report.ok else -1)
            rss_mib = peak_rss_mib()  # the service's peak: before the parts below add readings of their own
            for _ in range(repeat):
                for scenario, run in (("idle", cycle), ("busy", cycle), ("full", full_cycle)):
                    if scenario == "busy":
                        await touch()
                    async with LoopLagProbe() as probe:
                        await run()
                    note(f"{scenario}/longest block", probe.longest_block_s * 1000)
                    note(f"{scenario}/longest block CPU", probe.longest_block_cpu_s * 1000)
            for _ in range(repeat):
                note("idle/EC2 read+parse", await cpu_ms(lambda: _book_reads(reconciler)))
                note("full/EC2 read+parse", await cpu_ms(lambda: _ec2_reads(stack, cluster)))
                note("idle/Docker read+parse", await cpu_ms(lambda: _docker_reads(stack.swarm)))
                await touch()
                note("busy/Docker read+parse", await cpu_ms(lambda: _docker_reads(stack.swarm)))
                note("idle/plan()", await cpu_ms(lambda: _plan_or_reuse(reconciler)))
                note("first/plan()", await cpu_ms(lambda: _plan(reconciler)))
            figures["busy/EC2 read+parse"] = figures["idle/EC2 read+parse"]  # nothing changed in EC2 either way
            figures["full/Docker read+parse"] = figures["idle/Docker read+parse"]  # nor in the swarm
            # The touched task reads the same (a restart in place): the busy and full cycles take the plan again.
            figures["busy/plan()"] = figures["full/plan()"] = figures["idle/plan()"]
            # Docker's first reading: a fresh adapter on the same client holds no readings by version.
            for _ in range(repeat):
                note("first/Docker read+parse", await cpu_ms(lambda: _docker_reads(AiodockerSwarm(stack.docker))))

        # The first cycle again, each on new clients and a new reconciler, as after a restart.
        for index in range(2 * repeat - 1):  # the service's life above gave the first of them
            async with contextlib.AsyncExitStack() as stack_scope:
                started_s = time.process_time()
                fresh = await stack_scope.enter_async_context(autoscaler(ec2_url, docker_url, cluster, machines))
                note("first/clients' creation", (time.process_time() - started_s) * 1000)
                if index < repeat - 1:
                    note("first/total", await cpu_ms(fresh.reconciler.cycle))
                    continue
                # The probed runs, apart from the timed ones: the probe's wakes cost CPU of their own.
                async with LoopLagProbe() as probe:
                    await fresh.reconciler.cycle()
                note("first/longest block", probe.longest_block_s * 1000)
                note("first/longest block CPU", probe.longest_block_cpu_s * 1000)
        for _ in range(repeat):
            async with autoscaler(ec2_url, docker_url, cluster, machines) as fresh:
                note("first/EC2 read+parse", await cpu_ms(lambda: _first_ec2_reads(fresh, cluster)))
        # Item 4: a leader's lease with a 2 s TTL through a first cycle, renewed on the same loop.
        leases = []
        for _ in range(repeat):
            async with autoscaler(ec2_url, docker_url, cluster, machines) as fresh:
                leases.append(await lease_through(fresh.reconciler.cycle))

    return {
        "machines": machines,
        "repeat": repeat,
        "cpu_ms": figures,
        "planned_actions": actions,
        "plans_reused": reused,
        "cycles_after_the_second": 3 * repeat,
        "peak_rss_mib": rss_mib,
        "lease": leases,
        "load_1min": os.getloadavg()[0],
    }


async def _plan(reconciler: Reconciler) -> None:
    """plan() on the last cycle's own snapshot, in a worker thread as the cycle runs it."""
    snapshot = reconciler.last.snapshot
    assert snapshot is not None
    await asyncio.to_thread(plan, snapshot, reconciler.policy)


async def _book_reads(reconciler: Reconciler) -> None:
    """An idle cycle's EC2 reads, as observe() makes them: by id what can move, then what no ready node names."""
    snapshot = reconciler.last.snapshot
    assert snapshot is not None
    book = reconciler.ec2_book
    read = await book.refresh(time.time())
    await book.follow_nodes(snapshot.nodes, read)


async def _plan_or_reuse(reconciler: Reconciler) -> None:
    """What a cycle that finds the same world pays instead of plan(): comparing it with the planned one (new tuples of
    the same readings, as the adapters hand them)."""
    snapshot = reconciler.last.snapshot
    result = reconciler.last.plan
    assert snapshot is not None
    assert result is not None
    again = dataclasses.replace(
        snapshot,
        nodes=tuple(list(snapshot.nodes)),
        tasks=tuple(list(snapshot.tasks)),
        instances=tuple(list(snapshot.instances)),
        volumes=tuple(list(snapshot.volumes)),
    )
    if reusable(Planned(snapshot, result, snapshot.now), again) is None:
        raise AssertionError("the same world was not taken as the same: the benchmark measures the wrong thing")


async def _first_ec2_reads(stack: Stack, cluster: str) -> None:
    """A new client's first reads: the instances, the volumes and the instance types (the catalogue is empty)."""
    await _ec2_reads(stack, cluster)
    await stack.ec2.describe_instance_types(list(TYPES))
