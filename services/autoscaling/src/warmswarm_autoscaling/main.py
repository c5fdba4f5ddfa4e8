"""The one wiring point: settings → adapters → leader election → reconcile loop + HTTP API.

`build` puts the parts together from ports (the tests give it fakes), the loop by wiring.build_reconciler, the
one place a Reconciler is assembled; `serve` opens the real adapters and runs them. Every replica serves the
API; only the holder of the Redis leader lock runs the reconcile loop (lease.py decides, and cancels the loop
the moment the lease can no longer be trusted).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import aiodocker
from botocore.loaders import create_loader
from fastapi import FastAPI
from warmswarm_runtime.http import api_server
from warmswarm_runtime.logs import configure_logging
from warmswarm_runtime.memory import collector_paused, tune_gc
from warmswarm_runtime.settings import load_settings

from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import LAUNCH_CLIENT_ATTEMPTS, ec2_client
from warmswarm_autoscaling.adapters.ec2_reader import Ec2Reader
from warmswarm_autoscaling.adapters.lock_redis import redis_lock
from warmswarm_autoscaling.adapters.reservations_redis import redis_reservations
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.api import create_app
from warmswarm_autoscaling.lease import Lease, replica_id
from warmswarm_autoscaling.ports import Ec2, Lock, ReservationStore, Swarm
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.wiring import build_reconciler

log = logging.getLogger("warmswarm_autoscaling")

# Library chatter that says nothing an operator acts on.
_QUIET_LOGGERS = ("botocore", "aiobotocore", "urllib3", "uvicorn.access")


@dataclass(frozen=True, slots=True)
class Autoscaler:
    """One replica, wired: the loop, the election that runs it, and the API over both."""

    reconciler: Reconciler
    lease: Lease
    app: FastAPI


def build(
    settings: AutoscalingSettings,
    *,
    swarm: Swarm,
    ec2: Ec2,
    lock: Lock,
    clock: Callable[[], float] = time.time,
    reservations: ReservationStore | None = None,
    first_cycle_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Autoscaler:
    lease = Lease(
        lock,
        key=settings.lock_key(),
        replica=replica_id(),
        ttl_s=settings.leader_lock_ttl_s,
        renew_interval_s=settings.leader_renew_interval_s,
    )
    reconciler = build_reconciler(
        settings,
        swarm=swarm,
        ec2=ec2,
        clock=clock,
        # Each mutating call asks the lease by the clock; a plan older than the lease's safety margin
        # may have been decided while another replica led, and is not applied.
        lease_valid=lambda: lease.is_leader,
        max_plan_age_s=lease.safety_margin_s,
        reservations=reservations,
        first_cycle_scope=first_cycle_scope,
    )
    # A follower until the lock says otherwise: the API must not claim leadership before the election.
    reconciler.set_leader(False)
    lease.on_change = reconciler.set_leader
    ops_token = None if settings.ops_token is None else settings.ops_token.get_secret_value()
    # Ready means, for the leader, a successful cycle within a few resync periods.
    app = create_app(
        reconciler,
        ready_within_s=3 * settings.resync_interval_s + 10,
        clock=clock,
        ops_token=ops_token,
        lease=lease,
    )
    return Autoscaler(reconciler, lease, app)


async def serve(settings: AutoscalingSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # One botocore loader for the three EC2 clients: one parsed service model in memory, not three (ec2_client).
    loader = create_loader()

    async with (
        aiodocker.Docker(url=settings.docker_host) as docker,
        ec2_client(settings.ec2_endpoint_url, settings.aws_region, settings.ec2_max_attempts, loader=loader) as client,
        ec2_client(
            settings.ec2_endpoint_url, settings.aws_region, LAUNCH_CLIENT_ATTEMPTS, loader=loader
        ) as launch_client,
        # The reads on a thread and client of their own: botocore's parse of a big answer would otherwise hold up
        # this loop, the lease's renewals with it, for a second per 1,000 instances (ec2_reader.py).
        Ec2Reader(settings.ec2_endpoint_url, settings.aws_region, settings.ec2_max_attempts, loader=loader) as reader,
        # One Redis answer may take at most one renew interval: the lease retries on its own clock.
        redis_lock(settings.redis_url, timeout_s=settings.leader_renew_interval_s) as lock,
        # The same Redis keeps ops' reservations; a read that takes longer costs that cycle its reservations only.
        redis_reservations(
            settings.redis_url, settings.reservations_key(), timeout_s=settings.leader_renew_interval_s
        ) as reservations,
    ):
        ec2 = AiobotocoreEc2(client, launch_client=launch_client, reader=reader)
        replica = build(
            settings,
            swarm=AiodockerSwarm(docker),
            ec2=ec2,
            lock=lock,
            reservations=reservations,
            # The first cycle reads the whole cluster into long-lived readings: no collector pass walks them meanwhile
            # (it would hold the loop up to ~110 ms at 10,000 machines), and they are frozen after.
            first_cycle_scope=collector_paused,
        )
        tune_gc()
        server = api_server(replica.app, settings.http_host, settings.http_port)
        log.info(
            "autoscaler for cluster %r starting as replica %s; API on %s:%s; leader lock %s (ttl %g s)",
            settings.cluster,
            replica.lease.replica,
            settings.http_host,
            settings.http_port,
            replica.lease.key,
            settings.leader_lock_ttl_s,
        )
        api = asyncio.create_task(server.serve())
        try:
            # The loop runs only as a term of leadership: started when elected, cancelled when the
            # lease is lost; on SIGTERM it finishes its cycle and the lock is released.
            await replica.lease.run(stop, replica.reconciler.run)
        finally:
            server.should_exit = True
            await api
    log.info("autoscaler stopped")


def run() -> None:
    settings = load_settings(AutoscalingSettings, "AUTOSCALING_")
    configure_logging(json_lines=settings.log_json, quiet=_QUIET_LOGGERS)
    asyncio.run(serve(settings))
