"""A Docker Engine API proxy in front of the sandbox's swarm manager that, on cue, kills a process after an answer."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Final

import aiohttp
from aiohttp import web
from yarl import URL

from warmswarm_sandbox.kill_switch import KillSwitch, kill_routes, text_field

log = logging.getLogger(__name__)

# A request body up to this size is read whole (and can be matched); a larger one (an image load) is streamed.
BODY_READ_LIMIT_BYTES: Final = 4 * 2**20
# The manager is local, and an events stream lasts as long as its client follows it: no total timeout.
UPSTREAM_TIMEOUT: Final = aiohttp.ClientTimeout(total=None, sock_connect=10)
# Headers of one hop; Host and Content-Length are passed on as the client sent them.
HOP_HEADERS: Final = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade"}
)
# The answer's length is set from upstream's through `content_length`, so the server frames it as upstream did.
_ANSWER_HEADERS_DROPPED: Final = HOP_HEADERS | {"content-length"}
_API_VERSION = re.compile(r"^/v\d+(?:\.\d+)?(?=/)")


def unversioned(path: str) -> str:
    """`/v1.41/nodes/x/update` → `/nodes/x/update`: kills match a route whatever API version the client speaks."""
    return _API_VERSION.sub("", path, count=1)


@dataclass(frozen=True)
class DockerCall:
    method: str
    path: str  # without the API version prefix and the query
    body: Any  # the JSON body; None without one, or if it is not JSON or too large to read


@dataclass(frozen=True)
class RequestMatch:
    """Which requests an armed kill counts: a method ("*": any), a path glob over the unversioned path
    (`/nodes/*/update`), and optionally a JSON body that must contain `body` ({"Availability": "drain"})."""

    method: str
    path: str
    body: Mapping[str, Any] | None = None

    def matches(self, call: DockerCall) -> bool:
        return (
            self.method in ("*", call.method.upper())
            and fnmatchcase(call.path, unversioned(self.path))
            and (self.body is None or _contains(call.body, self.body))
        )

    def as_json(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "body": self.body}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RequestMatch:
        wanted = body.get("body")
        if wanted is not None and not isinstance(wanted, dict):
            raise ValueError(f"'body' must be a JSON object the request's body contains, not {wanted!r}")
        return cls(text_field(body, "method", default="*").upper(), text_field(body, "path"), wanted)


def _contains(whole: Any, part: Any) -> bool:
    """Objects match when every key of `part` is in `whole` with a matching value; anything else by equality."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(key in whole and _contains(whole[key], v) for key, v in part.items())
    return bool(whole == part)


def _json_or_none(body: bytes | None) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def _docker_error(status: int, message: str) -> web.Response:
    # The Engine API's error shape: clients (aiodocker, the docker CLI) show the message.
    return web.json_response({"message": message}, status=status)


