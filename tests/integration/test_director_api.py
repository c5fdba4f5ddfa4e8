"""The director's API against the sandbox's real swarm manager and Redis, with a stub autoscaler on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiodocker
import httpx
import pytest
import redis.asyncio as redis
from aiohttp import web
from warmswarm_director.api import create_app
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.director import Director
from warmswarm_director.groups import GroupStore, group_key
from warmswarm_director.placement import (
    ACCEPT_RECYCLED_DECIDED_BY_LABEL,
    MANAGED_BY_LABEL,
    RECYCLE_MACHINES_DECIDED_BY_LABEL,
    PlacementConfig,
    service_name,
)
from warmswarm_director.swarm import Swarm
from warmswarm_models import (
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_VOLUME_ID,
    SERVICE_LABEL_ACCEPT_RECYCLED,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    SERVICE_LABEL_GROUPS_APPLIED,
    SERVICE_LABEL_RECYCLE_MACHINES,
    SERVICE_LABEL_WARM_TTL_S,
    GroupProperties,
)

T = TypeVar("T")

OPS_TOKEN = "ops-token-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {OPS_TOKEN}"}
API_TOKEN = "the-platforms-token-for-tests-0123"
CACHE_MOUNT_PATH = "/cache"
NODE_CACHE_PATH = "/var/lib/warmswarm/cache"
GIB = 2**30
_NANO = 1_000_000_000

MakeClient = Callable[..., Awaitable[httpx.AsyncClient]]


@dataclass(frozen=True)
class Ids:
    user_id: str
    project_id: str
    node_id: str


# -- fixtures: real Docker and Redis from the sandbox; everything a test creates is removed after it ----------


@pytest.fixture(scope="module")
async def docker(endpoints: Any) -> AsyncIterator[aiodocker.Docker]:
    async with aiodocker.Docker(url=str(endpoints.docker_host)) as client:
        yield client


@pytest.fixture(scope="module")
async def redis_client(endpoints: Any) -> AsyncIterator[redis.Redis]:
    client = redis.from_url(str(endpoints.redis_url))
    yield client
    await client.aclose()


@pytest.fixture
def image(endpoints: Any) -> str:
    return str(endpoints.sandbox_image)


@pytest.fixture
async def make_client(docker: aiodocker.Docker, redis_client: redis.Redis) -> AsyncIterator[MakeClient]:
    """Builds the app as main.py does, with the given autoscaler URL (None: no autoscaler)."""
    async with contextlib.AsyncExitStack() as stack:

        async def make(
            autoscaling_url: str | None = None, node_cache_path: str = NODE_CACHE_PATH, *, strict_groups: bool = False
        ) -> httpx.AsyncClient:
            http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False))
            director = Director(
                Swarm(docker),
                GroupStore(redis_client),
                AutoscalerClient(http, autoscaling_url, timeout_s=2.0, ops_token=OPS_TOKEN),
                PlacementConfig(cache_mount_path=CACHE_MOUNT_PATH, node_cache_path=node_cache_path, stop_grace_s=1),
                strict_groups=strict_groups,
            )
            app = create_app(director, ops_token=OPS_TOKEN, api_token=API_TOKEN)
            # The platform's client: it presents the API token (ops' calls present theirs instead).
            return await stack.enter_async_context(
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://director",
                    headers={"Authorization": f"Bearer {API_TOKEN}"},
                )
            )

        yield make


@pytest.fixture
async def client(make_client: MakeClient) -> httpx.AsyncClient:
    return await make_client()


@pytest.fixture
async def new_ids(docker: aiodocker.Docker) -> AsyncIterator[Callable[[], Ids]]:
    """Fresh owner ids per call; the services for their node ids are removed after the test."""
    made: list[Ids] = []

    def new() -> Ids:
        tag = uuid.uuid4().hex[:10]
        ids = Ids(f"u-{tag}", f"p-{tag}", f"n-{tag}")
        made.append(ids)
        return ids

    yield new
    for ids in made:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.services.delete(service_name(ids.node_id))


@pytest.fixture
async def new_group(
    client: httpx.AsyncClient, redis_client: redis.Redis
) -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """Stores properties for a fresh group id through the API; its key is removed after the test."""
    made: list[str] = []

    async def new(**properties: Any) -> str:
        group_id = f"g-{uuid.uuid4().hex[:10]}"
        made.append(group_id)
        if properties:
            response = await client.put(f"/v1/groups/{group_id}/properties", json=properties, headers=AUTH)
            assert response.status_code == 200, response.text
        return group_id

    yield new
    if made:
        await redis_client.delete(*(group_key(group_id) for group_id in made))


class AutoscalerStub:
    """Answers GET /v1/status with whatever `pending` holds, as the real autoscaler's status does.

    Like the real one it shows the status only to its ops token (`ops_token`, the director's unless a test
    changes it): to anything else it answers 401.
    """

    def __init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.calls = 0
        # Which replica answers each call, as a virtual IP in front of several would: True is the leader.
        self.leaders: list[bool] = []
        self.ops_token = OPS_TOKEN

    async def status(self, request: web.Request) -> web.Response:
        self.calls += 1
        if request.headers.get("Authorization") != f"Bearer {self.ops_token}":
            return web.json_response({"detail": "needs the ops token"}, status=401)
        leader = self.leaders.pop(0) if self.leaders else True
        # A follower observes nothing: its status has no pending tasks.
        pending = self.pending if leader else []
        return web.json_response({"cluster": "test", "leader": leader, "nodes": [], "pending": pending})


@pytest.fixture
async def autoscaler_stub() -> AsyncIterator[tuple[AutoscalerStub, str]]:
    stub = AutoscalerStub()
    app = web.Application()
    app.router.add_get("/v1/status", stub.status)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    await web.SockSite(runner, sock).start()
    try:
        yield stub, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        sock.close()


@pytest.fixture
def nothing_listening() -> str:
    """A loopback URL where nothing answers: the port was free a moment ago and nobody listens on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def request_body(ids: Ids, groups: list[str], image: str, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user_id": ids.user_id,
        "project_id": ids.project_id,
        "node_id": ids.node_id,
        "image": image,
        "command": ["sleep", "3600"],
        "resources": {"cpus": 0.5, "memory_bytes": 64 * 2**20},
        "groups": groups,
    }
    return body | overrides


