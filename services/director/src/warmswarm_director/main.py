"""The one wiring point: settings → Docker, Redis and autoscaler clients → Director → HTTP API under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

import aiodocker
import httpx
import redis.asyncio as redis
import uvicorn
from pydantic import ValidationError

from warmswarm_director.api import create_app
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.director import Director
from warmswarm_director.groups import GroupStore
from warmswarm_director.logs import configure_logging
from warmswarm_director.placement import PlacementConfig
from warmswarm_director.settings import DirectorSettings, setting_name
from warmswarm_director.swarm import Swarm

log = logging.getLogger("warmswarm_director")


class _ApiServer(uvicorn.Server):
    """uvicorn without its own signal handling: uvicorn re-raises SIGTERM once it has stopped, which would
    end the process before the clients below are closed; the wiring point asks it to exit instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(settings: DirectorSettings) -> None:
    placement = PlacementConfig(
        cache_mount_path=settings.cache_mount_path,
        node_cache_path=settings.node_cache_path,
        stop_grace_s=settings.stop_grace_s,
    )
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
            director = Director(
                Swarm(docker),
                GroupStore(redis_client),
                AutoscalerClient(http, settings.autoscaling_url, settings.autoscaling_timeout_s),
                placement,
            )
            app = create_app(director, ops_token=settings.ops_token.get_secret_value())
            server = _ApiServer(
                uvicorn.Config(app, host=settings.http_host, port=settings.http_port, log_config=None, lifespan="off")
            )

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


def load_settings() -> DirectorSettings:
    """The settings from the environment, or exit 2 after one line per invalid setting, naming its variable."""
    try:
        return DirectorSettings()  # type: ignore[call-arg]  # required fields come from the environment
    except ValidationError as error:
        for problem in error.errors():
            where = str(problem["loc"][0]) if problem["loc"] else ""
            message = str(problem["msg"]).removeprefix("Value error, ")
            print(f"invalid setting {setting_name(where)}: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def run() -> None:
    settings = load_settings()
    configure_logging(json_lines=settings.log_json)
    asyncio.run(serve(settings))
