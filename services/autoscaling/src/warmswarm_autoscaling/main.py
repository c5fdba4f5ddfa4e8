"""The one wiring point: settings → adapters → reconcile loop + HTTP API."""

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
from pydantic import ValidationError

from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2, ec2_client
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.api import create_app
from warmswarm_autoscaling.apply import LaunchTemplate
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
    ):
        ec2 = AiobotocoreEc2(client)
        swarm = AiodockerSwarm(docker)
        catalogue = InstanceCatalogue(ec2, policy.allowed_instance_types, settings.instance_types_ttl_s)
        autoscaler = Autoscaler(swarm, ec2, policy, template, catalogue, timing)
        # Ready means a successful cycle within a few resync periods.
        app = create_app(autoscaler, ready_within_s=3 * settings.resync_interval_s + 10, clock=time.time)
        server = _ApiServer(
            uvicorn.Config(app, host=settings.http_host, port=settings.http_port, log_config=None, lifespan="off")
        )
        log.info(
            "autoscaler for cluster %r starting; API on %s:%s", settings.cluster, settings.http_host, settings.http_port
        )
        api = asyncio.create_task(server.serve())
        try:
            await autoscaler.run(stop)
        finally:
            server.should_exit = True
            await api
    log.info("autoscaler stopped")


def run() -> None:
    try:
        settings = AutoscalingSettings()  # type: ignore[call-arg]  # required fields come from the environment
    except ValidationError as error:
        for problem in error.errors():
            where = ".".join(str(p) for p in problem["loc"]) or "settings"
            print(f"invalid setting AUTOSCALING_{where.upper()}: {problem['msg']}", file=sys.stderr)
        raise SystemExit(2) from None
    configure_logging(json_lines=settings.log_json)
    asyncio.run(serve(settings))
