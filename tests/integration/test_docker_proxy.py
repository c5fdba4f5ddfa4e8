"""The sandbox's Docker API proxy: the manager's API passes through it, and an armed kill fires after its answer."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import aiodocker
import aiohttp
import pytest
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.node import ENGINE_LABEL_INSTANCE_ID

T = TypeVar("T")

PROXY_NAME = "docker-proxy-test"
AMI = "ami-12345678"  # moto accepts any image id
TEST_LABEL = "ws-test.proxy"
JOIN_TIMEOUT_S = 60.0
DEATH_TIMEOUT_S = 10.0
EVENTS_TIMEOUT_S = 15.0


@pytest.fixture(scope="module")
def proxy(sandbox: Sandbox) -> Iterator[tuple[str, str]]:
    """(DOCKER_HOST, admin URL) of a proxy in front of the session sandbox's swarm manager."""
    docker_host, admin_url = sandbox.start_docker_proxy(PROXY_NAME)
    yield docker_host, admin_url
    sandbox.kill(PROXY_NAME)


@pytest.fixture(scope="module")
async def docker(proxy: tuple[str, str]) -> AsyncIterator[aiodocker.Docker]:
    async with aiodocker.Docker(url=proxy[0]) as client:
        yield client


@pytest.fixture(scope="module")
async def direct(endpoints: Endpoints) -> AsyncIterator[aiodocker.Docker]:
    """The manager itself, to see what the calls through the proxy did."""
    async with aiodocker.Docker(url=endpoints.docker_host) as client:
        yield client


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """The throwaway process a kill is armed on."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def admin(admin_url: str, method: str, body: Mapping[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"{admin_url}/kill",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


async def eventually(what: str, probe: Callable[[], Awaitable[T | None]], timeout_s: float) -> T:
    deadline_s = time.monotonic() + timeout_s
    while (found := await probe()) is None:
        assert time.monotonic() < deadline_s, f"timed out after {timeout_s} s waiting for {what}"
        await asyncio.sleep(0.2)
    return found


async def update_node(client: aiodocker.Docker, node_id: str, **spec: Any) -> None:
    current = await client.nodes.inspect(node_id=node_id)
    await client.nodes.update(node_id=node_id, version=current["Version"]["Index"], spec={**current["Spec"], **spec})


async def test_the_managers_api_passes_through(
    docker: aiodocker.Docker, direct: aiodocker.Docker, proxy: tuple[str, str]
) -> None:
    assert (await docker.version())["ApiVersion"] == (await direct.version())["ApiVersion"]
    assert sorted(n["ID"] for n in await docker.nodes.list()) == sorted(n["ID"] for n in await direct.nodes.list())
    manager_id = str((await docker.system.info())["Swarm"]["NodeID"])
    assert (await docker.nodes.inspect(node_id=manager_id))["Spec"] == (await direct.nodes.inspect(node_id=manager_id))[
        "Spec"
    ]

    # Without an API version prefix too, the daemon's headers included.
    socket_path = proxy[0].removeprefix("unix://")
    async with (
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket_path)) as raw,
        raw.get("http://docker/nodes") as answer,
    ):
        assert answer.status == 200
        assert answer.headers["Api-Version"] == (await direct.version())["ApiVersion"]
        assert {n["ID"] for n in await answer.json()} == {n["ID"] for n in await direct.nodes.list()}

    # GET /events is a stream: each update through the proxy comes back through it while the stream stays open.
    subscriber = docker.events.subscribe(filters={"type": ["node"]})  # type: ignore[no-untyped-call]
    updates: list[str] = []
    try:
        async with asyncio.timeout(EVENTS_TIMEOUT_S):
            while len(updates) < 3:
                value = uuid.uuid4().hex
                current = await docker.nodes.inspect(node_id=manager_id)
                await update_node(docker, manager_id, Labels={**current["Spec"].get("Labels", {}), TEST_LABEL: value})
                # The stream opens asynchronously: an update made before it did is not seen; poke again.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1):
                        while True:
                            event = await subscriber.get()
                            assert event is not None, "the event stream ended"
                            if event["Actor"]["ID"] == manager_id and event["Action"] == "update":
                                updates.append(value)
                                break
        shown = await direct.nodes.inspect(node_id=manager_id)
        assert shown["Spec"]["Labels"][TEST_LABEL] == updates[-1]
    finally:
        await docker.events.stop()  # type: ignore[no-untyped-call]
        current = await direct.nodes.inspect(node_id=manager_id)
        labels = {k: v for k, v in current["Spec"].get("Labels", {}).items() if k != TEST_LABEL}
        await update_node(direct, manager_id, Labels=labels)


@pytest.fixture
async def drained_worker(ec2: Any, endpoints: Endpoints, direct: aiodocker.Docker) -> AsyncIterator[str]:
    """A machine that joined the swarm drained, as node_boot.sh joins it; its node id. Gone after the test."""
    token = (await direct.swarm.inspect())["JoinTokens"]["Worker"]
    script = (
        "#!/bin/sh\nset -eu\n"
        f"docker swarm join --availability drain --token {token} "
        '--advertise-addr "$WARMSWARM_NODE_ADDR" --listen-addr "$WARMSWARM_NODE_ADDR:2377" '
        f"{endpoints.swarm_manager_addr}\n"
    )
    launched = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro", UserData=script)
    instance_id = launched["Instances"][0]["InstanceId"]

    async def joined() -> str | None:
        for node in await direct.nodes.list():
            labels = node["Description"].get("Engine", {}).get("Labels") or {}
            if labels.get(ENGINE_LABEL_INSTANCE_ID) == instance_id and node["Status"]["State"] == "ready":
                return str(node["ID"])
        return None

    node_id: str | None = None
    try:
        node_id = await eventually(f"{instance_id} to join", joined, JOIN_TIMEOUT_S)
        yield node_id
    finally:
        ec2.terminate_instances(InstanceIds=[instance_id])
        if node_id is not None:
            await direct.nodes.remove(node_id=node_id, force=True)


async def test_a_kill_on_drain_fires_once_the_node_is_drained_and_not_on_activation(
    docker: aiodocker.Docker,
    direct: aiodocker.Docker,
    proxy: tuple[str, str],
    drained_worker: str,
    sleeper: subprocess.Popen[bytes],
) -> None:
    _, admin_url = proxy
    when = {"method": "POST", "path": "/nodes/*/update", "body": {"Availability": "drain"}}
    kill_id = admin(admin_url, "POST", {**when, "pid": sleeper.pid})["id"]
    try:
        # What the autoscaler does first: label the node for its owner and activate it, in one update.
        await update_node(docker, drained_worker, Labels={"user_id": "u-kill"}, Availability="active")
        spec = (await direct.nodes.inspect(node_id=drained_worker))["Spec"]
        assert (spec["Availability"], spec["Labels"]) == ("active", {"user_id": "u-kill"})
        # The count is taken before the answer is written: had the update matched, the kill would be gone.
        listing = admin(admin_url, "GET")
        assert [(k["id"], k["when"], k["remaining"]) for k in listing["armed"]] == [(kill_id, when, 1)]
        assert listing["fired"] == []
        assert sleeper.poll() is None

        await update_node(docker, drained_worker, Availability="drain")
        assert await asyncio.to_thread(sleeper.wait, DEATH_TIMEOUT_S) == -signal.SIGKILL
        assert (await direct.nodes.inspect(node_id=drained_worker))["Spec"]["Availability"] == "drain"
        listing = admin(admin_url, "GET")
        assert listing["armed"] == []
        [fired] = listing["fired"]
        assert fired["call"] == {"method": "POST", "path": f"/nodes/{drained_worker}/update", "status": 200}
        assert (fired["id"], fired["pid"], fired["signal"]) == (kill_id, sleeper.pid, "SIGKILL")
        assert (fired["result"], fired["answer_sent"]) == ("signalled", True)
    finally:
        admin(admin_url, "DELETE")