class DockerProxy:
    """Passes every Docker Engine API request to one daemon, answers streamed as they come (GET /events).

    Admin API (JSON) on its own loopback HTTP port, so no Docker API path is taken:
    GET/POST/DELETE /kill  {"method" ("*"), "path" (a glob), "body" (optional JSON subset), "pid", "after" (1),
                           "signal" ("SIGKILL"), "ok_only" (true)}: after the `after`-th answered request from now on
                           that matches, the answer is sent, then the signal to `pid` (kill_switch.kill_routes).
    A request body sent chunked, or over 4 MiB, is streamed on and never matches a "body".
    Hijacked streams (attach, exec start: `Connection: Upgrade`) are refused with 501.
    """

    def __init__(self, upstream_docker_host: str) -> None:
        if not upstream_docker_host.startswith("unix://"):
            raise ValueError(f"expected a unix:// docker host, got {upstream_docker_host!r}")
        self.upstream_socket = upstream_docker_host.removeprefix("unix://")
        self.kills: KillSwitch[DockerCall] = KillSwitch()
        self.docker_host: str | None = None
        self.admin_url: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._runners: list[web.AppRunner] = []

    async def start(self, socket_path: Path, admin_host: str = "127.0.0.1", admin_port: int = 0) -> tuple[str, str]:
        """Serves the Docker API on `socket_path` and the admin API on a TCP port; returns both URLs."""
        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=self.upstream_socket, limit=0),  # one per events follower
            timeout=UPSTREAM_TIMEOUT,
            auto_decompress=False,  # bytes as the daemon sent them
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),  # only the client's own
        )
        proxy = web.Application(client_max_size=BODY_READ_LIMIT_BYTES)
        proxy.add_routes([web.route("*", "/{tail:.*}", self._forward)])
        # A client that hangs up cancels its handler, which closes the request upstream (an events stream
        # the daemon would otherwise hold until its next event).
        proxy_runner = web.AppRunner(proxy, access_log=None, handler_cancellation=True)
        admin = web.Application()
        admin.add_routes(kill_routes("/kill", self.kills, RequestMatch.from_json))
        admin_runner = web.AppRunner(admin, access_log=None)
        for runner in (proxy_runner, admin_runner):
            await runner.setup()
            self._runners.append(runner)
        await asyncio.to_thread(socket_path.unlink, missing_ok=True)  # left by a proxy that was killed
        await web.UnixSite(proxy_runner, str(socket_path)).start()
        # The admin port last: once it answers, the Docker socket does too.
        await web.TCPSite(admin_runner, admin_host, admin_port).start()
        bound_host, bound_port = admin_runner.addresses[0][:2]
        self.docker_host, self.admin_url = f"unix://{socket_path}", f"http://{bound_host}:{bound_port}"
        log.info("Docker API proxy on %s for %s; admin on %s", socket_path, self.upstream_socket, self.admin_url)
        return self.docker_host, self.admin_url

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def kill_after(
        self, method: str, path: str, pid: int, *, body: Mapping[str, Any] | None = None, after: int = 1, **terms: Any
    ) -> str:
        """Once the `after`-th matching request from now (see RequestMatch) is answered, signal `pid`
        (KillSwitch.arm's `signum`, SIGKILL, and `ok_only` terms); the kill's id."""
        return self.kills.arm(RequestMatch(method.upper(), path, body), pid, after=after, **terms).id

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None, "DockerProxy.start() first"
        if "upgrade" in request.headers.get("Connection", "").lower():
            return _docker_error(501, "the sandbox's Docker proxy does not pass hijacked streams (attach, exec)")
        headers = [(key, value) for key, value in request.headers.items() if key.lower() not in HOP_HEADERS]
        length = request.content_length
        body: bytes | None = None
        data: bytes | aiohttp.StreamReader | None = None
        if request.body_exists and length is not None and length <= BODY_READ_LIMIT_BYTES:
            data = body = await request.read()
        elif request.body_exists:
            data = request.content  # sent on as it arrives, with the client's Content-Length if it gave one
        call = DockerCall(request.method, unversioned(request.path), _json_or_none(body))
        url = URL(f"http://docker{request.raw_path}", encoded=True)
        try:
            upstream = await self._session.request(request.method, url, headers=headers, data=data)
        except aiohttp.ClientError as error:
            return _docker_error(502, f"the swarm manager at {self.upstream_socket} does not answer: {error}")
        answered = {"method": call.method, "path": call.path, "status": upstream.status}
        # Counted before a byte of the answer is written, so whoever reads the answer sees the count final.
        due = self.kills.take(call, ok=200 <= upstream.status < 300)
        async with upstream:
            answer_headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in _ANSWER_HEADERS_DROPPED]
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason, headers=answer_headers)
            response.content_length = upstream.content_length  # None: chunked, as the daemon streams it
            try:
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            except BaseException:
                # The daemon answered, so the call took effect: a client gone mid-answer still gets its kill.
                self.kills.fire(due, answered, answer_sent=False)
                raise
        if due:
            await self.kills.deliver_then_fire(request, response, due, answered)
        else:
            await response.write_eof()
        return response


# --- the process the sandbox runs ---------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m warmswarm_sandbox.docker_proxy", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the daemon's DOCKER_HOST, unix://…")
    parser.add_argument("--socket", type=Path, required=True, help="the unix socket to serve the Docker API on")
    parser.add_argument("--admin-host", default="127.0.0.1")
    parser.add_argument("--admin-port", type=int, default=0, help="0 picks a free port; the URLs are printed")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(DockerProxy(args.upstream), args.socket, args.admin_host, args.admin_port))


async def _serve(proxy: DockerProxy, socket_path: Path, admin_host: str, admin_port: int) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    docker_host, admin_url = await proxy.start(socket_path, admin_host, admin_port)
    print(docker_host, admin_url, flush=True)
    try:
        await stopping.wait()
    finally:
        await proxy.stop()


if __name__ == "__main__":
    main()