async def eventually(read: Callable[[], Awaitable[T | None]], timeout_s: float = 20.0) -> T:
    async with asyncio.timeout(timeout_s):
        while True:
            if value := await read():
                return value
            # The swarm's scheduler works on its own time and Docker has no task events to wait on.
            await asyncio.sleep(0.1)


async def first_task(docker: aiodocker.Docker, service_id: str) -> Mapping[str, Any]:
    async def read() -> Mapping[str, Any] | None:
        tasks = await docker.tasks.list(filters={"service": service_id})
        return tasks[0] if tasks else None

    return await eventually(read)


# -- create ----------------------------------------------------------------------------------------------------


async def test_create_makes_a_service_placed_on_the_owners_node_with_the_cache_mounted(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    group = await new_group(ebs_cache_enabled=True, cache_ttl_s=7200, cache_size_gib=30, volume_type="gp3")

    body = request_body(ids, [group], image, resources={"cpus": 0.5, "memory_bytes": 64 * 2**20, "gpus": 1})
    response = await client.post("/v1/services", json=body)

    assert response.status_code == 201, response.text
    answer = response.json()
    assert answer["node_id"] == ids.node_id
    assert answer["service_name"] == f"ws-{ids.node_id}"
    assert answer["cache"] == {
        "enabled": True,
        "ttl_s": 7200,
        "size_gib": 30,
        "volume_type": "gp3",
        "warm_ttl_s": 0,
        "recycle_machines": {"value": False, "decided_by": []},
        "accept_recycled": {"value": False, "decided_by": []},
    }
    spec = (await docker.services.inspect(answer["service_id"]))["Spec"]
    assert spec["Name"] == f"ws-{ids.node_id}"
    assert spec["Labels"] == {
        "user_id": ids.user_id,
        "project_id": ids.project_id,
        "node_id": ids.node_id,
        SERVICE_LABEL_CACHE_ENABLED: "true",
        SERVICE_LABEL_CACHE_TTL_S: "7200",
        SERVICE_LABEL_CACHE_SIZE_GIB: "30",
        SERVICE_LABEL_CACHE_VOLUME_TYPE: "gp3",
        SERVICE_LABEL_WARM_TTL_S: "0",
        SERVICE_LABEL_RECYCLE_MACHINES: "false",
        SERVICE_LABEL_ACCEPT_RECYCLED: "false",
        SERVICE_LABEL_GROUPS_APPLIED: group,
        RECYCLE_MACHINES_DECIDED_BY_LABEL: "",
        ACCEPT_RECYCLED_DECIDED_BY_LABEL: "",
        MANAGED_BY_LABEL: "director",
    }
    template = spec["TaskTemplate"]
    assert template["Placement"]["Constraints"] == [
        f"node.labels.user_id=={ids.user_id}",
        f"node.labels.project_id=={ids.project_id}",
        f"node.labels.node_id=={ids.node_id}",
    ]
    assert template["Resources"]["Reservations"] == {
        "NanoCPUs": _NANO // 2,
        "MemoryBytes": 64 * 2**20,
        "GenericResources": [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": 1}}],
    }
    assert template["Resources"]["Limits"] == {"NanoCPUs": _NANO // 2, "MemoryBytes": 64 * 2**20}
    [mount] = template["ContainerSpec"]["Mounts"]
    assert (mount["Type"], mount["Source"], mount["Target"]) == ("bind", NODE_CACHE_PATH, CACHE_MOUNT_PATH)
    assert template["ContainerSpec"]["Command"] == ["sleep", "3600"]
    assert template["ContainerSpec"]["StopGracePeriod"] == _NANO
    assert template["RestartPolicy"]["Condition"] == "on-failure"


async def test_a_group_with_the_cache_off_gets_no_mount(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    group = await new_group(ebs_cache_enabled=False)

    response = await client.post("/v1/services", json=request_body(ids, [group], image))

    assert response.status_code == 201, response.text
    assert response.json()["cache"]["enabled"] is False
    spec = (await docker.services.inspect(response.json()["service_id"]))["Spec"]
    assert "Mounts" not in spec["TaskTemplate"]["ContainerSpec"]
    assert spec["Labels"][SERVICE_LABEL_CACHE_ENABLED] == "false"
    assert "GenericResources" not in spec["TaskTemplate"]["Resources"]["Reservations"]


async def test_the_effective_policy_takes_the_largest_ttl_and_size_over_the_groups(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    long_lived = await new_group(ebs_cache_enabled=True, cache_ttl_s=7 * 86_400, cache_size_gib=10, volume_type="gp3")
    large = await new_group(ebs_cache_enabled=True, cache_ttl_s=3600, cache_size_gib=100, volume_type="io2")
    off = await new_group(ebs_cache_enabled=False, cache_ttl_s=30 * 86_400, cache_size_gib=500)

    response = await client.post("/v1/services", json=request_body(ids, [long_lived, large, off], image))

    assert response.status_code == 201, response.text
    assert response.json()["cache"] == {
        "enabled": True,
        "ttl_s": 7 * 86_400,
        "size_gib": 100,
        "volume_type": "io2",
        "warm_ttl_s": 0,
        "recycle_machines": {"value": False, "decided_by": []},
        "accept_recycled": {"value": False, "decided_by": []},
    }
    labels = (await docker.services.inspect(response.json()["service_id"]))["Spec"]["Labels"]
    assert labels[SERVICE_LABEL_CACHE_TTL_S] == str(7 * 86_400)
    assert labels[SERVICE_LABEL_CACHE_SIZE_GIB] == "100"


async def test_a_user_in_vault_and_lab_gets_neither_recycling_and_the_answer_names_vault(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    # vault as every group stored before "no opinion" existed was: explicit false, written by a PUT.
    vault = await new_group(ebs_cache_enabled=True, recycle_machines=False, accept_recycled=False)
    lab = await new_group(ebs_cache_enabled=True, recycle_machines=True, accept_recycled=True)
    everyone = await new_group(ebs_cache_enabled=False)  # stored, and no opinion on recycling
    ids = new_ids()

    body = request_body(ids, [lab, everyone, vault], image)
    created, repeated = await client.post("/v1/services", json=body), await client.post("/v1/services", json=body)

    assert (created.status_code, repeated.status_code) == (201, 200), created.text
    # What the autoscaler obeys: the service's labels, the keys and words they always had.
    labels = (await docker.services.inspect(created.json()["service_id"]))["Spec"]["Labels"]
    assert labels[SERVICE_LABEL_ACCEPT_RECYCLED] == "false"
    assert labels[SERVICE_LABEL_RECYCLE_MACHINES] == "false"
    for answer in (created, repeated):
        cache = answer.json()["cache"]
        assert cache["accept_recycled"] == {"value": False, "decided_by": [vault]}
        assert cache["recycle_machines"] == {"value": False, "decided_by": [vault]}

    # Ops turn vault back to "no opinion" (a PATCH with null): lab's grant holds for the next session.
    patched = await client.patch(
        f"/v1/groups/{vault}/properties", json={"accept_recycled": None, "recycle_machines": None}, headers=AUTH
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["accept_recycled"], patched.json()["recycle_machines"]) == (None, None)
    next_session = new_ids()
    granted = await client.post("/v1/services", json=request_body(next_session, [lab, everyone, vault], image))
    assert granted.status_code == 201, granted.text
    labels = (await docker.services.inspect(granted.json()["service_id"]))["Spec"]["Labels"]
    assert (labels[SERVICE_LABEL_ACCEPT_RECYCLED], labels[SERVICE_LABEL_RECYCLE_MACHINES]) == ("true", "true")
    assert granted.json()["cache"]["accept_recycled"] == {"value": True, "decided_by": [lab]}


async def test_a_put_sends_null_or_leaves_a_recycling_property_out_for_no_opinion(
    client: httpx.AsyncClient, new_group: Any
) -> None:
    group = await new_group(accept_recycled=False, recycle_machines=False)

    put = await client.put(
        f"/v1/groups/{group}/properties", json={"ebs_cache_enabled": True, "accept_recycled": None}, headers=AUTH
    )

    assert put.status_code == 200, put.text
    got = (await client.get(f"/v1/groups/{group}/properties")).json()
    assert (got["accept_recycled"], got["recycle_machines"]) == (None, None)


async def test_the_same_request_again_returns_the_same_service(
    client: httpx.AsyncClient, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    body = request_body(ids, [await new_group(ebs_cache_enabled=True)], image)

    first = await client.post("/v1/services", json=body)
    again = await client.post("/v1/services", json=body)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == first.json()


async def test_concurrent_requests_for_one_node_id_make_one_service(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    body = request_body(ids, [await new_group(ebs_cache_enabled=False)], image)

    responses = await asyncio.gather(*(client.post("/v1/services", json=body) for _ in range(4)))

    assert sorted(r.status_code for r in responses) == [200, 200, 200, 201]
    assert len({r.json()["service_id"] for r in responses}) == 1
    assert len(await docker.services.list(filters={"name": f"ws-{ids.node_id}"})) == 1


async def test_another_owner_cannot_take_a_node_id_in_use(
    client: httpx.AsyncClient, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    group = await new_group(ebs_cache_enabled=False)
    assert (await client.post("/v1/services", json=request_body(ids, [group], image))).status_code == 201

    other_user = request_body(ids, [group], image, user_id="someone-else")
    other_project = request_body(ids, [group], image, project_id="another-project")

    for body in (other_user, other_project):
        response = await client.post("/v1/services", json=body)
        assert response.status_code == 409, response.text
        assert ids.node_id in response.json()["detail"]
        assert ids.user_id not in response.json()["detail"]  # the owner's ids are not told to another


async def test_a_service_of_that_name_the_director_did_not_create_is_a_conflict_and_unknown(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    await docker.services.create(
        {
            "ContainerSpec": {"Image": image, "Command": ["sleep", "3600"]},
            "Placement": {"Constraints": ["node.labels.x==y"]},
        },
        name=f"ws-{ids.node_id}",
        labels={"node_id": ids.node_id},
    )

    response = await client.post(
        "/v1/services", json=request_body(ids, [await new_group(ebs_cache_enabled=False)], image)
    )

    assert response.status_code == 409
    assert "did not create" in response.json()["detail"]
    assert (await client.get(f"/v1/services/{ids.node_id}")).status_code == 404
    assert (await client.delete(f"/v1/services/{ids.node_id}")).status_code == 404


async def test_a_node_id_swarm_cannot_use_in_a_name_still_gets_its_service(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    dotted = f"{ids.node_id}.v1.{'x' * 80}"
    dotted_ids = Ids(ids.user_id, ids.project_id, dotted)
    body = request_body(dotted_ids, [await new_group(ebs_cache_enabled=False)], image)

    created = await client.post("/v1/services", json=body)
    try:
        assert created.status_code == 201, created.text
        assert created.json()["service_name"] == service_name(dotted)
        labels = (await docker.services.inspect(created.json()["service_id"]))["Spec"]["Labels"]
        assert labels["node_id"] == dotted
        assert (await client.post("/v1/services", json=body)).status_code == 200
        assert (await client.get(f"/v1/services/{dotted}")).json()["status"] == "pending"
        assert (await client.delete(f"/v1/services/{dotted}")).status_code == 204
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.services.delete(service_name(dotted))


async def test_a_service_created_under_the_legacy_name_form_is_still_the_node_ids(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    dotted = f"{ids.node_id}.v1"
    # As an earlier director named it: ws-<readable>-<12 hex of sha256>.
    legacy = f"ws-{ids.node_id}-v1-{hashlib.sha256(dotted.encode()).hexdigest()[:12]}"
    owner = {"user_id": ids.user_id, "project_id": ids.project_id, "node_id": dotted}
    old = await docker.services.create(
        {
            "ContainerSpec": {"Image": image, "Command": ["sleep", "3600"]},
            "Placement": {"Constraints": ["node.labels.x==y"]},
        },
        name=legacy,
        labels={**owner, MANAGED_BY_LABEL: "director"},
    )
    try:
        body = request_body(Ids(ids.user_id, ids.project_id, dotted), [await new_group(ebs_cache_enabled=False)], image)

        again = await client.post("/v1/services", json=body)
        status = await client.get(f"/v1/services/{dotted}")
        deleted = await client.delete(f"/v1/services/{dotted}")

        assert again.status_code == 200, again.text
        assert (again.json()["service_id"], again.json()["service_name"]) == (old["ID"], legacy)
        assert status.json()["status"] == "pending"
        assert deleted.status_code == 204
        assert not await docker.services.list(filters={"name": service_name(dotted)}), "no second service"
        assert not await docker.services.list(filters={"name": legacy})
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await docker.services.delete(legacy)


# -- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"resources": {"cpus": -1, "memory_bytes": GIB}}, "resources.cpus"),
        ({"resources": {"cpus": 1, "memory_bytes": 0}}, "resources.memory_bytes"),
        ({"resources": {"cpus": 1, "memory_bytes": GIB, "gpus": -2}}, "resources.gpus"),
        ({"user_id": "a b"}, "user_id"),
        ({"user_id": "Alice"}, "user_id"),  # swarm would match it to alice's machines
        ({"project_id": "x/y"}, "project_id"),
        ({"groups": []}, "groups"),
    ],
)
async def test_a_bad_field_is_a_422_that_names_it(
    client: httpx.AsyncClient,
    docker: aiodocker.Docker,
    new_ids: Callable[[], Ids],
    image: str,
    overrides: dict[str, Any],
    field: str,
) -> None:
    ids = new_ids()

    response = await client.post("/v1/services", json=request_body(ids, ["staff"], image) | overrides)

    assert response.status_code == 422
    answer = response.json()
    assert any(field.split(".")[-1] in problem["loc"] for problem in answer["detail"])
    assert answer["message"].startswith(f"invalid request: {field}:")
    assert not await docker.services.list(filters={"name": f"ws-{ids.node_id}"})


async def test_a_group_without_properties_contributes_nothing_and_the_answer_lists_the_groups_that_applied(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    # As the platform sends them: the everyone group and an organisation's (nothing stored), and one ops set.
    everyone, organisation = await new_group(), await new_group()
    lab = await new_group(warm_ttl_s=600)
    ids = new_ids()

    response = await client.post("/v1/services", json=request_body(ids, [everyone, lab, organisation], image))

    assert response.status_code == 201, response.text
    assert response.json()["groups_applied"] == [lab]
    assert response.json()["cache"] == {
        "enabled": False,
        "ttl_s": 86_400,
        "size_gib": 10,
        "volume_type": "gp3",
        "warm_ttl_s": 600,
        "recycle_machines": {"value": False, "decided_by": []},
        "accept_recycled": {"value": False, "decided_by": []},
    }
    service = (await docker.services.list(filters={"name": f"ws-{ids.node_id}"}))[0]
    labels = service["Spec"]["Labels"]
    assert (labels[SERVICE_LABEL_CACHE_ENABLED], labels[SERVICE_LABEL_WARM_TTL_S]) == ("false", "600")
    assert "Mounts" not in service["Spec"]["TaskTemplate"]["ContainerSpec"]

    # None of them has properties: the documented defaults, cache off; a repeat says the same.
    only_unset = new_ids()
    body = request_body(only_unset, [everyone, organisation], image)
    created, repeated = await client.post("/v1/services", json=body), await client.post("/v1/services", json=body)
    assert (created.status_code, repeated.status_code) == (201, 200)
    for answer in (created, repeated):
        assert answer.json()["groups_applied"] == []
        assert answer.json()["cache"]["enabled"] is False


async def test_in_strict_mode_a_group_without_properties_is_a_422_that_says_how_ops_set_them(
    make_client: MakeClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    client = await make_client(strict_groups=True)
    ids = new_ids()
    known = await new_group(ebs_cache_enabled=True)
    unknown = await new_group()  # an id, nothing stored

    response = await client.post("/v1/services", json=request_body(ids, [known, unknown], image))

    assert response.status_code == 422
    detail = response.json()["detail"]
    assert unknown in detail
    assert known not in detail
    assert f"PUT /v1/groups/{unknown}/properties" in detail
    assert not await docker.services.list(filters={"name": f"ws-{ids.node_id}"})


# -- status ----------------------------------------------------------------------------------------------------


@dataclass
class BehindStub:
    """A fresh service created through a director that asks `stub` why its task waits."""

    stub: AutoscalerStub
    client: httpx.AsyncClient
    ids: Ids
    task: Mapping[str, Any]


@pytest.fixture
async def behind_stub(
    make_client: MakeClient,
    autoscaler_stub: tuple[AutoscalerStub, str],
    docker: aiodocker.Docker,
    new_ids: Callable[[], Ids],
    new_group: Any,
    image: str,
) -> BehindStub:
    stub, url = autoscaler_stub
    client = await make_client(autoscaling_url=url)
    ids = new_ids()
    created = await client.post(
        "/v1/services", json=request_body(ids, [await new_group(ebs_cache_enabled=True)], image)
    )
    task = await first_task(docker, created.json()["service_id"])
    return BehindStub(stub, client, ids, task)


async def test_a_fresh_service_is_pending_with_the_autoscalers_reason(behind_stub: BehindStub) -> None:
    stub, client, ids, task = behind_stub.stub, behind_stub.client, behind_stub.ids, behind_stub.task
    stub.pending = [
        {
            "task_id": task["ID"],
            "service": f"ws-{ids.node_id}",
            "owner": {"user_id": ids.user_id, "project_id": ids.project_id, "node_id": ids.node_id},
            "reason": "waiting for capacity: launching t3.medium in us-east-1a",
            "unschedulable": False,
            "starting": False,
        }
    ]

    response = await client.get(f"/v1/services/{ids.node_id}")

    assert response.status_code == 200
    assert response.json() == {
        "status": "pending",
        "reason": "waiting for capacity: launching t3.medium in us-east-1a",
        "node": None,
        "instance_id": None,
        "volume_id": None,
        "start_path": None,  # known once it runs
    }
    assert stub.calls == 1


async def test_a_followers_answer_is_asked_again_until_the_leader_answers(behind_stub: BehindStub) -> None:
    """Two replicas behind the stack's virtual IP: the first answers come from the follower."""
    stub, client, ids, task = behind_stub.stub, behind_stub.client, behind_stub.ids, behind_stub.task
    stub.pending = [{"task_id": task["ID"], "service": f"ws-{ids.node_id}", "reason": "launching t3.medium"}]
    stub.leaders = [False, False, True]

    answer = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert (answer["status"], answer["reason"]) == ("pending", "launching t3.medium")
    assert stub.calls == 3


async def test_only_followers_answering_is_said_and_the_swarms_reason_given(behind_stub: BehindStub) -> None:
    stub, client, ids = behind_stub.stub, behind_stub.client, behind_stub.ids
    stub.leaders = [False] * 10

    answer = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert answer["status"] == "pending"
    assert "came from replicas that follow" in answer["reason"]
    assert "; the swarm says: " in answer["reason"]
    assert stub.calls == 4, "asked a bounded number of times"


async def test_a_task_the_autoscaler_is_starting_a_machine_for_is_starting(behind_stub: BehindStub) -> None:
    stub, client, ids, task = behind_stub.stub, behind_stub.client, behind_stub.ids, behind_stub.task
    reason = "instance i-0123 is booting; volume vol-0456 is attaching"
    stub.pending = [{"task_id": task["ID"], "service": f"ws-{ids.node_id}", "reason": reason, "starting": True}]

    status = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert (status["status"], status["reason"]) == ("starting", reason)


async def test_an_autoscaler_with_another_ops_token_is_named_in_the_pending_reason(behind_stub: BehindStub) -> None:
    stub, client, ids, task = behind_stub.stub, behind_stub.client, behind_stub.ids, behind_stub.task
    stub.pending = [{"task_id": task["ID"], "service": f"ws-{ids.node_id}", "reason": "launching t3.medium"}]
    stub.ops_token = "an-ops-token-of-another-deploy"

    answer = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert answer["status"] == "pending"
    assert "refused the director's ops token (HTTP 401): give both services the same OPS_TOKEN" in answer["reason"]
    assert "launching t3.medium" not in answer["reason"]
    assert stub.calls == 1


async def test_an_unreachable_autoscaler_is_named_in_the_pending_reason(
    make_client: MakeClient, nothing_listening: str, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    client = await make_client(autoscaling_url=nothing_listening)
    ids = new_ids()
    group = await new_group(ebs_cache_enabled=False)
    assert (await client.post("/v1/services", json=request_body(ids, [group], image))).status_code == 201

    status = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert status["status"] == "pending"
    assert "unreachable" in status["reason"]
    assert nothing_listening in status["reason"]


async def test_without_an_autoscaler_the_swarms_reason_is_given(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    created = await client.post(
        "/v1/services", json=request_body(ids, [await new_group(ebs_cache_enabled=False)], image)
    )

    async def scheduled() -> Mapping[str, Any] | None:
        task = await first_task(docker, created.json()["service_id"])
        return task if task["Status"].get("Err") else None

    task = await eventually(scheduled)
    status = (await client.get(f"/v1/services/{ids.node_id}")).json()

    assert (status["status"], status["reason"]) == ("pending", task["Status"]["Err"])


async def test_status_of_an_unknown_node_id_is_404(client: httpx.AsyncClient, new_ids: Callable[[], Ids]) -> None:
    response = await client.get(f"/v1/services/{new_ids().node_id}")

    assert response.status_code == 404
    assert "POST /v1/services" in response.json()["detail"]


async def test_a_malformed_node_id_is_a_422_that_names_it(client: httpx.AsyncClient) -> None:
    for response in (await client.get("/v1/services/-bad"), await client.delete("/v1/services/-bad")):
        assert response.status_code == 422
        assert "node_id='-bad'" in response.json()["detail"]


async def test_delete_removes_the_service(
    client: httpx.AsyncClient, docker: aiodocker.Docker, new_ids: Callable[[], Ids], new_group: Any, image: str
) -> None:
    ids = new_ids()
    group = await new_group(ebs_cache_enabled=False)
    assert (await client.post("/v1/services", json=request_body(ids, [group], image))).status_code == 201

    deleted = await client.delete(f"/v1/services/{ids.node_id}")

    assert deleted.status_code == 204
    assert (await client.get(f"/v1/services/{ids.node_id}")).status_code == 404
    assert (await client.delete(f"/v1/services/{ids.node_id}")).status_code == 404
    assert not await docker.services.list(filters={"name": f"ws-{ids.node_id}"})


@pytest.fixture
async def owners_node(docker: aiodocker.Docker) -> AsyncIterator[Callable[[Ids, Mapping[str, str]], Awaitable[str]]]:
    """Lends the (drained) manager to one owner: labelled as theirs and active; put back as it was afterwards."""
    info = await docker.system.info()
    node_id = str(info["Swarm"]["NodeID"])
    original = await docker.nodes.inspect(node_id=node_id)

    async def lend(ids: Ids, extra_labels: Mapping[str, str]) -> str:
        await _update_node(
            docker,
            node_id,
            lambda spec: (
                spec
                | {
                    "Availability": "active",
                    "Labels": {
                        **(spec.get("Labels") or {}),
                        "user_id": ids.user_id,
                        "project_id": ids.project_id,
                        "node_id": ids.node_id,
                        **extra_labels,
                    },
                }
            ),
        )
        return node_id

    yield lend
    await _update_node(docker, node_id, lambda _spec: dict(original["Spec"]))


async def _update_node(
    docker: aiodocker.Docker, node_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    # The manager records its own status on the node too: a stale version is retried, not fatal.
    for _ in range(20):
        current = await docker.nodes.inspect(node_id=node_id)
        try:
            await docker.nodes.update(
                node_id=node_id, version=current["Version"]["Index"], spec=change(dict(current["Spec"]))
            )
            return
        except aiodocker.DockerError as error:
            if "out of sequence" not in error.message:
                raise
    pytest.fail(f"could not update node {node_id}")


async def test_a_running_service_reports_its_node_instance_and_volume(
    make_client: MakeClient,
    owners_node: Callable[[Ids, Mapping[str, str]], Awaitable[str]],
    docker: aiodocker.Docker,
    new_ids: Callable[[], Ids],
    new_group: Any,
    image: str,
) -> None:
    ids = new_ids()
    with tempfile.TemporaryDirectory(prefix="ws-director-cache-") as cache_dir:
        client = await make_client(node_cache_path=cache_dir)
        node = await owners_node(ids, {NODE_LABEL_INSTANCE_ID: "i-0director", NODE_LABEL_VOLUME_ID: "vol-0director"})
        created = await client.post(
            "/v1/services", json=request_body(ids, [await new_group(ebs_cache_enabled=True)], image)
        )
        assert created.status_code == 201, created.text

        async def running() -> dict[str, Any] | None:
            status: dict[str, Any] = (await client.get(f"/v1/services/{ids.node_id}")).json()
            return status if status["status"] == "running" else None

        status = await eventually(running, timeout_s=60)
        # Stop it before the node goes back to drained, so the test leaves no container behind.
        await docker.services.delete(created.json()["service_id"])

    assert status == {
        "status": "running",
        "reason": None,
        "node": node,
        "instance_id": "i-0director",
        "volume_id": "vol-0director",
        "start_path": None,  # the stand-in autoscaler lists no machine to tell it from
    }


# -- group properties ------------------------------------------------------------------------------------------


async def test_put_then_get_group_properties(client: httpx.AsyncClient, new_group: Any) -> None:
    group = await new_group()
    properties = {
        "ebs_cache_enabled": True,
        "cache_ttl_s": 3600,
        "cache_size_gib": 42,
        "cache_max_size_gib": 420,
        "volume_type": "io2",
        "warm_ttl_s": 1800,
        "recycle_machines": True,
        "accept_recycled": False,
    }

    put = await client.put(f"/v1/groups/{group}/properties", json=properties, headers=AUTH)
    got = await client.get(f"/v1/groups/{group}/properties")

    assert (put.status_code, got.status_code) == (200, 200)
    assert put.json() == properties
    assert got.json() == properties


async def test_a_partial_body_takes_the_defaults(client: httpx.AsyncClient, new_group: Any) -> None:
    group = await new_group()

    await client.put(f"/v1/groups/{group}/properties", json={"ebs_cache_enabled": True}, headers=AUTH)

    assert (await client.get(f"/v1/groups/{group}/properties")).json() == {
        "ebs_cache_enabled": True,
        "cache_ttl_s": 86_400,
        "cache_size_gib": 10,
        "cache_max_size_gib": None,  # no growth unless ops set it
        "volume_type": "gp3",
        "warm_ttl_s": 0,
        "recycle_machines": None,  # no opinion: neither grants nor refuses
        "accept_recycled": None,
    }


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Bearer {OPS_TOKEN}x"},
        {"Authorization": f"Basic {OPS_TOKEN}"},
        {"Authorization": OPS_TOKEN},
    ],
    ids=["missing", "wrong", "longer", "not-bearer", "no-scheme"],
)
async def test_put_without_the_ops_token_is_401_and_changes_nothing(
    client: httpx.AsyncClient, new_group: Any, headers: dict[str, str]
) -> None:
    group = await new_group(ebs_cache_enabled=False, cache_ttl_s=60)
    before = (await client.get(f"/v1/groups/{group}/properties")).json()

    response = await client.put(
        f"/v1/groups/{group}/properties", json={"ebs_cache_enabled": True, "cache_ttl_s": 999}, headers=headers
    )

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert (await client.get(f"/v1/groups/{group}/properties")).json() == before


async def test_put_without_the_token_is_401_before_the_body_is_looked_at(
    client: httpx.AsyncClient, new_group: Any
) -> None:
    group = await new_group()

    response = await client.put(f"/v1/groups/{group}/properties", json={"cache_size_gib": -5})

    assert response.status_code == 401
    assert (await client.get(f"/v1/groups/{group}/properties")).status_code == 404


async def test_get_of_a_group_without_properties_is_404_and_says_how_to_set_them(
    client: httpx.AsyncClient, new_group: Any
) -> None:
    group = await new_group()

    response = await client.get(f"/v1/groups/{group}/properties")

    assert response.status_code == 404
    assert f"PUT /v1/groups/{group}/properties" in response.json()["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"cache_size_gib": 0}, "cache_size_gib"), ({"volume_type": "nvme"}, "volume_type"), ({"colour": 1}, "colour")],
)
async def test_put_of_bad_properties_is_a_422_that_names_the_field(
    client: httpx.AsyncClient, new_group: Any, body: dict[str, Any], field: str
) -> None:
    group = await new_group()

    response = await client.put(f"/v1/groups/{group}/properties", json=body, headers=AUTH)

    assert response.status_code == 422
    assert response.json()["message"].startswith(f"invalid request: {field}:")


async def test_a_bad_group_id_is_a_422_that_names_it(client: httpx.AsyncClient) -> None:
    response = await client.put("/v1/groups/a:b/properties", json={}, headers=AUTH)

    assert response.status_code == 422
    assert response.json()["message"].startswith("invalid request: group_id:")


async def test_health_and_readiness(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "alive"}
    assert (await client.get("/ready")).json() == {"ready": True, "problem": None}


# -- safe edits: PATCH merges, ETag and If-Match -----------------------------------------------------------------


async def test_get_put_and_patch_answer_the_etag_of_what_is_stored(client: httpx.AsyncClient, new_group: Any) -> None:
    group = await new_group(cache_ttl_s=60)
    path = f"/v1/groups/{group}/properties"

    read = await client.get(path)
    patched = await client.patch(path, json={"warm_ttl_s": 120}, headers=AUTH)
    again = await client.get(path)

    assert (read.status_code, patched.status_code) == (200, 200)
    assert read.headers["etag"].startswith('"')
    assert read.headers["etag"].endswith('"')
    assert patched.headers["etag"] == again.headers["etag"] != read.headers["etag"]
    assert again.json()["cache_ttl_s"] == 60
    assert again.json()["warm_ttl_s"] == 120


async def test_two_operators_patching_one_group_at_once_both_keep_their_change(
    make_client: MakeClient, new_group: Any
) -> None:
    # Two directors (two replicas), each with its own Redis connection, as two operators would reach them.
    first, second = await make_client(), await make_client()
    group = await new_group(ebs_cache_enabled=True)
    path = f"/v1/groups/{group}/properties"

    for round_number in range(1, 21):
        answers = await asyncio.gather(
            first.patch(path, json={"cache_ttl_s": round_number * 60}, headers=AUTH),
            second.patch(path, json={"warm_ttl_s": round_number * 10}, headers=AUTH),
            first.patch(path, json={"cache_size_gib": round_number}, headers=AUTH),
        )
        assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
        stored = (await first.get(path)).json()
        # Each operator's field holds its own change: none was written back as it was read.
        assert (stored["cache_ttl_s"], stored["warm_ttl_s"], stored["cache_size_gib"]) == (
            round_number * 60,
            round_number * 10,
            round_number,
        )
        assert stored["ebs_cache_enabled"] is True


async def test_a_stale_if_match_is_a_412_and_changes_nothing(client: httpx.AsyncClient, new_group: Any) -> None:
    group = await new_group(cache_ttl_s=60)
    path = f"/v1/groups/{group}/properties"
    seen = (await client.get(path)).headers["etag"]
    changed = await client.patch(path, json={"cache_ttl_s": 90}, headers={**AUTH, "If-Match": seen})
    assert changed.status_code == 200
    before = (await client.get(path)).json()

    stale_patch = await client.patch(path, json={"warm_ttl_s": 5}, headers={**AUTH, "If-Match": seen})
    stale_put = await client.put(path, json={"ebs_cache_enabled": True}, headers={**AUTH, "If-Match": seen})

    assert (stale_patch.status_code, stale_put.status_code) == (412, 412)
    assert f"GET /v1/groups/{group}/properties" in stale_patch.json()["detail"]
    assert (await client.get(path)).json() == before
    current = (await client.get(path)).headers["etag"]
    assert (await client.put(path, json={}, headers={**AUTH, "If-Match": current})).status_code == 200


async def test_a_patch_of_a_new_group_starts_from_the_defaults_and_if_match_any_needs_one(
    client: httpx.AsyncClient, new_group: Any
) -> None:
    group = await new_group()
    path = f"/v1/groups/{group}/properties"

    refused = await client.patch(path, json={"cache_ttl_s": 5}, headers={**AUTH, "If-Match": "*"})
    created = await client.patch(path, json={"ebs_cache_enabled": True}, headers=AUTH)
    reset = await client.patch(path, json={"cache_ttl_s": 5, "ebs_cache_enabled": None}, headers=AUTH)

    assert refused.status_code == 412
    assert created.json() == {**GroupProperties(ebs_cache_enabled=True).model_dump()}
    assert (reset.json()["cache_ttl_s"], reset.json()["ebs_cache_enabled"]) == (5, False)


async def test_a_bad_patch_is_a_422_that_names_the_field_and_changes_nothing(
    client: httpx.AsyncClient, new_group: Any
) -> None:
    group = await new_group(cache_ttl_s=60)
    path = f"/v1/groups/{group}/properties"
    before = (await client.get(path)).json()

    answers = [
        await client.patch(path, json=body, headers=AUTH)
        for body in ({"cache_size_gib": 0}, {"volume_type": "nvme"}, {"colour": 1}, {"cache_ttl_s": "60"})
    ]

    assert [a.status_code for a in answers] == [422, 422, 422, 422]
    assert [a.json()["message"].split(":")[1].strip() for a in answers] == [
        "cache_size_gib",
        "volume_type",
        "colour",
        "cache_ttl_s",
    ]
    assert (await client.get(path)).json() == before
