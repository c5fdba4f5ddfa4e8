"""A scripted HTTP service on loopback for the `warmswarm` CLI's tests, and the CLI run as an operator runs it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner
from warmswarm_cli.app import app


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeService:
    """Answers (method, path) with a scripted (status, body); a str body is sent as it is, not as JSON."""

    url: str = ""
    routes: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    etags: dict[tuple[str, str], str] = field(default_factory=dict)  # an ETag header to answer with
    seen: list[Seen] = field(default_factory=list)


@pytest.fixture
def service() -> Iterator[FakeService]:
    with serving() as fake:
        yield fake


@pytest.fixture
def other_service() -> Iterator[FakeService]:
    """A second service, for a CLI given the URLs of several autoscaler replicas."""
    with serving() as fake:
        yield fake


@contextmanager
def serving() -> Iterator[FakeService]:
    fake = FakeService()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {key.lower(): value for key, value in self.headers.items()}
            fake.seen.append(
                Seen(self.command, url.path, parse_qs(url.query), headers, json.loads(raw) if raw else None)
            )
            status, body = fake.routes.get((self.command, url.path), (404, {"detail": "Not Found"}))
            payload = b"" if status == 204 else body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("content-length", str(len(payload)))
            if (self.command, url.path) in fake.etags:
                self.send_header("ETag", fake.etags[(self.command, url.path)])
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_PATCH = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    # The variables the CLI reads are cleared so the machine's own cannot change what is tested.
    clean = {"AUTOSCALING_URL": None, "DIRECTOR_URL": None, "OPS_TOKEN": None, **(env or {})}
    return CliRunner().invoke(app, list(args), env=clean)
