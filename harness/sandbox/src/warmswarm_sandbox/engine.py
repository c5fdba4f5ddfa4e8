"""A minimal Docker Engine API client over a unix socket (stdlib only): what booting a node needs."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode


class EngineError(RuntimeError):
    """The Docker Engine answered with an error, or did not answer at all."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._socket_path)
        self.sock = sock


def socket_path_of(docker_host: str) -> str:
    if not docker_host.startswith("unix://"):
        raise ValueError(f"expected a unix:// docker host, got {docker_host!r}")
    return docker_host.removeprefix("unix://")


class Engine:
    """One daemon, addressed by its DOCKER_HOST (unix://…)."""

    def __init__(self, docker_host: str, *, timeout_s: float = 30.0) -> None:
        self.docker_host = docker_host
        self._socket_path = socket_path_of(docker_host)
        self._timeout_s = timeout_s

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> tuple[int, bytes]:
        url = path + ("?" + urlencode(query) if query else "")
        conn = _UnixConnection(self._socket_path, self._timeout_s)
        try:
            headers = {"Content-Type": content_type} if body is not None else {}
            conn.request(method, url, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except OSError as error:
            raise EngineError(f"{method} {path} on {self.docker_host}: {error}") from error
        finally:
            conn.close()

    def call(self, method: str, path: str, payload: Any = None, *, query: dict[str, str] | None = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        status, data = self.request(method, path, query=query, body=body)
        if status >= 400:
            raise EngineError(f"{method} {path} on {self.docker_host}: HTTP {status} {data.decode(errors='replace')}")
        return json.loads(data) if data.strip() else None

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Any:
        return self.call("GET", path, query=query)

    def post(self, path: str, payload: Any = None, *, query: dict[str, str] | None = None) -> Any:
        return self.call("POST", path, payload, query=query)

    def answers(self) -> bool:
        try:
            status, _ = self.request("GET", "/_ping")
        except EngineError:
            return False
        return status == 200

    def wait_until_up(self, timeout_s: float, *, still_booting: Callable[[], bool] | None = None) -> None:
        """Poll /_ping until it answers. still_booting() returning False (the daemon died) stops
        the wait early instead of burning the whole timeout."""
        deadline = time.monotonic() + timeout_s
        while not self.answers():
            if still_booting is not None and not still_booting():
                raise EngineError(f"the daemon behind {self.docker_host} exited while starting")
            if time.monotonic() >= deadline:
                raise EngineError(f"the daemon behind {self.docker_host} did not answer within {timeout_s} s")
            time.sleep(0.02)

    def import_image(self, tar_bytes: bytes, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        status, data = self.request(
            "POST",
            "/images/create",
            query={"fromSrc": "-", "repo": repo, "tag": tag},
            body=tar_bytes,
            content_type="application/x-tar",
        )
        # The answer is a stream of JSON progress messages; a failure may come with HTTP 200.
        if status >= 400 or b'"error"' in data:
            raise EngineError(f"import of {ref} into {self.docker_host} failed: {data.decode(errors='replace')}")
