"""A TCP relay between this machine's loopback and a sandbox machine's network namespace, for the deployed stack.

The stack's containers run on the swarm manager, whose network namespace has no route to this machine's
loopback, where the sandbox's EC2 layer and Redis listen; and nothing here can reach the containers, whose
published ports need iptables, which the sandbox's daemons run without. One process relays both ways:

- inbound `ADDR:PORT=127.0.0.1:PORT`: listens inside the namespace (on the manager's own address, which the
  containers reach through their gateway bridge) and connects here, on loopback;
- outbound `127.0.0.1:PORT=SERVICE[.SLOT]:PORT`: listens here on loopback and connects inside the namespace to
  a running task of the swarm service (that replica, with a slot), at its address on the manager's gateway
  bridge, looked up through the Engine API at each connection (a restarted task has a new one).

A socket stays in the namespace it was made in, so one process holds both kinds: it enters the namespace
(setns) only to make a socket, and at once returns.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from warmswarm_sandbox.engine import Engine, EngineError

log = logging.getLogger("warmswarm_sandbox.relay")

_CLONE_NEWNET = 0x40000000
_CHUNK_BYTES = 65536
# The bridge a swarm container reaches its node through; its address there is routed in the node's namespace.
GATEWAY_BRIDGE = "docker_gwbridge"
SERVICE_LABEL = "com.docker.swarm.service.name"
TASK_LABEL = "com.docker.swarm.task.name"
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class Inbound:
    listen_host: str
    listen_port: int
    target_host: str
    target_port: int


@dataclass(frozen=True)
class Outbound:
    listen_host: str
    listen_port: int
    service: str
    slot: int | None
    target_port: int


def parse_inbound(text: str) -> Inbound:
    listen, _, target = text.partition("=")
    listen_host, _, listen_port = listen.rpartition(":")
    target_host, _, target_port = target.rpartition(":")
    return Inbound(listen_host, int(listen_port), target_host, int(target_port))


def parse_outbound(text: str) -> Outbound:
    listen, _, target = text.partition("=")
    listen_host, _, listen_port = listen.rpartition(":")
    task, _, target_port = target.rpartition(":")
    service, _, slot = task.partition(".")
    return Outbound(listen_host, int(listen_port), service, int(slot) if slot else None, int(target_port))


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"setns: {os.strerror(error)}")


@contextlib.contextmanager
def inside(netns: Path | None) -> Iterator[None]:
    """This thread in `netns` (None: where it is) for the time of the block; sockets made meanwhile stay there."""
    if netns is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(netns, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def _socket_in(netns: Path | None) -> socket.socket:
    with inside(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    return sock


def _listening_socket(netns: Path | None, host: str, port: int) -> socket.socket:
    sock = _socket_in(netns)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    return sock


def task_address(engine: Engine, service: str, slot: int | None) -> str | None:
    """The gateway-bridge address of a running container of the swarm service (of that slot); None if none runs."""
    filters = f'{{"label": ["{SERVICE_LABEL}={service}"], "status": ["running"]}}'
    containers = engine.get("/containers/json", query={"filters": filters})
    if slot is not None:
        containers = [c for c in containers if c["Labels"].get(TASK_LABEL, "").startswith(f"{service}.{slot}.")]
    if not containers:
        return None
    attached = engine.get(f"/networks/{GATEWAY_BRIDGE}").get("Containers") or {}
    for container in containers:
        found = attached.get(container["Id"])
        if found and found.get("IPv4Address"):
            return str(found["IPv4Address"]).split("/")[0]
    return None


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(_CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def _join(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    await asyncio.gather(_pump(client[0], upstream[1]), _pump(upstream[0], client[1]))


class Relay:
    """The listeners of one relay process; `start` binds them all, `serve_forever` relays until cancelled."""

    def __init__(self, netns: Path | None, docker_host: str | None, inbound: list[Inbound], outbound: list[Outbound]):
        self.netns = netns
        self.engine = Engine(docker_host, timeout_s=5.0) if docker_host else None
        self.inbound = inbound
        self.outbound = outbound
        self.servers: list[asyncio.Server] = []

    async def start(self) -> None:
        for route in self.inbound:
            sock = _listening_socket(self.netns, route.listen_host, route.listen_port)
            self.servers.append(await asyncio.start_server(self._inbound_handler(route), sock=sock))
        for out in self.outbound:
            sock = _listening_socket(None, out.listen_host, out.listen_port)
            self.servers.append(await asyncio.start_server(self._outbound_handler(out), sock=sock))

    async def serve_forever(self) -> None:
        await asyncio.gather(*(server.serve_forever() for server in self.servers))

    def _inbound_handler(self, route: Inbound) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.open_connection(route.target_host, route.target_port)
            except OSError as error:
                log.warning("inbound %s:%s: %s", route.target_host, route.target_port, error)
                writer.close()
                return
            await _join((reader, writer), upstream)

        return handle

    def _outbound_handler(self, route: Outbound) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await self._connect_to_task(route)
            except (OSError, EngineError) as error:
                log.warning("outbound %s: %s", route.service, error)
                writer.close()
                return
            await _join((reader, writer), upstream)

        return handle

    async def _connect_to_task(self, route: Outbound) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert self.engine is not None, "an outbound route needs --docker-host"
        address = await asyncio.to_thread(task_address, self.engine, route.service, route.slot)
        if address is None:
            raise ConnectionRefusedError(f"no running task of {route.service} (slot {route.slot})")
        sock = _socket_in(self.netns)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (address, route.target_port))
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)


async def _main(args: argparse.Namespace) -> None:
    netns = Path(args.netns) if args.netns else None
    relay = Relay(
        netns, args.docker_host, [parse_inbound(r) for r in args.inbound], [parse_outbound(r) for r in args.outbound]
    )
    await relay.start()
    if args.ready_file:
        # Once, before serving: nothing else runs on the loop yet.
        Path(args.ready_file).write_text("ready\n")  # noqa: ASYNC240
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    serving = asyncio.create_task(relay.serve_forever())
    await stop.wait()
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m warmswarm_sandbox.relay", description=__doc__)
    parser.add_argument("--netns", help="the network namespace's file (/run/netns/NAME); none: this one")
    parser.add_argument("--docker-host", help="unix://… of the daemon whose tasks outbound routes reach")
    parser.add_argument("--inbound", action="append", default=[], help="ADDR:PORT=HOST:PORT (listen inside)")
    parser.add_argument("--outbound", action="append", default=[], help="ADDR:PORT=SERVICE[.SLOT]:PORT (listen here)")
    parser.add_argument("--ready-file", help="written once every listener is bound")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
