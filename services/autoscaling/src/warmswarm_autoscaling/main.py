"""The one wiring point: settings → adapters → leader election → reconcile loop + HTTP API.

Every replica serves the API; only the holder of the Redis leader lock runs the reconcile loop
(lease.py decides, and cancels the loop the moment the lease can no longer be trusted).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Iterator

import aiodocker
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.middleware.base import RequestResponseEndpoint
from warmswarm_models import setting_name

from warmswarm_autoscaling.adapters.ec2_aiobotocore import LAUNCH_CLIENT_ATTEMPTS, AiobotocoreEc2, ec2_client
from warmswarm_autoscaling.adapters.lock_redis import redis_lock
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.api import create_app
from warmswarm_autoscaling.apply import LaunchTemplate
from warmswarm_autoscaling.lease import Lease, replica_id
from warmswarm_autoscaling.logs import configure_logging
from warmswarm_autoscaling.loop import Autoscaler, LoopTiming
from warmswarm_autoscaling.observe import InstanceCatalogue
from warmswarm_autoscaling.settings import AutoscalingSettings

log = logging.getLogger("warmswarm_autoscaling")


class _ApiServer(uvicorn.Server):
    """uvicorn without its own signal handling: SIGTERM belongs to the wiring point, which stops the loop first."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(settings: AutoscalingSettings) -> None:
    policy = settings.policy()
    template = LaunchTemplate(
        cluster=settings.cluster,
        image_id=settings.image_id,
        subnet_ids=dict(settings.subnet_ids),
        security_group_ids=tuple(settings.security_group_ids),
        iam_instance_profile=settings.iam_instance_profile,
        key_name=settings.key_name,
        node_join_addr=settings.node_join_addr,
        node_cache_path=settings.node_cache_path,
        device_wait_s=settings.device_wait_s,
    )
    timing = LoopTiming(
        resync_interval_s=settings.resync_interval_s,
        busy_resync_interval_s=settings.busy_resync_interval_s,
        debounce_s=settings.debounce_s,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    async with (
        aiodocker.Docker(url=settings.docker_host) as docker,
        ec2_client(settings.ec2_endpoint_url, settings.aws_region, settings.ec2_max_attempts) as client,
        ec2_client(settings.ec2_endpoint_url, settings.aws_region, LAUNCH_CLIENT_ATTEMPTS) as launch_client,
        # One Redis answer may take at most one renew interval: the lease retries on its own clock.
        redis_lock(settings.redis_url, timeout_s=settings.leader_renew_interval_s) as lock,
    ):
        ec2 = AiobotocoreEc2(client, launch_client=launch_client)
        swarm = AiodockerSwarm(docker)
        catalogue = InstanceCatalogue(ec2, policy.allowed_instance_types, settings.instance_types_ttl_s)
        autoscaler = Autoscaler(swarm, ec2, policy, template, catalogue, timing, dry_run=settings.dry_run)
        # A follower until the lock says otherwise: the API must not claim leadership before the
        # election. Set on the metrics directly: this is the initial state, not a change to log.
        autoscaler.metrics.set_leader(False)
        lease = Lease(
            lock,
            key=settings.lock_key(),
            replica=replica_id(),
            ttl_s=settings.leader_lock_ttl_s,
            renew_interval_s=settings.leader_renew_interval_s,
            on_change=autoscaler.set_leader,
        )
        # Ready means, for the leader, a successful cycle within a few resync periods.
        ops_token = None if settings.ops_token is None else settings.ops_token.get_secret_value()
        app = create_app(
            autoscaler, ready_within_s=3 * settings.resync_interval_s + 10, clock=time.time, ops_token=ops_token
        )
        _answer_ready_as_follower(app, lease)
        server = _ApiServer(
            uvicorn.Config(app, host=settings.http_host, port=settings.http_port, log_config=None, lifespan="off")
        )
        log.info(
            "autoscaler for cluster %r starting as replica %s; API on %s:%s; leader lock %s (ttl %g s)",
            settings.cluster,
            lease.replica,
            settings.http_host,
            settings.http_port,
            lease.key,
            settings.leader_lock_ttl_s,
        )
        api = asyncio.create_task(server.serve())
        try:
            # The loop runs only as a term of leadership: started when elected, cancelled when the
            # lease is lost; on SIGTERM it finishes its cycle and the lock is released.
            await lease.run(stop, autoscaler.run)
        finally:
            server.should_exit = True
            await api
    log.info("autoscaler stopped")


def _answer_ready_as_follower(app: FastAPI, lease: Lease) -> None:
    """/ready of a replica that is not the leader: ready while the lock store answers (within one ttl).

    A follower runs no cycles, so the leader's rule (a recent successful cycle) would call every
    follower unready and an orchestrator would restart the very replicas meant to take over. What a
    follower needs to be useful is to reach Redis: then it takes over within the ttl once the leader
    goes. The leader's /ready is api.py's rule, unchanged.
    """

    @app.middleware("http")
    async def ready_as_follower(request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path != "/ready" or lease.is_leader:
            return await call_next(request)
        ok = lease.healthy
        body = {"ready": ok, "leader": False, "lock_store_answers": ok, "leader_seen": lease.leader_seen}
        return JSONResponse(body, status_code=200 if ok else 503)


def run() -> None:
    try:
        settings = AutoscalingSettings()  # type: ignore[call-arg]  # required fields come from the environment
    except ValidationError as error:
        for problem in error.errors():
            message = str(problem["msg"]).removeprefix("Value error, ")
            if problem["loc"]:
                # The first element is the setting; the rest points inside it (a key of a JSON value).
                name = setting_name(AutoscalingSettings, "AUTOSCALING_", str(problem["loc"][0]))
                print(f"invalid setting {name}: {message}", file=sys.stderr)
            else:  # a check across settings: its message names them
                print(f"invalid settings: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(json_lines=settings.log_json)
    asyncio.run(serve(settings))
