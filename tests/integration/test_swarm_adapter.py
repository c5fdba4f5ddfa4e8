"""The swarm adapter against the sandbox's real swarm manager: nodes, updates, tasks, join info, events."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import aiodocker
import pytest
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.ports import SwarmError
from warmswarm_autoscaling.snapshot import Node, Task
from warmswarm_models import GPU, SERVICE_LABEL_CACHE_ENABLED, SERVICE_LABEL_CACHE_TTL_S, CachePolicy, Owner, Resources

T = TypeVar("T")

UNMET_CONSTRAINT = "node.labels.user_id==nobody-here"
_NANO = 1_000_000_000


# The only link to the sandbox: point these two at any swarm manager and an image its daemon has.
@pytest.fixture(scope="module")
def docker_host(endpoints: Any) -> str:
    return str(endpoints.docker_host)


@pytest.fixture(scope="module")
def image(endpoints: Any) -> str:
    return str(endpoints.sandbox_image)


@pytest.fixture(scope="module")
async def docker(docker_host: str) -> AsyncIterator[aiodocker.Docker]:
    async with aiodocker.Docker(url=docker_host) as client:
        yield client


@pytest.fixture
def swarm(docker: aiodocker.Docker) -> AiodockerSwarm:
    return AiodockerSwarm(docker)


@pytest.fixture
async def manager(docker: aiodocker.Docker) -> AsyncIterator[Node]:
    """The manager node; its labels and availability are put back as they were after the test."""
    info = await docker.system.info()
    node_id = str(info["Swarm"]["NodeID"])
    original = await docker.nodes.inspect(node_id=node_id)
    [node] = [n for n in await AiodockerSwarm(docker).list_nodes() if n.id == node_id]
    yield node
    for _ in range(10):
        current = await docker.nodes.inspect(node_id=node_id)
        try:
            await docker.nodes.update(node_id=node_id, version=current["Version"]["Index"], spec=original["Spec"])
            return
        except aiodocker.DockerError as error:
            if "out of sequence" not in error.message:
                raise
    pytest.fail(f"could not restore node {node_id}'s spec")


@pytest.fixture
async def create_service(
    docker: aiodocker.Docker, image: str
) -> AsyncIterator[Callable[..., Awaitable[tuple[str, str]]]]:
    """Creates services that never get a node (unmet constraint); removes them after the test."""
    created: list[str] = []

    async def create(
        *,
        reservations: Mapping[str, Any] | None = None,
        constraints: tuple[str, ...] = (UNMET_CONSTRAINT,),
        labels: Mapping[str, str] | None = None,
    ) -> tuple[str, str]:
        name = f"ws-test-{uuid.uuid4().hex[:8]}"
        service = await docker.services.create(
            {
                "ContainerSpec": {"Image": image, "Command": ["sleep", "3600"], "StopGracePeriod": _NANO},
                "Resources": {"Reservations": dict(reservations or {})},
                "Placement": {"Constraints": list(constraints)},
            },
            name=name,
            labels=dict(labels or {}),
        )
        created.append(str(service["ID"]))
        return str(service["ID"]), name

    yield create
    for service_id in created:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.services.delete(service_id)


async def eventually(read: Callable[[], Awaitable[T | None]], timeout_s: float = 15.0) -> T:
    """Polls until `read` returns something truthy; the swarm's scheduler works asynchronously."""
    async with asyncio.timeout(timeout_s):
        while True:
            if value := await read():
                return value
            # Docker has no task events to wait on: polling is the only way to see a task change.
            await asyncio.sleep(0.1)


async def scheduled_task(swarm: AiodockerSwarm, service_id: str) -> Task:
    """The service's task once the scheduler has said why it cannot place it."""

    async def read() -> Task | None:
        tasks = [t for t in await swarm.list_tasks() if t.service_id == service_id]
        return tasks[0] if tasks and tasks[0].err else None

    return await eventually(read)


async def test_list_nodes_shows_the_manager(swarm: AiodockerSwarm, manager: Node) -> None:
    nodes = await swarm.list_nodes()

    [listed] = [n for n in nodes if n.id == manager.id]
    assert listed.role == "manager"
    assert listed.state == "ready"
    assert listed.availability in {"active", "pause", "drain"}  # the sandbox drains its manager
    assert listed.hostname
    assert listed.resources.cpus > 0
    assert listed.resources.memory_bytes > 0
    assert all(n.role in {"manager", "worker"} for n in nodes)


async def test_update_node_merges_labels_and_sets_availability(swarm: AiodockerSwarm, manager: Node) -> None:
    await swarm.update_node(manager.id, labels={"ws-test.a": "1"})
    await swarm.update_node(manager.id, labels={"ws-test.b": "2"}, availability="pause")
    await swarm.update_node(manager.id, labels={"ws-test.a": ""})  # "" is a value like any other

    [node] = [n for n in await swarm.list_nodes() if n.id == manager.id]
    assert node.labels == {**manager.labels, "ws-test.a": "", "ws-test.b": "2"}
    assert node.availability == "pause"


