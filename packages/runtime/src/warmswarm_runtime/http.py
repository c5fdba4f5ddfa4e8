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


def api_server(app: FastAPI, host: str, port: int) -> ApiServer:
    return ApiServer(uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off"))


def methods_of(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of the app takes at the request's path, for a 405's Allow header (Starlette names
    only those of the first route whose path matched)."""
    methods: set[str] = set()
    for route in app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)
