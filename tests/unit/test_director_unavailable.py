"""What the director answers when a backend fails, through its API: Docker or Redis down is a 503 that names the
backend and changes nothing (at whichever call of the request it fails); the autoscaler failing is not a 503 but a
pending status that names the autoscaler's problem next to the swarm's own reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.main import build_app
from warmswarm_director.placement import service_name
from warmswarm_director.ports import AutoscalerPort, NodeView
from warmswarm_director.settings import DirectorSettings
from warmswarm_director.status import TaskView
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, GroupProperties

from .director_fakes import FakeAutoscaler, FakeGroups, FakeSwarm

OPS_TOKEN = "ops-token-for-the-unavailable-tests"
API_TOKEN = "api-token-for-the-unavailable-tests"
BODY = {
    "user_id": "alice",
    "project_id": "p1",
    "node_id": "n1",
    "image": "busybox",
    "resources": {"cpus": 1, "memory_bytes": 2**30},
    "groups": ["lab"],
}
WAITING = TaskView("t1", "pending", None, "no suitable node (insufficient resources on 1 node)", None, "2026-12-01")


@dataclass
class Api:
    http: httpx.AsyncClient
    swarm: FakeSwarm
    groups: FakeGroups


@pytest.fixture
def make_api() -> Callable[[AutoscalerPort], Any]:
    """An API over fresh fakes, with the autoscaler port given; a context manager of Api."""

    class Context:
        def __init__(self, autoscaler: AutoscalerPort) -> None:
            self.autoscaler = autoscaler

        async def __aenter__(self) -> Api:
            swarm, groups = FakeSwarm(), FakeGroups()
            groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600)
            settings = DirectorSettings(ops_token=SecretStr(OPS_TOKEN), api_token=SecretStr(API_TOKEN))
            app = build_app(settings, swarm=swarm, groups=groups, autoscaler=self.autoscaler)
            self.client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://director",
                headers={"Authorization": f"Bearer {API_TOKEN}"},
            )
            return Api(await self.client.__aenter__(), swarm, groups)

        async def __aexit__(self, *exc: object) -> None:
            await self.client.__aexit__(None, None, None)

    return Context


@pytest.fixture
async def api(make_api: Callable[[AutoscalerPort], Any]) -> AsyncIterator[Api]:
    async with make_api(FakeAutoscaler()) as opened:
        yield opened


def says_docker(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json() == {"detail": "could not reach the Docker daemon: Docker answered [503] (fake)"}


def says_redis(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json() == {"detail": "cannot read group properties from Redis: Connection refused (fake)"}


async def test_docker_failing_at_the_create_itself_is_a_503_and_creates_nothing(api: Api) -> None:
    original = api.swarm.create_service

    async def create_down(spec: Mapping[str, Any]) -> str:
        api.swarm.down = True  # the name was looked up; the create is what fails
        return await original(spec)

    api.swarm.create_service = create_down  # type: ignore[method-assign]
    answer = await api.http.post("/v1/services", json=BODY)

    says_docker(answer)
    assert api.swarm.services == {}


async def test_docker_failing_at_the_node_of_a_running_task_is_a_503(api: Api) -> None:
    service_id = (await api.http.post("/v1/services", json=BODY)).json()["service_id"]
    api.swarm.tasks_of[service_id] = [TaskView("t1", "running", "node-1", None, None, "2026-12-01")]
    api.swarm.nodes["node-1"] = NodeView("node-1", {}, {})

    original = api.swarm.node

    async def node_down(node_id: str) -> NodeView:
        api.swarm.down = True
        return await original(node_id)

    api.swarm.node = node_down  # type: ignore[method-assign]
    says_docker(await api.http.get("/v1/services/n1"))


async def test_docker_failing_at_the_delete_is_a_503_and_the_service_stays(api: Api) -> None:
    await api.http.post("/v1/services", json=BODY)
    before = dict(api.swarm.services)
    original = api.swarm.delete_service

    async def delete_down(service_id: str) -> None:
        api.swarm.down = True
        await original(service_id)

    api.swarm.delete_service = delete_down  # type: ignore[method-assign]
    says_docker(await api.http.delete("/v1/services/n1"))
    assert api.swarm.services == before


async def test_ready_names_docker_when_docker_is_down_and_redis_when_redis_is(api: Api) -> None:
    api.swarm.down = True
    docker = await api.http.get("/ready")
    api.swarm.down, api.groups.down = False, True
    redis = await api.http.get("/ready")
    api.groups.down = False
    fine = await api.http.get("/ready")

    assert (docker.status_code, redis.status_code, fine.status_code) == (503, 503, 200)
    assert docker.json() == {
        "ready": False,
        "problem": "could not reach the Docker daemon: Docker answered [503] (fake)",
    }
    assert redis.json()["problem"] == "cannot read group properties from Redis: Connection refused (fake)"
    assert fine.json() == {"ready": True, "problem": None}


async def test_redis_down_is_a_503_for_each_group_route_and_stores_nothing(api: Api) -> None:
    api.groups.down = True
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}

    says_redis(await api.http.get("/v1/groups/lab/properties"))
    says_redis(await api.http.put("/v1/groups/other/properties", json={}, headers=ops))
    says_redis(await api.http.post("/v1/services", json=BODY))

    api.groups.down = False
    assert "other" not in api.groups.stored
    assert api.swarm.services == {}


# -- the autoscaler failing: the status still answers -------------------------------------------------------


def failing_autoscaler(answer: Callable[[httpx.Request], httpx.Response]) -> Callable[[], AutoscalerClient]:
    def client() -> AutoscalerClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        return AutoscalerClient(http, "http://autoscaler.test", timeout_s=1.0, ops_token=OPS_TOKEN)

    return client


def refuse_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (refuse_connection, "the autoscaler at http://autoscaler.test is unreachable (ConnectError)"),
        (lambda r: httpx.Response(503, json={}), "the autoscaler at http://autoscaler.test answered HTTP 503"),
        (
            lambda r: httpx.Response(200, content=b"not json"),
            "the autoscaler at http://autoscaler.test answered with a status this director cannot read",
        ),
    ],
    ids=["unreachable", "503", "unreadable"],
)
async def test_a_failing_autoscaler_leaves_the_service_pending_with_both_reasons(
    make_api: Callable[[AutoscalerPort], Any], answer: Callable[[httpx.Request], httpx.Response], problem: str
) -> None:
    async with make_api(failing_autoscaler(answer)()) as opened:
        service_id = (await opened.http.post("/v1/services", json=BODY)).json()["service_id"]
        opened.swarm.tasks_of[service_id] = [WAITING]

        status = await opened.http.get("/v1/services/n1")

    assert status.status_code == 200, status.text
    body = status.json()
    assert body["status"] == "pending"
    assert body["reason"].startswith(problem)
    assert body["reason"].endswith("; the swarm says: no suitable node (insufficient resources on 1 node)")
    assert (body["node"], body["instance_id"], body["volume_id"]) == (None, None, None)


async def test_a_running_service_is_told_even_when_the_autoscaler_is_down_which_is_asked_once(
    make_api: Callable[[AutoscalerPort], Any],
) -> None:
    asked: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        return refuse_connection(request)

    async with make_api(failing_autoscaler(record)()) as opened:
        service_id = (await opened.http.post("/v1/services", json=BODY)).json()["service_id"]
        opened.swarm.tasks_of[service_id] = [TaskView("t1", "running", "node-1", None, None, "2026-12-01")]
        opened.swarm.nodes["node-1"] = NodeView("node-1", {}, {ENGINE_LABEL_INSTANCE_ID: "i-0abc"})

        status = await opened.http.get("/v1/services/n1")
        again = await opened.http.get("/v1/services/n1")

    assert status.status_code == again.status_code == 200
    assert (status.json()["status"], status.json()["instance_id"]) == ("running", "i-0abc")
    assert status.json()["start_path"] is None
    # Its start path is asked for once, at the first running answer: a down autoscaler never slows every poll.
    assert len(asked) == 1
    assert service_name("n1") in opened.swarm.services
