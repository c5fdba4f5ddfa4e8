"""Serving a service's API with uvicorn (SIGTERM left to the service's own wiring point), and what a 405 allows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI, Request
from starlette.routing import Match


class ApiServer(uvicorn.Server):
    """uvicorn without its own signal handling: it would re-raise SIGTERM once stopped, ending the process
    before the service has stopped its loop and closed its clients; the service sets `should_exit` instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


# How long an idle kept-alive connection stays open. uvicorn's default (5 s) equals httpx's pool expiry (5 s): a
# client that sends on a pooled connection the moment the server closes it gets a ReadError, and a POST is not
# retried (the demo's warm act failed so, 5.0 s after its last request). Servers keep them well past clients' expiry.
KEEP_ALIVE_S = 65


def api_server(app: FastAPI, host: str, port: int) -> ApiServer:
    config = uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off", timeout_keep_alive=KEEP_ALIVE_S)
    return ApiServer(config)


def methods_of(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of the app takes at the request's path, for a 405's Allow header (Starlette names
    only those of the first route whose path matched)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)