async def test_update_node_removes_labels_and_merges_others_in_one_update(
    swarm: AiodockerSwarm, manager: Node, docker_host: str
) -> None:
    await swarm.update_node(manager.id, labels={"ws-test.owner": "alice", "ws-test.kept": "1"})
    seen: asyncio.Queue[str] = asyncio.Queue()

    async def node_events_until_quiet(quiet_s: float) -> int:
        count = 0
        with contextlib.suppress(TimeoutError):
            while True:
                async with asyncio.timeout(quiet_s):
                    count += await seen.get() == "node"
        return count

    # A client of its own: aiodocker keeps one event stream per client.
    async with aiodocker.Docker(url=docker_host) as watcher_client:

        async def consume() -> None:
            async for kind in AiodockerSwarm(watcher_client).events():
                seen.put_nowait(kind)

        consumer = asyncio.create_task(consume())
        try:
            # The stream opens asynchronously: keep causing node events until one arrives, then let it go quiet.
            async with asyncio.timeout(15):
                for poke in itertools.count():
                    await swarm.update_node(manager.id, labels={"ws-test.poke": str(poke)})
                    if await node_events_until_quiet(1.0):
                        break

            # "ws-test.never" is on no node: no error. The strip and the relabel land as one spec.
            await swarm.update_node(
                manager.id, labels={"ws-test.owner": "bob"}, remove_labels=("ws-test.kept", "ws-test.never")
            )
            writes = await node_events_until_quiet(1.5)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer

    [node] = [n for n in await swarm.list_nodes() if n.id == manager.id]
    assert {k: v for k, v in node.labels.items() if k in ("ws-test.owner", "ws-test.kept")} == {"ws-test.owner": "bob"}
    assert writes == 1  # one node event: one update of the node, not a removal then a merge


async def test_concurrent_updates_of_one_node_all_land(swarm: AiodockerSwarm, manager: Node) -> None:
    # All five read the same version; all but one are refused as out of sequence and must retry.
    await asyncio.gather(*(swarm.update_node(manager.id, labels={f"ws-test.c{i}": str(i)}) for i in range(5)))

    [node] = [n for n in await swarm.list_nodes() if n.id == manager.id]
    assert {k: v for k, v in node.labels.items() if k.startswith("ws-test.c")} == {
        f"ws-test.c{i}": str(i) for i in range(5)
    }


async def test_update_of_an_unknown_node_is_a_swarm_error(swarm: AiodockerSwarm) -> None:
    with pytest.raises(SwarmError, match="not in the swarm"):
        await swarm.update_node("nosuchnode0123456789abcde", labels={"a": "b"})
    with pytest.raises(SwarmError, match="availability"):
        await swarm.update_node("nosuchnode0123456789abcde", availability="asleep")


async def test_removing_an_unknown_node_is_fine(swarm: AiodockerSwarm) -> None:
    await swarm.remove_node("nosuchnode0123456789abcde")


async def test_task_pending_on_a_constraint_reads_back_exactly(
    swarm: AiodockerSwarm, manager: Node, create_service: Callable[..., Awaitable[tuple[str, str]]]
) -> None:
    # The scheduler only tests constraints on nodes that take tasks: with every node drained it
    # would say "not available for new tasks". The manager takes tasks for this test only.
    await swarm.update_node(manager.id, availability="active")
    asked_at = time.time()
    service_id, name = await create_service(reservations={"NanoCPUs": 250_000_000, "MemoryBytes": 48 * 2**20})

    task = await scheduled_task(swarm, service_id)

    assert task.service_name == name
    assert task.state == "pending"
    assert task.desired_state == "running"
    assert task.is_active
    assert "scheduling constraints not satisfied" in task.err
    # Read into the owner it pins the task to: the constraints the adapter read back, typed.
    assert (task.owner, task.constraints) == (Owner(user_id=UNMET_CONSTRAINT.partition("==")[2]), ())
    assert task.reservations == Resources(cpus=0.25, memory_bytes=48 * 2**20)
    assert task.node_id is None
    # Swarm's CreatedAt, read to epoch seconds: the sandbox's manager keeps this host's clock.
    assert task.created_at is not None
    assert asked_at - 1 <= task.created_at <= time.time() + 1


async def test_task_generic_resources_read_back(
    swarm: AiodockerSwarm, create_service: Callable[..., Awaitable[tuple[str, str]]]
) -> None:
    service_id, _ = await create_service(
        reservations={
            "NanoCPUs": _NANO,
            "MemoryBytes": 2**30,
            "GenericResources": [{"DiscreteResourceSpec": {"Kind": GPU, "Value": 2}}],
        }
    )

    task = await scheduled_task(swarm, service_id)

    assert task.reservations == Resources(cpus=1.0, memory_bytes=2**30, generic={GPU: 2})
    assert task.state == "pending"


