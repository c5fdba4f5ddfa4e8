"""The HTTP API over an Reconciler on in-memory ports: routes, shapes, the expiry's refusals, the OpenAPI document."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from warmswarm_autoscaling.api import create_app
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_models import VOLUME_EXPIRES_AT_TAG, VOLUME_RELEASED_AT_TAG, Owner, format_timestamp

from .factories import ALICE_N1, BOB_N1, NOW, ZONE_B, attachment, foreign_node, instance, make_policy, volume
from .fakes import AwsTypesEc2, Clock, FakeEc2, FakeSwarm, autoscaler, status_json
from .metrics_scrape import parse

Client = Callable[..., Awaitable[httpx.AsyncClient]]
OPS_TOKEN = "ops-token-for-the-unit-tests"


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    """An HTTP client of the scaler's API; it presents OPS_TOKEN, which the API expects unless told otherwise."""
    opened: list[httpx.AsyncClient] = []

    async def make(scaler: Reconciler, *, ops_token: str | None = OPS_TOKEN) -> httpx.AsyncClient:
        app = create_app(scaler, ready_within_s=60.0, clock=lambda: NOW, ops_token=ops_token)
        http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app),
            base_url="http://autoscaler",
            headers={"Authorization": f"Bearer {OPS_TOKEN}"},
        )
        opened.append(http)
        return http

    yield make
    for http in opened:
        await http.aclose()


def test_the_openapi_document_lists_every_route() -> None:
    app = create_app(autoscaler(FakeSwarm(), FakeEc2()), ready_within_s=60.0, clock=lambda: NOW, ops_token=OPS_TOKEN)

    document: dict[str, Any] = app.openapi()

    routes = {(path, method) for path, item in document["paths"].items() for method in item}
    assert routes == {
        ("/health", "get"),
        ("/ready", "get"),
        ("/metrics", "get"),
        ("/v1/status", "get"),
        ("/v1/volumes", "get"),
        ("/v1/volumes/{volume_id}/expire", "post"),
        ("/v1/reservations", "post"),
        ("/v1/reservations", "get"),
        ("/v1/reservations/{reservation_id}", "delete"),
    }
    listing = document["paths"]["/v1/volumes"]["get"]
    assert [p["name"] for p in listing["parameters"]] == ["user_id"]
    expire = document["paths"]["/v1/volumes/{volume_id}/expire"]["post"]
    assert {"202", "401", "403", "404", "409"} <= set(expire["responses"])
    assert (
        "text/plain; version=0.0.4; charset=utf-8"
        in document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    )
    schemas = document["components"]["schemas"]
    assert set(schemas["VolumeOut"]["properties"]) == {
        "volume_id",
        "owner",
        "availability_zone",
        "state",
        "size_gib",
        "volume_type",
        "attached_to",
        "released_at",
        "expires_at",
    }


async def test_health_ready_status_and_metrics(client: Client) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2())
    http = await client(scaler)

    assert (await http.get("/health")).json() == {"status": "alive"}
    assert (await http.get("/ready")).status_code == 503
    await scaler.cycle()
    assert (await http.get("/ready")).json() == {"ready": True, "last_success_age_s": 0.0}

    status = (await http.get("/v1/status")).json()
    assert (status["dry_run"], status["leader"], status["cluster"]) == (False, True, "test")

    metrics = await http.get("/metrics")
    assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    # The value as Prometheus reads it: prometheus-client writes counts as floats ("1.0").
    assert parse(metrics.text).value("warmswarm_cycles_total", outcome="ok") == 1


async def test_ready_names_the_allowed_types_ec2_does_not_know_and_stays_ready(client: Client) -> None:
    # A typo in both lists, as the settings want every allowed type priced.
    prices = {"t3.medium": 0.0416, "t3.mediun": 0.0416}
    policy = make_policy(allowed_instance_types=tuple(prices), price_per_hour=prices)
    scaler = autoscaler(FakeSwarm(), AwsTypesEc2(), policy=policy)
    http = await client(scaler)

    await scaler.cycle()
    ready = await http.get("/ready")

    assert ready.status_code == 200
    assert ready.json() == {"ready": True, "last_success_age_s": 0.0, "unknown_instance_types": ["t3.mediun"]}
    notices = (await http.get("/v1/status")).json()["notices"]
    assert [notice.split(",")[0] for notice in notices] == ["AUTOSCALING_ALLOWED_INSTANCE_TYPES names t3.mediun"]


async def test_status_survives_a_node_labelled_with_an_unusable_owner_id(client: Client) -> None:
    """Someone else's label is not ours to validate: the status shows it instead of failing."""
    swarm = FakeSwarm(nodes=[foreign_node("n1", labels={"user_id": "not a valid id!"})])
    scaler = autoscaler(swarm, FakeEc2())
    await scaler.cycle()
    http = await client(scaler)

    answer = await http.get("/v1/status")

    assert answer.status_code == 200
    assert answer.json()["nodes"][0]["owner"] == {"user_id": "not a valid id!"}


