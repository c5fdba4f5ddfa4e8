"""Serving a service's API with uvicorn, leaving SIGTERM to the service's own wiring point."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI


class ApiServer(uvicorn.Server):
    """uvicorn without its own signal handling: it would re-raise SIGTERM once stopped, ending the process
    before the service has stopped its loop and closed its clients; the service sets `should_exit` instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def api_server(app: FastAPI, host: str, port: int) -> ApiServer:
    return ApiServer(uvicorn.Config(app, host=host, port=port, log_config=None, lifespan="off"))