async def test_task_carries_its_services_labels(
    swarm: AiodockerSwarm, create_service: Callable[..., Awaitable[tuple[str, str]]]
) -> None:
    # The director writes the owner's cache policy as service labels; the adapter reads them per task.
    policy = {SERVICE_LABEL_CACHE_ENABLED: "true", SERVICE_LABEL_CACHE_TTL_S: "3600", "ws-test.empty": ""}
    labelled_id, _ = await create_service(labels=policy)
    plain_id, _ = await create_service()

    await scheduled_task(swarm, labelled_id)
    await scheduled_task(swarm, plain_id)
    tasks = {t.service_id: t for t in await swarm.list_tasks()}

    assert tasks[labelled_id].cache == CachePolicy(enabled=True, ttl_s=3600)
    assert tasks[plain_id].cache == CachePolicy()


async def test_join_info_names_the_leader_and_the_worker_token(swarm: AiodockerSwarm, docker: aiodocker.Docker) -> None:
    info = await docker.system.info()

    join = await swarm.join_info()

    assert join.worker_token.startswith("SWMTKN-")
    host, _, port = join.manager_addr.rpartition(":")
    assert host
    assert port == "2377"
    assert join.manager_addr in [m["Addr"] for m in info["Swarm"]["RemoteManagers"]]


async def test_events_yield_service_and_node(
    swarm: AiodockerSwarm,
    manager: Node,
    create_service: Callable[..., Awaitable[tuple[str, str]]],
) -> None:
    seen: asyncio.Queue[str] = asyncio.Queue()

    async def consume() -> None:
        async for kind in swarm.events():
            seen.put_nowait(kind)

    async def wait_for(kind: str, poke: Callable[[], Awaitable[object]]) -> None:
        # The stream opens asynchronously: keep causing events until one arrives.
        async with asyncio.timeout(15):
            while True:
                await poke()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1):
                        while await seen.get() != kind:
                            pass
                        return

    consumer = asyncio.create_task(consume())
    try:
        await wait_for("service", create_service)
        labels = iter(range(1000))
        await wait_for("node", lambda: swarm.update_node(manager.id, labels={"ws-test.event": str(next(labels))}))
    finally:
        consumer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consumer


async def test_unreachable_daemon_is_a_swarm_error() -> None:
    async with aiodocker.Docker(url="unix:///nonexistent/docker.sock") as nowhere:
        with pytest.raises(SwarmError, match="DOCKER_HOST"):
            await AiodockerSwarm(nowhere).list_nodes()


async def test_events_outlive_an_unreachable_daemon(caplog: pytest.LogCaptureFixture) -> None:
    async with aiodocker.Docker(url="unix:///nonexistent/docker.sock") as nowhere:
        events = AiodockerSwarm(nowhere).events()
        with pytest.raises(TimeoutError):
            # Reopen attempts at about 0, 0.5 and 1.5 s: it keeps trying instead of ending or raising.
            await asyncio.wait_for(anext(events), timeout=2.0)
        await events.aclose()

    reopenings = [r for r in caplog.records if "reopening" in r.getMessage()]
    assert len(reopenings) >= 2
    assert "Cannot connect" in reopenings[0].getMessage()


async def test_finished_tasks_are_not_listed_so_history_costs_nothing(
    swarm: AiodockerSwarm, docker: aiodocker.Docker, create_service: Callable[..., Awaitable[tuple[str, str]]]
) -> None:
    """Each forced update replaces the service's task; the Engine keeps the old ones (desired shutdown) as
    history. The adapter asks the Engine for live tasks only: one task, however long the history."""
    service_id, _ = await create_service()
    await scheduled_task(swarm, service_id)
    updates = 4
    for update in range(1, updates + 1):
        # A new image is a new task; none is ever pulled: the constraint keeps every task off every node.
        await _update_image(docker, service_id, f"ws-history-{update}:never-pulled")

    async def history() -> list[Any] | None:
        everything = await docker.tasks.list(filters={"service": service_id})
        return everything if len(everything) == updates + 1 else None

    everything = await eventually(history)
    # The newest task is "ready" until the update makes it "running"; the others are history.
    live = [str(t["ID"]) for t in everything if t["DesiredState"] != "shutdown"]
    assert len(live) == 1

    listed = [t for t in await swarm.list_tasks() if t.service_id == service_id]
    assert [t.id for t in listed] == live
    assert listed[0].is_active


async def _update_image(docker: aiodocker.Docker, service_id: str, image: str) -> None:
    """The service's image changed; retried while swarm's own writes (its update status) move the version."""
    for _ in range(20):
        current = await docker.services.inspect(service_id)
        try:
            await docker.services.update(service_id, current["Version"]["Index"], image=image)
            return
        except aiodocker.DockerError as error:
            if "out of sequence" not in error.message:
                raise
            await asyncio.sleep(0.1)
    pytest.fail(f"service {service_id} kept changing while the test updated it")