async def test_volumes_are_listed_from_the_last_cycle_and_filtered_by_user(client: Client) -> None:
    released = volume("vol-a", ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)
    attached = volume("vol-b", BOB_N1, zone=ZONE_B, state="in-use", attached_to=[attachment("i-bob")])
    swarm = FakeSwarm()
    ec2 = FakeEc2(volumes=[attached, released])
    scaler = autoscaler(swarm, ec2)
    http = await client(scaler)

    before = await http.get("/v1/volumes")
    assert before.status_code == 503, "no cycle yet: an empty list would be a lie"
    await scaler.cycle()
    everyone = (await http.get("/v1/volumes")).json()
    alice = (await http.get("/v1/volumes", params={"user_id": "alice"})).json()
    nobody = (await http.get("/v1/volumes", params={"user_id": "zoe"})).json()

    assert everyone == {
        "volumes": [
            {
                "volume_id": "vol-a",
                "owner": {"user_id": "alice", "project_id": "p1", "node_id": "n1"},
                "availability_zone": "eu-west-1a",
                "state": "available",
                "size_gib": 20,
                "volume_type": "gp3",
                "attached_to": None,
                "released_at": format_timestamp(NOW - 60),
                "expires_at": format_timestamp(NOW + 3540),
            },
            {
                "volume_id": "vol-b",
                "owner": {"user_id": "bob", "project_id": "p1", "node_id": "n1"},
                "availability_zone": ZONE_B,
                "state": "in-use",
                "size_gib": 20,
                "volume_type": "gp3",
                "attached_to": "i-bob",
                "released_at": None,
                "expires_at": None,
            },
        ]
    }
    assert [v["volume_id"] for v in alice["volumes"]] == ["vol-a"]
    assert nobody == {"volumes": []}


async def test_expire_tags_the_volume_now_and_the_janitor_deletes_it_next_cycle(client: Client) -> None:
    kept = volume("vol-a", ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)
    ec2 = FakeEc2(volumes=[kept])
    clock = Clock()
    scaler = autoscaler(FakeSwarm(), ec2, clock=clock)
    http = await client(scaler)
    await scaler.cycle()
    clock.now += 10

    answer = await http.post("/v1/volumes/vol-a/expire")

    assert answer.status_code == 202, answer.text
    assert answer.json() == {"volume_id": "vol-a", "expires_at": format_timestamp(NOW + 10)}
    assert ec2.tag_calls == [("vol-a", {VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 10)}, ())]
    assert ec2.volumes[0].tags[VOLUME_RELEASED_AT_TAG] == format_timestamp(NOW - 60), "release time kept"
    (decision,) = status_json(scaler)["decisions"]
    assert (decision["kind"], decision["target"]) == ("expire_volume", "vol-a")
    clock.now += 1
    await scaler.cycle()
    assert ec2.volumes == [], "the janitor deleted it"
    body = (await http.get("/metrics")).text
    assert parse(body).value("warmswarm_actions_total", action="expire_volume", outcome="ok") == 1
    assert parse(body).value("warmswarm_actions_total", action="delete_volume", outcome="ok") == 1


async def test_expire_a_volume_released_moments_ago_without_an_expiry_yet(client: Client) -> None:
    fresh = volume("vol-a", ALICE_N1)  # available, the janitor has not tagged it yet
    ec2 = FakeEc2(volumes=[fresh])
    clock = Clock()
    scaler = autoscaler(FakeSwarm(), ec2, clock=clock)
    http = await client(scaler)

    assert (await http.post("/v1/volumes/vol-a/expire")).status_code == 202
    clock.now += 1
    await scaler.cycle()

    assert ec2.volumes == []


@pytest.mark.parametrize(
    ("volumes", "instances", "status", "says"),
    [
        ([], [], 404, "no cache volume vol-a in cluster 'test'"),
        (
            [volume("vol-a", state="in-use", attached_to=[attachment("i-alice")])],
            [],
            409,
            "volume vol-a is attached to i-alice",
        ),
        ([volume("vol-a", state="creating")], [], 409, "volume vol-a is creating"),
        (
            [volume("vol-a")],
            [instance("i-starting", Owner(user_id="alice"), state="pending", volume_id="vol-a")],
            409,
            "reserved for instance i-starting",
        ),
    ],
    ids=["unknown", "attached", "creating", "reserved"],
)
async def test_expire_refuses_a_volume_it_must_not_touch(
    client: Client, volumes: list[Any], instances: list[Any], status: int, says: str
) -> None:
    ec2 = FakeEc2(volumes=volumes, instances=instances)
    scaler = autoscaler(FakeSwarm(), ec2)
    http = await client(scaler)

    answer = await http.post("/v1/volumes/vol-a/expire")

    assert answer.status_code == status
    assert says in answer.json()["detail"]
    assert ec2.tag_calls == []


