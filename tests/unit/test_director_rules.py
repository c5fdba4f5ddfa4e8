"""The director's rules on fakes of its ports, through its API (where every error becomes its answer):
races, repeats, owners, the cache policy, status, and what it answers when Docker, Redis or the autoscaler fail."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from warmswarm_director.main import build_app
from warmswarm_director.placement import MANAGED_BY_DIRECTOR, MANAGED_BY_LABEL, service_name
from warmswarm_director.ports import NodeView
from warmswarm_director.settings import DirectorSettings
from warmswarm_director.status import AutoscalerView, TaskView, Waiting
from warmswarm_models import NODE_LABEL_INSTANCE_ID, NODE_LABEL_VOLUME_ID, GroupProperties

from .director_fakes import ALICE, FakeAutoscaler, FakeGroups, FakeSwarm, legacy_name

OPS_TOKEN = "ops-token-for-the-director-rules"
API_TOKEN = "api-token-of-the-platform-for-the-rules"


@dataclass
class Director:
    http: httpx.AsyncClient
    swarm: FakeSwarm
    groups: FakeGroups
    autoscaler: FakeAutoscaler

    async def create(self, **changes: Any) -> httpx.Response:
        body = {
            **ALICE,
            "image": "busybox",
            "resources": {"cpus": 1, "memory_bytes": 2**30},
            "groups": ["lab"],
            **changes,
        }
        return await self.http.post("/v1/services", json=body)


@pytest.fixture
async def director() -> AsyncIterator[Director]:
    swarm, groups, autoscaler = FakeSwarm(), FakeGroups(), FakeAutoscaler()
    groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600)
    settings = DirectorSettings(ops_token=SecretStr(OPS_TOKEN), api_token=SecretStr(API_TOKEN))
    app = build_app(settings, swarm=swarm, groups=groups, autoscaler=autoscaler)
    # The platform's client: it presents the API token unless a test says otherwise.
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://director",
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    ) as http:
        yield Director(http, swarm, groups, autoscaler)


async def test_a_create_places_the_service_on_its_owner_with_the_groups_cache(director: Director) -> None:
    answer = await director.create()

    assert answer.status_code == 201, answer.text
    assert answer.json()["cache"] == {
        "enabled": True,
        "ttl_s": 600,
        "size_gib": 10,
        "volume_type": "gp3",
        "warm_ttl_s": 0,
        # lab says nothing about recycling: off, decided by nobody.
        "recycle_machines": {"value": False, "decided_by": []},
        "accept_recycled": {"value": False, "decided_by": []},
    }
    spec = director.swarm.specs[service_name("n1")]
    assert spec["TaskTemplate"]["Placement"]["Constraints"] == [
        "node.labels.user_id==alice",
        "node.labels.project_id==p1",
        "node.labels.node_id==n1",
    ]
    assert spec["Labels"]["warmswarm.cache.enabled"] == "true"


async def test_a_repeat_finds_the_service_it_created(director: Director) -> None:
    first = (await director.create()).json()

    again = await director.create()

    assert again.status_code == 200
    assert again.json()["service_id"] == first["service_id"]
    assert len(director.swarm.services) == 1


async def test_a_create_that_loses_a_race_to_the_same_owner_answers_as_a_repeat(director: Director) -> None:
    async def the_other_request() -> None:
        director.swarm.add(service_name("n1"), {**ALICE, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR})

    director.swarm.before_create = the_other_request

    answer = await director.create()

    assert answer.status_code == 200, answer.text
    assert len(director.swarm.services) == 1


async def test_a_create_that_loses_a_race_to_another_owner_is_a_conflict(director: Director) -> None:
    async def bobs_request() -> None:
        bob = {**ALICE, "user_id": "bob"}
        director.swarm.add(service_name("n1"), {**bob, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR})

    director.swarm.before_create = bobs_request

    answer = await director.create()

    assert answer.status_code == 409
    assert "already in use by another user or project" in answer.json()["detail"]
    assert "bob" not in answer.text, "the other owner's ids are theirs"


async def test_a_service_created_and_removed_during_the_request_asks_to_send_it_again(director: Director) -> None:
    async def created_and_removed() -> None:
        director.swarm.add(service_name("n1"), ALICE)

    director.swarm.before_create = created_and_removed
    real_find = director.swarm.find_service
    looks = 0

    async def find_then_gone(name: str) -> Any:
        nonlocal looks
        looks += 1
        return None if looks > 1 else await real_find(name)

    director.swarm.find_service = find_then_gone  # type: ignore[method-assign]

    answer = await director.create()

    assert answer.status_code == 409
    assert "created and removed while this request ran; send it again" in answer.json()["detail"]


async def test_a_service_of_that_name_someone_else_made_is_a_conflict(director: Director) -> None:
    director.swarm.add(service_name("n1"), {})

    answer = await director.create()

    assert answer.status_code == 409
    assert "the director did not create" in answer.json()["detail"]


async def test_a_group_without_properties_contributes_nothing_and_the_answer_names_those_that_applied(
    director: Director,
) -> None:
    answer = await director.create(groups=["everyone", "lab", "nobody-set-this"])

    assert answer.status_code == 201, answer.text
    assert answer.json()["groups_applied"] == ["lab"]
    assert answer.json()["cache"]["enabled"] is True
    assert director.swarm.specs[service_name("n1")]["Labels"]["warmswarm.groups-applied"] == "lab"


async def test_a_request_none_of_whose_groups_has_properties_gets_the_defaults(director: Director) -> None:
    answer = await director.create(groups=["everyone", "org-7"])

    assert answer.status_code == 201, answer.text
    assert answer.json()["groups_applied"] == []
    assert answer.json()["cache"] == {
        "enabled": False,
        "ttl_s": 86_400,
        "size_gib": 10,
        "volume_type": "gp3",
        "warm_ttl_s": 0,
        "recycle_machines": {"value": False, "decided_by": []},
        "accept_recycled": {"value": False, "decided_by": []},
    }
    # A repeat says the same: the groups that applied are kept on the service.
    again = await director.create(groups=["everyone", "org-7"])
    assert (again.status_code, again.json()["groups_applied"]) == (200, [])


async def test_a_refusing_group_wins_and_the_answer_names_it_now_and_on_a_repeat(director: Director) -> None:
    director.groups.stored["vault"] = GroupProperties(recycle_machines=False, accept_recycled=False)
    director.groups.stored["lab"] = GroupProperties(recycle_machines=True, accept_recycled=True)

    answer = await director.create(groups=["lab", "everyone", "vault"])

    assert answer.status_code == 201, answer.text
    labels = director.swarm.specs[service_name("n1")]["Labels"]
    assert (labels["warmswarm.recycle-machines"], labels["warmswarm.accept-recycled"]) == ("false", "false")
    refused = {"value": False, "decided_by": ["vault"]}
    cache = answer.json()["cache"]
    assert (cache["recycle_machines"], cache["accept_recycled"]) == (refused, refused)
    again = (await director.create(groups=["lab", "everyone", "vault"])).json()["cache"]
    assert (again["recycle_machines"], again["accept_recycled"]) == (refused, refused)


async def test_a_grant_names_the_granting_groups_and_a_group_without_an_opinion_is_not_one(
    director: Director,
) -> None:
    director.groups.stored["lab"] = GroupProperties(accept_recycled=True, recycle_machines=True)
    director.groups.stored["course"] = GroupProperties(accept_recycled=True)
    director.groups.stored["everyone"] = GroupProperties()

    cache = (await director.create(groups=["everyone", "course", "lab"])).json()["cache"]

    assert cache["accept_recycled"] == {"value": True, "decided_by": ["course", "lab"]}
    assert cache["recycle_machines"] == {"value": True, "decided_by": ["lab"]}
    labels = director.swarm.specs[service_name("n1")]["Labels"]
    assert (labels["warmswarm.recycle-machines"], labels["warmswarm.accept-recycled"]) == ("true", "true")


async def test_a_service_of_an_older_director_answers_its_recycling_without_the_deciders(director: Director) -> None:
    director.swarm.add(
        service_name("n1"),
        {**ALICE, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR, "warmswarm.accept-recycled": "true"},
    )

    cache = (await director.create()).json()["cache"]

    assert cache["accept_recycled"] == {"value": True, "decided_by": None}
    assert cache["recycle_machines"] == {"value": False, "decided_by": None}


async def test_in_strict_mode_a_group_without_properties_is_a_422_saying_how_ops_set_them() -> None:
    swarm, groups = FakeSwarm(), FakeGroups()
    groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True)
    settings = DirectorSettings(ops_token=SecretStr(OPS_TOKEN), api_token=SecretStr(API_TOKEN), strict_groups=True)
    app = build_app(settings, swarm=swarm, groups=groups, autoscaler=FakeAutoscaler())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://director") as http:
        director = Director(http, swarm, groups, FakeAutoscaler())
        http.headers["Authorization"] = f"Bearer {API_TOKEN}"

        answer = await director.create(groups=["lab", "nobody-set-this"])

    assert answer.status_code == 422
    assert "PUT /v1/groups/nobody-set-this/properties" in answer.json()["detail"]
    assert swarm.services == {}


@pytest.mark.parametrize("route", ["create", "status", "delete"])
async def test_docker_down_is_a_503_and_changes_nothing(director: Director, route: str) -> None:
    await director.create()
    before = dict(director.swarm.services)
    director.swarm.down = True

    if route == "create":
        answer = await director.create(node_id="n2")
    elif route == "status":
        answer = await director.http.get("/v1/services/n1")
    else:
        answer = await director.http.delete("/v1/services/n1")

    assert answer.status_code == 503
    assert "Docker" in answer.json()["detail"]
    assert director.swarm.services == before


async def test_redis_down_is_a_503_for_a_create_and_for_the_group_routes(director: Director) -> None:
    director.groups.down = True

    create = await director.create()
    read = await director.http.get("/v1/groups/lab/properties")
    write = await director.http.put(
        "/v1/groups/lab/properties", json={}, headers={"Authorization": f"Bearer {OPS_TOKEN}"}
    )
    patch = await director.http.patch(
        "/v1/groups/lab/properties", json={"cache_ttl_s": 1}, headers={"Authorization": f"Bearer {OPS_TOKEN}"}
    )

    assert [r.status_code for r in (create, read, write, patch)] == [503, 503, 503, 503]
    assert "Redis" in create.json()["detail"]
    assert director.swarm.services == {}


async def test_ready_is_503_naming_the_backend_that_does_not_answer(director: Director) -> None:
    assert (await director.http.get("/ready")).json() == {"ready": True, "problem": None}

    director.groups.down = True
    answer = await director.http.get("/ready")

    assert answer.status_code == 503
    assert answer.json()["ready"] is False
    assert "Redis" in answer.json()["problem"]


async def test_a_pending_service_gives_the_autoscalers_reason_or_its_problem(director: Director) -> None:
    service_id = (await director.create()).json()["service_id"]
    task = TaskView("t1", "pending", None, "no suitable node (insufficient resources on 1 node)", None, "2026-12-01")
    director.swarm.tasks_of[service_id] = [task]
    director.autoscaler.view_now = AutoscalerView(
        enabled=True, waiting=[Waiting("t1", service_name("n1"), "launching a t3.medium in us-east-1a", True)]
    )

    starting = (await director.http.get("/v1/services/n1")).json()

    director.autoscaler.view_now = AutoscalerView(enabled=True, problem="the autoscaler at http://x answered HTTP 503")
    unknown = (await director.http.get("/v1/services/n1")).json()

    assert (starting["status"], starting["reason"]) == ("starting", "launching a t3.medium in us-east-1a")
    assert unknown["status"] == "pending"
    assert unknown["reason"].startswith("the autoscaler at http://x answered HTTP 503; the swarm says: no suitable")


async def test_a_running_service_names_its_node_instance_and_volume_asking_the_autoscaler_once(
    director: Director,
) -> None:
    service_id = (await director.create()).json()["service_id"]
    director.swarm.tasks_of[service_id] = [TaskView("t1", "running", "node-1", None, None, "2026-12-01")]
    director.swarm.nodes["node-1"] = NodeView(
        "node-1", {NODE_LABEL_INSTANCE_ID: "i-0abc", NODE_LABEL_VOLUME_ID: "vol-0abc"}, {}
    )

    status = (await director.http.get("/v1/services/n1")).json()
    again = (await director.http.get("/v1/services/n1")).json()

    assert status == {
        "status": "running",
        "reason": None,
        "node": "node-1",
        "instance_id": "i-0abc",
        "volume_id": "vol-0abc",
        "start_path": None,  # the autoscaler lists no machine i-0abc
    }
    assert again == status
    # Asked once, for the machine's start-path facts, at the session's first running answer; never again.
    assert director.autoscaler.asked == 1


async def test_status_and_delete_of_an_unknown_or_foreign_service_are_404(director: Director) -> None:
    director.swarm.add(service_name("n9"), {})  # same name scheme, not the director's

    for node_id in ("n1", "n9"):
        assert (await director.http.get(f"/v1/services/{node_id}")).status_code == 404
        assert (await director.http.delete(f"/v1/services/{node_id}")).status_code == 404
    assert service_name("n9") in director.swarm.services


async def test_unreadable_cache_labels_on_a_stored_service_are_a_500_that_says_so(director: Director) -> None:
    labels = {**ALICE, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR, "warmswarm.cache.enabled": "perhaps"}
    director.swarm.add(service_name("n1"), labels)

    answer = await director.create()

    assert answer.status_code == 500
    assert "cache labels that cannot be read" in answer.json()["detail"]


# -- services named before names were made disjoint -------------------------------------------------------

DOTTED = {**ALICE, "node_id": "n1.gpu"}


async def test_a_service_under_its_legacy_name_is_still_found_by_post_get_and_delete(director: Director) -> None:
    old = director.swarm.add(legacy_name("n1.gpu"), {**DOTTED, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR})

    repeat = await director.create(node_id="n1.gpu")
    status = await director.http.get("/v1/services/n1.gpu")
    deleted = await director.http.delete("/v1/services/n1.gpu")

    assert repeat.status_code == 200, repeat.text
    assert (repeat.json()["service_id"], repeat.json()["service_name"]) == (old.id, old.name)
    assert status.status_code == 200
    assert status.json()["status"] == "pending"
    assert deleted.status_code == 204
    assert director.swarm.services == {}, "nothing was created next to it, and it is gone"


async def test_another_ids_service_at_a_legacy_name_is_neither_found_nor_in_the_way(director: Director) -> None:
    # Under the old scheme, the plain id "n1-gpu-<12 hex>" was named exactly as "n1.gpu"'s service.
    squatter_id = legacy_name("n1.gpu").removeprefix("ws-")
    squatter = director.swarm.add(
        legacy_name("n1.gpu"), {**ALICE, "user_id": "mallory", "node_id": squatter_id, MANAGED_BY_LABEL: "director"}
    )

    status = await director.http.get("/v1/services/n1.gpu")
    deleted = await director.http.delete("/v1/services/n1.gpu")
    created = await director.create(node_id="n1.gpu")

    assert (status.status_code, deleted.status_code) == (404, 404)
    assert created.status_code == 201, created.text
    assert created.json()["service_name"] == service_name("n1.gpu") != squatter.name
    assert director.swarm.services[squatter.name] == squatter, "the other user's service is untouched"


# -- who may call: the platform (API token), ops (ops token), and nobody else ----------------------------------

OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}
API = {"Authorization": f"Bearer {API_TOKEN}"}
EVERY_ROUTE = [
    ("POST", "/v1/services"),
    ("GET", "/v1/services/n1"),
    ("DELETE", "/v1/services/n1"),
    ("GET", "/v1/groups/lab/properties"),
    ("PUT", "/v1/groups/lab/properties"),
    ("PATCH", "/v1/groups/lab/properties"),
]
# No header, an empty one, a wrong token, the right one under another scheme, the right one without a scheme.
NOT_A_TOKEN = [None, "", "Bearer not-the-token-of-anyone-0123", f"Basic {API_TOKEN}", API_TOKEN]


def state(director: Director) -> tuple[object, ...]:
    """Everything a request could have changed or caused: services, group properties, calls to the autoscaler."""
    return (
        dict(director.swarm.services),
        dict(director.groups.stored),
        director.swarm.created,
        director.autoscaler.asked,
    )


async def refused_request(director: Director, method: str, path: str, authorization: str | None) -> httpx.Response:
    """`method path` with a valid body, presenting `authorization` (None: no header at all)."""
    director.http.headers.pop("Authorization", None)
    headers = {} if authorization is None else {"Authorization": authorization}
    body: dict[str, Any] | None = None
    if path == "/v1/services":
        body = {**ALICE, "node_id": "n2", "image": "evil", "resources": {"cpus": 1, "memory_bytes": 2**30}}
        body["groups"] = ["lab"]
    elif method in ("PUT", "PATCH"):
        body = {"ebs_cache_enabled": False, "cache_ttl_s": 1}
    return await director.http.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize(("method", "path"), EVERY_ROUTE)
@pytest.mark.parametrize("authorization", NOT_A_TOKEN)
async def test_every_route_without_a_token_is_401_and_changes_nothing(
    director: Director, method: str, path: str, authorization: str | None
) -> None:
    await director.create()  # alice's n1 exists: a refused GET or DELETE has something it could reach
    before = state(director)

    answer = await refused_request(director, method, path, authorization)

    assert answer.status_code == 401, answer.text
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert list(answer.json()) == ["detail"]
    assert "alice" not in answer.text
    assert state(director) == before


@pytest.mark.parametrize(("method", "path"), EVERY_ROUTE[:3])
async def test_the_ops_token_does_not_open_the_platforms_routes(director: Director, method: str, path: str) -> None:
    await director.create()
    before = state(director)

    answer = await refused_request(director, method, path, OPS["Authorization"])

    assert answer.status_code == 401
    assert "DIRECTOR_API_TOKEN" in answer.json()["detail"]
    assert state(director) == before


async def test_changing_group_properties_takes_the_ops_token_not_the_api_token(director: Director) -> None:
    before = state(director)

    refused = await refused_request(director, "PUT", "/v1/groups/lab/properties", API["Authorization"])
    assert state(director) == before
    done = await director.http.put("/v1/groups/lab/properties", json={"cache_ttl_s": 1}, headers=OPS)

    assert refused.status_code == 401
    assert "ops token" in refused.json()["detail"]
    assert done.status_code == 200
    assert director.groups.stored["lab"].cache_ttl_s == 1


async def test_group_properties_are_read_with_either_token(director: Director) -> None:
    director.http.headers.pop("Authorization")

    answers = [await director.http.get("/v1/groups/lab/properties", headers=h) for h in (API, OPS)]

    assert [a.status_code for a in answers] == [200, 200]
    assert answers[0].json() == answers[1].json() == director.groups.stored["lab"].model_dump()


async def test_a_bad_request_without_a_token_is_refused_before_it_is_read(director: Director) -> None:
    # A stranger learns nothing of the request rules: the token is checked before the body.
    director.http.headers.pop("Authorization")

    answer = await director.http.post("/v1/services", json={"user_id": "Alice", "resources": {"cpus": -1}})

    assert answer.status_code == 401
    assert "user_id" not in answer.text


async def test_health_and_ready_need_no_token(director: Director) -> None:
    director.http.headers.pop("Authorization")

    assert (await director.http.get("/health")).status_code == 200
    assert (await director.http.get("/ready")).status_code == 200
