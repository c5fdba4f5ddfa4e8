"""When the swarm adapter lists nodes again, against a stand-in Engine on loopback whose event stream the test drives:
so that an event that never comes, a stream cut by the server and the relist interval can be shown for sure."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import aiodocker
import pytest
from aiohttp import web
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm

NODE_ID = "n1"


class StandInEngine:
    """One node, its update, and an event stream that sends only what the test puts in it."""

    def __init__(self) -> None:
        self.version = 10
        self.labels: dict[str, str] = {}
        self.listings = 0
        self.services: list[dict[str, Any]] = []
        self.tasks: list[dict[str, Any]] = []
        self.service_listings = 0
        self.streams_opened = 0
        self.stream_open = asyncio.Event()
        self.events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()  # None ends the stream

    def node(self) -> dict[str, Any]:
        return {
            "ID": NODE_ID,
            "Version": {"Index": self.version},
            "Spec": {"Labels": dict(self.labels), "Role": "worker", "Availability": "active"},
            "Description": {"Hostname": "h1", "Resources": {"NanoCPUs": 2_000_000_000, "MemoryBytes": 2**30}},
            "Status": {"State": "ready", "Addr": "10.0.0.1"},
        }

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.removeprefix("/v1.47")
        if path == "/version":
            return web.json_response({"ApiVersion": "1.47", "Version": "27.3.1"})
        if path == "/nodes":
            self.listings += 1
            return web.Response(body=json.dumps([self.node()], separators=(",", ":")), content_type="application/json")
        if path == "/services":
            self.service_listings += 1
            return web.Response(body=json.dumps(self.services), content_type="application/json")
        if path == "/tasks":
            return web.Response(body=json.dumps(self.tasks), content_type="application/json")
        if path == f"/nodes/{NODE_ID}" and request.method == "GET":
            return web.json_response(self.node())
        if path == f"/nodes/{NODE_ID}/update":
            self.labels = dict((await request.json())["Labels"])
            self.version += 1
            return web.json_response({})  # and no event: the test shows the adapter does not wait for one
        if path == "/events":
            return await self._stream(request)
        return web.json_response({"message": f"not here: {request.method} {path}"}, status=501)

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        self.streams_opened += 1
        self.stream_open.set()
        try:
            while (event := await self.events.get()) is not None:
                await response.write(json.dumps(event).encode() + b"\n")
        finally:
            self.stream_open.clear()
        return response

    def relabel(self, key: str, value: str) -> None:
        """A write by another client: the store changes, the event is the test's to send or not."""
        self.labels[key] = value
        self.version += 1


@asynccontextmanager
async def engine() -> AsyncIterator[tuple[StandInEngine, aiodocker.Docker]]:
    stand_in = StandInEngine()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stand_in.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with aiodocker.Docker(url=f"tcp://{host}:{port}") as docker:
            yield stand_in, docker
    finally:
        stand_in.events.put_nowait(None)
        await runner.cleanup()


@asynccontextmanager
async def consumed(swarm: AiodockerSwarm, stand_in: StandInEngine) -> AsyncIterator[asyncio.Queue[str]]:
    """The adapter's event stream read in a task, as the reconciler's alarm reads it, once the stream is open."""
    seen: asyncio.Queue[str] = asyncio.Queue()

    async def consume() -> None:
        async for kind in swarm.events():
            seen.put_nowait(kind)

    task = asyncio.create_task(consume())
    try:
        await read_through(stand_in, seen)
        yield seen
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def read_through(stand_in: StandInEngine, seen: asyncio.Queue[str]) -> None:
    """Once a service event sent now came out of the adapter, its stream is open and read (nodes stay dirty or
    clean as they were: a service event says nothing of them)."""
    async with asyncio.timeout(5):
        await stand_in.stream_open.wait()
        stand_in.events.put_nowait({"Type": "service", "Action": "update"})
        assert await seen.get() == "service"


async def saw_the_end(caplog: pytest.LogCaptureFixture) -> None:
    """Until the adapter has seen its stream end (it says so in its log before its backoff)."""
    async with asyncio.timeout(5):
        while True:
            if any("event stream ended" in record.getMessage() for record in caplog.records):
                return
            await asyncio.sleep(0.01)


def labels(nodes: list[Any]) -> dict[str, str]:
    return dict(nodes[0].labels)


async def test_an_open_quiet_stream_lets_the_last_listing_stand() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in):
            first = await swarm.list_nodes()
            stand_in.relabel("unseen", "1")  # no event: the adapter cannot know, and does not list
            second = await swarm.list_nodes()

    assert stand_in.listings == 1
    assert second == first
    assert labels(second) == {}


async def test_a_node_event_makes_the_next_call_list() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in) as seen:
            await swarm.list_nodes()
            stand_in.relabel("a", "1")
            stand_in.events.put_nowait({"Type": "node", "Action": "update"})
            assert await asyncio.wait_for(seen.get(), 5) == "node"
            after = await swarm.list_nodes()
            again = await swarm.list_nodes()

    assert stand_in.listings == 2
    assert labels(after) == {"a": "1"}
    assert again == after


async def test_a_service_event_leaves_the_nodes_listing_standing() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in) as seen:
            await swarm.list_nodes()
            stand_in.events.put_nowait({"Type": "service", "Action": "update"})
            assert await asyncio.wait_for(seen.get(), 5) == "service"
            await swarm.list_nodes()

    assert stand_in.listings == 1


async def test_its_own_node_update_makes_the_next_call_list_without_an_event() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in) as seen:
            await swarm.list_nodes()
            await swarm.update_node(NODE_ID, labels={"own": "1"})
            after = await swarm.list_nodes()
            assert seen.empty()

    assert stand_in.listings == 2
    assert labels(after) == {"own": "1"}


async def test_a_reopened_stream_makes_the_next_call_list(caplog: pytest.LogCaptureFixture) -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in) as seen:
            await swarm.list_nodes()
            stand_in.events.put_nowait(None)  # the server ends the stream: changes meanwhile are never told
            await saw_the_end(caplog)
            stand_in.relabel("while-down", "1")
            during = await swarm.list_nodes()  # no stream: it lists
            stand_in.relabel("after-that", "1")  # still down (the adapter reopens after a backoff): no event, ever
            await read_through(stand_in, seen)
            after = await swarm.list_nodes()
            again = await swarm.list_nodes()

    assert stand_in.streams_opened == 2
    assert labels(during) == {"while-down": "1"}
    assert labels(after) == {"while-down": "1", "after-that": "1"}
    assert stand_in.listings == 3
    assert again == after


async def test_the_relist_interval_bounds_how_long_a_listing_stands() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker, relist_interval_s=0.2)
        async with consumed(swarm, stand_in):
            await swarm.list_nodes()
            stand_in.relabel("lost", "1")  # its event lost while the stream stayed open
            await swarm.list_nodes()
            await asyncio.sleep(0.25)
            after = await swarm.list_nodes()

    assert stand_in.listings == 2
    assert labels(after) == {"lost": "1"}


async def test_concurrent_calls_wait_for_one_listing() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in):
            first, second = await asyncio.gather(swarm.list_nodes(), swarm.list_nodes())

    assert stand_in.listings == 1
    assert first == second


async def test_while_the_consumer_holds_an_event_nobody_reads_the_stream_and_every_call_lists() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        events = swarm.events()
        try:
            async with asyncio.timeout(5):
                pulled = asyncio.create_task(anext(events))
                await stand_in.stream_open.wait()
                stand_in.events.put_nowait({"Type": "service", "Action": "update"})
                assert await pulled == "service"  # and the consumer does not ask for the next one
            await swarm.list_nodes()
            stand_in.relabel("held", "1")  # its event would wait in the stream, unread
            after = await swarm.list_nodes()
        finally:
            await events.aclose()

    assert stand_in.listings == 2
    assert labels(after) == {"held": "1"}


async def test_a_task_of_a_service_whose_event_has_not_come_has_the_services_listed_at_once() -> None:
    async with engine() as (stand_in, docker):
        swarm = AiodockerSwarm(docker)
        async with consumed(swarm, stand_in):
            await swarm.list_tasks()  # the stream's opening: the services are listed
            await swarm.list_tasks()  # nothing changed: they are not
            stand_in.services = [{"ID": "s1", "Version": {"Index": 5}, "Spec": {"Name": "web", "Labels": {}}}]
            stand_in.tasks = [
                {"ID": "t1", "Version": {"Index": 6}, "ServiceID": "s1", "DesiredState": "running", "Spec": {}}
            ]
            [task] = await swarm.list_tasks()  # the service's event is yet to come

    assert stand_in.service_listings == 2
    assert task.service_name == "web"
