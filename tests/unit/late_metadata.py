"""A late EC2 instance metadata service on loopback (IMDSv2: a PUT for a session token, then GETs with it): refused
for a while, then its first token request hangs longer than a boot script's try, then it answers."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

SESSION_TOKEN = "session-token"
# A boot script's curl gives up on one try after 5 s (--max-time 5).
HANG_S = 6.0


@dataclass
class LateMetadata:
    """What it serves (meta-data paths to bodies; others are 404) and what happened."""

    url: str
    answers: dict[str, str]
    hung: threading.Event = field(default_factory=threading.Event)
    served: list[str] = field(default_factory=list)


@contextmanager
def late_metadata_service(answers: dict[str, str], *, refused_s: float = 2.0) -> Iterator[LateMetadata]:
    """The service at a loopback port nobody listens on for `refused_s` (connections refused); then its first token
    request hangs HANG_S; then it answers `answers` ({"tags/instance/warmswarm:scrub": "pending-1.2"})."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    late = LateMetadata(url=f"http://127.0.0.1:{port}", answers=answers)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            if self.path != "/latest/api/token":
                self._answer(404, "")
            elif not late.hung.is_set():
                late.hung.set()
                time.sleep(HANG_S)
                self._answer(200, SESSION_TOKEN)
            else:
                self._answer(200, SESSION_TOKEN)

        def do_GET(self) -> None:
            path = self.path.removeprefix("/latest/meta-data/")
            if self.headers.get("X-aws-ec2-metadata-token") != SESSION_TOKEN:
                self._answer(401, "")
            elif path in late.answers:
                late.served.append(path)
                self._answer(200, late.answers[path])
            else:
                self._answer(404, "")

        def _answer(self, status: int, body: str) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    opening = threading.Timer(refused_s, server.serve_forever)
    opening.start()
    try:
        yield late
    finally:
        server.shutdown()
        opening.join()
        server.server_close()