@pytest.mark.parametrize("authorization", [None, "", "Bearer wrong-token-of-enough-length", f"Basic {OPS_TOKEN}"])
async def test_expire_without_the_ops_token_is_401_and_changes_nothing(
    client: Client, authorization: str | None
) -> None:
    ec2 = FakeEc2(volumes=[volume("vol-a", ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)])
    http = await client(autoscaler(FakeSwarm(), ec2))
    headers = {} if authorization is None else {"Authorization": authorization}
    if authorization is None:
        http.headers.pop("Authorization")

    answer = await http.post("/v1/volumes/vol-a/expire", headers=headers)

    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["detail"] == "expiring a volume needs 'Authorization: Bearer <ops token>'"
    assert ec2.tag_calls == []
    assert ec2.call_counts == {}, "refused before EC2 is asked anything"


async def test_expire_is_off_without_an_ops_token_setting(client: Client) -> None:
    ec2 = FakeEc2(volumes=[volume("vol-a", ALICE_N1)])
    http = await client(autoscaler(FakeSwarm(), ec2), ops_token=None)

    answer = await http.post("/v1/volumes/vol-a/expire")

    assert answer.status_code == 403
    assert "set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN)" in answer.json()["detail"]
    assert ec2.tag_calls == []


async def test_expire_refuses_in_a_dry_run_and_on_a_follower(client: Client) -> None:
    ec2 = FakeEc2(volumes=[volume("vol-a")])
    dry = await client(autoscaler(FakeSwarm(), ec2, dry_run=True))
    follower_scaler = autoscaler(FakeSwarm(), ec2)
    follower_scaler.set_leader(False)
    follower = await client(follower_scaler)

    refused_dry = await dry.post("/v1/volumes/vol-a/expire")
    refused_follower = await follower.post("/v1/volumes/vol-a/expire")

    assert refused_dry.status_code == 409
    assert "dry run" in refused_dry.json()["detail"]
    assert refused_follower.status_code == 409
    assert refused_follower.json()["detail"] == "not the leader; ask the leader"
    assert ec2.tag_calls == []
    assert ec2.call_counts == {}, "a follower does not even read EC2 for it"


async def test_expire_says_so_when_ec2_fails(client: Client) -> None:
    ec2 = FakeEc2(volumes=[volume("vol-a")])
    ec2.failing["CreateTags"] = "RequestLimitExceeded"
    scaler = autoscaler(FakeSwarm(), ec2)
    http = await client(scaler)

    answer = await http.post("/v1/volumes/vol-a/expire")

    assert answer.status_code == 503
    assert "RequestLimitExceeded" in answer.json()["detail"]
    body = (await http.get("/metrics")).text
    assert parse(body).value("warmswarm_actions_total", action="expire_volume", outcome="error") == 1


# -- reading the status and the volumes: they name every user, so they take the ops token -------------------


@pytest.mark.parametrize("path", ["/v1/status", "/v1/volumes"])
@pytest.mark.parametrize("authorization", [None, "", "Bearer wrong-token-of-enough-length", f"Basic {OPS_TOKEN}"])
async def test_status_and_volumes_without_the_ops_token_are_401_and_name_nobody(
    client: Client, path: str, authorization: str | None
) -> None:
    ec2 = FakeEc2(volumes=[volume("vol-a", ALICE_N1, released_at=NOW - 60, expires_at=NOW + 3540)])
    scaler = autoscaler(FakeSwarm(), ec2)
    await scaler.cycle()
    http = await client(scaler)
    http.headers.pop("Authorization")
    headers = {} if authorization is None else {"Authorization": authorization}

    answer = await http.get(path, headers=headers)

    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert "ops token" in answer.json()["detail"]
    assert "alice" not in answer.text
    assert "vol-a" not in answer.text


@pytest.mark.parametrize("path", ["/v1/status", "/v1/volumes"])
async def test_status_and_volumes_are_off_without_an_ops_token_setting(client: Client, path: str) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(volumes=[volume("vol-a", ALICE_N1)]))
    await scaler.cycle()
    http = await client(scaler, ops_token=None)

    answer = await http.get(path)

    assert answer.status_code == 403
    assert "set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN)" in answer.json()["detail"]
    assert "alice" not in answer.text


async def test_health_ready_and_metrics_stay_open(client: Client) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2())
    await scaler.cycle()
    http = await client(scaler)
    http.headers.pop("Authorization")

    answers = [await http.get(path) for path in ("/health", "/ready", "/metrics")]

    assert [a.status_code for a in answers] == [200, 200, 200]


def test_the_openapi_document_says_who_may_read_the_status_and_the_volumes() -> None:
    app = create_app(autoscaler(FakeSwarm(), FakeEc2()), ready_within_s=60.0, clock=lambda: NOW, ops_token=OPS_TOKEN)

    paths = app.openapi()["paths"]

    for path in ("/v1/status", "/v1/volumes", "/v1/volumes/{volume_id}/expire"):
        operation = next(iter(paths[path].values()))
        assert {"401", "403"} <= set(operation["responses"]), path
        assert operation["security"], path
    for path in ("/health", "/ready", "/metrics"):
        assert "security" not in paths[path]["get"], path
