"""The stack's relay across network namespaces: a listener made inside a namespace serves there, and relays here."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from warmswarm_sandbox.host import NETNS_DIR, delete_netns
from warmswarm_sandbox.procs import free_tcp_port
from warmswarm_sandbox.relay import Inbound, Relay, inside, parse_inbound, parse_outbound


@pytest.fixture
def netns() -> Iterator[Path]:
    name = f"wsrelay-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield NETNS_DIR / name
    finally:
        delete_netns(name)


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"echo:" + await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


async def ask(port: int, netns: Path | None) -> bytes:
    # Only the socket is made inside: the thread must not stay there across an await, where the relay runs too.
    with inside(netns):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"hello")
    await writer.drain()
    answer = await reader.read(100)
    writer.close()
    return answer


def test_routes_are_read_from_the_command_line() -> None:
    assert parse_inbound("10.7.0.2:4100=127.0.0.1:41001") == Inbound("10.7.0.2", 4100, "127.0.0.1", 41001)
    outbound = parse_outbound("127.0.0.1:5000=warmswarm_autoscaling.2:8000")
    assert (outbound.service, outbound.slot, outbound.target_port) == ("warmswarm_autoscaling", 2, 8000)
    assert parse_outbound("127.0.0.1:5001=warmswarm_director:8001").slot is None


async def test_an_inbound_route_listens_inside_the_namespace_and_connects_here(netns: Path, echo_port: int) -> None:
    port = free_tcp_port()
    relay = Relay(netns, None, [Inbound("127.0.0.1", port, "127.0.0.1", echo_port)], [])
    await relay.start()
    serving = asyncio.create_task(relay.serve_forever())
    try:
        # Inside, the port reaches this namespace's echo server; here, nothing listens on it.
        assert await ask(port, netns) == b"echo:hello"
        with pytest.raises(ConnectionRefusedError):
            await ask(port, None)
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving
