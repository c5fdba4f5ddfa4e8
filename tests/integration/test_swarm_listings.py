"""When the swarm adapter lists again, against the sandbox's real swarm manager: nodes and services after an event,
a reopened stream or our own write (and always without a stream), tasks every cycle but decoded only when changed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiodocker
import pytest
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.adapters.swarm_listings import decoded, elements_in, engine_chunks
from warmswarm_autoscaling.snapshot import Node, Task

T = TypeVar("T")

_NANO = 1_000_000_000
QUIET_S = 1.0


@pytest.fixture(scope="module")
async def docker(endpoints: Any) -> AsyncIterator[aiodocker.Docker]:
    async with aiodocker.Docker(url=str(endpoints.docker_host)) as client:
        yield client


@pytest.fixture(scope="module")
async def other_client(endpoints: Any) -> AsyncIterator[aiodocker.Docker]:
    """Another Docker client: its writes reach the adapter as the Engine's events, not as its own."""
    async with aiodocker.Docker(url=str(endpoints.docker_host)) as client:
        yield client


@pytest.fixture
def swarm(docker: aiodocker.Docker) -> AiodockerSwarm:
    return AiodockerSwarm(docker)


@pytest.fixture
async def manager_id(docker: aiodocker.Docker) -> AsyncIterator[str]:
    """The manager node's id; its spec is put back as it was after the test."""
    node_id = str((await docker.system.info())["Swarm"]["NodeID"])
    original = await docker.nodes.inspect(node_id=node_id)
    yield node_id
    for _ in range(10):
        current = await docker.nodes.inspect(node_id=node_id)
        try:
            await docker.nodes.update(node_id=node_id, version=current["Version"]["Index"], spec=original["Spec"])
            return
        except aiodocker.DockerError as error:
            if "out of sequence" not in error.message:
                raise
    pytest.fail(f"could not restore node {node_id}'s spec")


async def relabel(client: aiodocker.Docker, node_id: str, key: str, value: str) -> None:
    """A label written by a client that is not the adapter (retried while the manager moves the version)."""
    for _ in range(10):
        current = await client.nodes.inspect(node_id=node_id)
        spec = dict(current["Spec"])
        spec["Labels"] = {**(spec.get("Labels") or {}), key: value}
        try:
            await client.nodes.update(node_id=node_id, version=current["Version"]["Index"], spec=spec)
            return
        except aiodocker.DockerError as error:
            if "out of sequence" not in error.message:
                raise
    pytest.fail(f"node {node_id} kept changing while the test relabelled it")


@pytest.fixture
async def parked_service(docker: aiodocker.Docker, endpoints: Any) -> AsyncIterator[str]:
    """A service whose one task never gets a node (unmet constraint); removed after the test."""
    service = await docker.services.create(
        {
            "ContainerSpec": {"Image": str(endpoints.sandbox_image), "Command": ["sleep", "3600"]},
            "Placement": {"Constraints": ["node.labels.user_id==nobody-here"]},
            "Resources": {"Reservations": {"NanoCPUs": _NANO // 4}},
        },
        name=f"ws-test-{uuid.uuid4().hex[:8]}",
    )
    yield str(service["ID"])
    with contextlib.suppress(aiodocker.DockerError):
        await docker.services.delete(str(service["ID"]))


async def eventually(read: Callable[[], Awaitable[T | None]], timeout_s: float = 15.0) -> T:
    """Polls until `read` returns something; the swarm's scheduler works asynchronously, without task events."""
    async with asyncio.timeout(timeout_s):
        while True:
            if value := await read():
                return value
            await asyncio.sleep(0.1)


async def scheduled(swarm: AiodockerSwarm, service_id: str) -> list[Task]:
    """The service's tasks once the scheduler has said why it cannot place them."""

    async def read() -> list[Task] | None:
        tasks = [t for t in await swarm.list_tasks() if t.service_id == service_id]
        return tasks if tasks and all(t.err for t in tasks) else None

    return await eventually(read)


def label(nodes: list[Node], node_id: str, key: str) -> str | None:
    [node] = [n for n in nodes if n.id == node_id]
    return node.labels.get(key)


class Consumer:
    """Reads the adapter's event stream in a task, as the reconciler's alarm does; the test sees each kind."""

    def __init__(self, swarm: AiodockerSwarm) -> None:
        self.seen: asyncio.Queue[str] = asyncio.Queue()
        self._swarm = swarm
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Consumer:
        self._task = asyncio.create_task(self._consume())
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _consume(self) -> None:
        async for kind in self._swarm.events():
            self.seen.put_nowait(kind)

    async def quiet(self, quiet_s: float = QUIET_S) -> int:
        """Waits until no event came for quiet_s; how many node events came meanwhile."""
        count = 0
        with contextlib.suppress(TimeoutError):
            while True:
                async with asyncio.timeout(quiet_s):
                    count += await self.seen.get() == "node"
        return count

    async def opened(self, poke: Callable[[str], Awaitable[None]]) -> None:
        """The stream opens asynchronously: cause node events until one comes back, then let it go quiet."""
        async with asyncio.timeout(15):
            for count in itertools.count():
                await poke(str(count))
                if await self.quiet():
                    return


async def test_with_the_stream_read_nodes_are_listed_again_only_after_a_node_event(
    swarm: AiodockerSwarm, other_client: aiodocker.Docker, manager_id: str
) -> None:
    async with Consumer(swarm) as consumer:
        await consumer.opened(lambda n: relabel(other_client, manager_id, "ws-test.poke", n))
        await swarm.list_nodes()  # the stream's opening made the last listing stale: this one lists
        listed = swarm.listed["nodes"]

        again = await swarm.list_nodes()
        assert swarm.listed["nodes"] == listed  # nothing changed since, and the stream says so

        await relabel(other_client, manager_id, "ws-test.other", "1")
        assert await consumer.quiet() == 1
        after = await swarm.list_nodes()

    assert swarm.listed["nodes"] == listed + 1
    assert label(again, manager_id, "ws-test.other") is None
    assert label(after, manager_id, "ws-test.other") == "1"


async def test_without_an_event_stream_every_call_lists(
    swarm: AiodockerSwarm, other_client: aiodocker.Docker, manager_id: str
) -> None:
    before = await swarm.list_nodes()
    await relabel(other_client, manager_id, "ws-test.unwatched", "1")
    after = await swarm.list_nodes()

    assert swarm.listed["nodes"] == 2
    assert label(before, manager_id, "ws-test.unwatched") is None
    assert label(after, manager_id, "ws-test.unwatched") == "1"


async def test_a_stream_that_ended_makes_every_call_list_again(
    swarm: AiodockerSwarm, other_client: aiodocker.Docker, manager_id: str
) -> None:
    async with Consumer(swarm) as consumer:
        await consumer.opened(lambda n: relabel(other_client, manager_id, "ws-test.poke", n))
        await swarm.list_nodes()
    listed = swarm.listed["nodes"]

    await swarm.list_nodes()
    await swarm.list_nodes()

    assert swarm.listed["nodes"] == listed + 2


async def test_after_its_own_node_update_the_next_call_lists(
    swarm: AiodockerSwarm, other_client: aiodocker.Docker, manager_id: str
) -> None:
    async with Consumer(swarm) as consumer:
        await consumer.opened(lambda n: relabel(other_client, manager_id, "ws-test.poke", n))
        await swarm.list_nodes()
        listed = swarm.listed["nodes"]

        await swarm.update_node(manager_id, labels={"ws-test.own": "1"})
        # The real Engine's node event often comes before the update's answer: that the adapter does not wait for
        # it is shown with a stand-in Engine that never sends it (tests/unit/test_swarm_freshness.py).
        after = await swarm.list_nodes()

    assert swarm.listed["nodes"] == listed + 1
    assert label(after, manager_id, "ws-test.own") == "1"


async def test_unchanged_tasks_are_the_same_readings_and_a_changed_one_is_read_afresh(
    swarm: AiodockerSwarm, docker: aiodocker.Docker, manager_id: str, parked_service: str
) -> None:
    [task] = await scheduled(swarm, parked_service)
    first = await swarm.list_tasks()
    second = await swarm.list_tasks()
    assert [id(t) for t in second] == [id(t) for t in first]  # the same answer: the same readings
    assert task in first

    # The manager's availability flipped: the scheduler says anew why it cannot place the task (same task,
    # a new version and a new reason).
    node = await docker.nodes.inspect(node_id=manager_id)
    flipped = "active" if node["Spec"]["Availability"] != "active" else "drain"
    spec = {**node["Spec"], "Availability": flipped}
    await docker.nodes.update(node_id=manager_id, version=node["Version"]["Index"], spec=spec)

    async def read_again() -> Task | None:
        [again] = [t for t in await swarm.list_tasks() if t.service_id == parked_service]
        return again if again.err != task.err else None

    changed = await eventually(read_again)

    assert changed.id == task.id
    assert changed is not task
    assert changed.err


@pytest.mark.parametrize("path", ["nodes", "services", "tasks"])
async def test_the_engines_answers_split_into_their_elements(
    swarm: AiodockerSwarm, docker: aiodocker.Docker, parked_service: str, path: str
) -> None:
    """The Engine writes its answers as the fast reading expects them (each element starting with its ID and
    version); it decodes each element as the slow one does."""
    await scheduled(swarm, parked_service)  # a node, a service and a task at least
    chunks = await engine_chunks(docker, path, {})  # as the Engine sent them, split where its writes split them
    body = b"".join(chunks)

    fast = [(object_id, version, dict(load())) for object_id, version, load in elements_in(chunks)]
    slow = [(object_id, version, dict(load())) for object_id, version, load in decoded(body)]

    assert fast
    assert fast == slow
    assert [raw for _, _, raw in fast] == json.loads(body)
