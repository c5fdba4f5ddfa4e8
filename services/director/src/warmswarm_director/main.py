"""The one wiring point: settings → Docker, Redis and autoscaler clients → Director → HTTP API under uvicorn.

`build_app` puts the director together from ports (the tests give it in-memory fakes); `serve` opens the
real clients and serves it.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

import aiodocker
import httpx
import redis.asyncio as redis
from fastapi import FastAPI
from warmswarm_runtime.http import api_server
from warmswarm_runtime.logs import configure_logging
from warmswarm_runtime.settings import load_settings

from warmswarm_director.api import create_app
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.director import Director
from warmswarm_director.groups import GroupStore
from warmswarm_director.metrics import SessionMetrics, Sessions
from warmswarm_director.placement import PlacementConfig
from warmswarm_director.ports import AutoscalerPort, GroupStorePort, SwarmPort
from warmswarm_director.settings import ENV_PREFIX, DirectorSettings
from warmswarm_director.swarm import Swarm

log = logging.getLogger("warmswarm_director")

# Per-request lines say nothing an operator acts on; errors still come through.
_QUIET_LOGGERS = ("uvicorn.access", "httpx")


def build_app(
    settings: DirectorSettings, *, swarm: SwarmPort, groups: GroupStorePort, autoscaler: AutoscalerPort
) -> FastAPI:
    placement = PlacementConfig(
        cache_mount_path=settings.cache_mount_path,
        node_cache_path=settings.node_cache_path,
        stop_grace_s=settings.stop_grace_s,
    )
    # Sessions already running when this process started were observed by an earlier one (if any).
    director = Director(
        swarm,
        groups,
        autoscaler,
        placement,
        Sessions(SessionMetrics(), since=time.time()),
        strict_groups=settings.strict_groups,
    )
    return create_app(
        director, ops_token=settings.ops_token.get_secret_value(), api_token=settings.api_token.get_secret_value()
    )


async def serve(settings: DirectorSettings) -> None:
    # Without timeouts a Redis that stops answering would hold every request (and /ready) forever.
    redis_client = redis.from_url(
        settings.redis_url, socket_connect_timeout=settings.redis_timeout_s, socket_timeout=settings.redis_timeout_s
    )
    try:
        # trust_env=False: the autoscaler is a service next to this one; a proxy from the environment
        # would only be in the way.
        async with (
            aiodocker.Docker(url=settings.docker_host) as docker,
            httpx.AsyncClient(trust_env=False) as http,
        ):
            app = build_app(
                settings,
                swarm=Swarm(docker),
                groups=GroupStore(redis_client),
                autoscaler=AutoscalerClient(
                    http,
                    settings.autoscaling_url,
                    timeout_s=settings.autoscaling_timeout_s,
                    ops_token=settings.ops_token.get_secret_value(),
                ),
            )
            server = api_server(app, settings.http_host, settings.http_port)

            def stop() -> None:
                # uvicorn finishes the requests in flight, then serve() returns.
                server.should_exit = True

            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop)
            log.info(
                "director starting; API on %s:%s, autoscaler %s",
                settings.http_host,
                settings.http_port,
                settings.autoscaling_url or "not configured",
            )
            await server.serve()
    finally:
        await redis_client.aclose()
    log.info("director stopped")


def run() -> None:
    settings = load_settings(DirectorSettings, ENV_PREFIX)
    configure_logging(json_lines=settings.log_json, quiet=_QUIET_LOGGERS)
    asyncio.run(serve(settings))
