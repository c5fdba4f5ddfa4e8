"""The reservations' routes over a Reconciler on in-memory ports: the ops token, the 422s, a round trip, the
statuses the list gives, and a store that does not answer (the route says 503; a cycle plans without them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from warmswarm_autoscaling.api import create_app
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_models import BUFFER_KIND_HOT, INSTANCE_BUFFER_KIND_TAG, INSTANCE_BUFFER_TAG, format_timestamp

from .factories import NOW, ZONE_A, instance, make_policy, node_of
from .fakes import FakeEc2, FakeReservations, FakeSwarm, autoscaler

OPS_TOKEN = "ops-token-for-the-unit-tests"
OPS = {"Authorization": f"Bearer {OPS_TOKEN}"}
POLICY = make_policy(buffer_refill_s=60.0, availability_zones=(ZONE_A,))
WANTED: dict[str, Any] = {
    "group": "class-7b",
    "sessions": 2,
    "resources": {"cpus": 0.5, "memory_bytes": 268435456},
    "at": NOW + 60,
}


def client(scaler: Reconciler, *, ops_token: str | None = OPS_TOKEN) -> httpx.AsyncClient:
    app = create_app(scaler, ready_within_s=60.0, clock=lambda: NOW, ops_token=ops_token)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://autoscaler")


@pytest.fixture
def store() -> FakeReservations:
    return FakeReservations()


async def test_a_reservation_round_trips_and_its_cycle_fills_the_hot_buffer(store: FakeReservations) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        made = await http.post("/v1/reservations", json={**WANTED, "at": format_timestamp(NOW + 60)}, headers=OPS)
        assert made.status_code == 201, made.text
        body = made.json()
        assert body["id"].startswith("resv-")
        assert body["at"] == format_timestamp(NOW + 60)
        assert body["status"] == "filling"  # lead 120 s: its window is open
        assert body["lead_s"] == 120.0
        assert list(store.stored) == [body["id"]]

        await scaler.cycle()  # reads it, and launches its two hot machines
        launched = scaler.last.plan.actions if scaler.last.plan else ()
        assert sum(1 for a in launched if getattr(a, "purpose", "") == "hot_buffer") == 2

        listed = (await http.get("/v1/reservations", headers=OPS)).json()
        (one,) = listed["reservations"]
        assert one["id"] == body["id"]
        assert one["instance_type"] == "t3.medium"
        assert one["zones"] == [ZONE_A]
        assert one["machines_held"] == 0  # on their way, not joined
        assert listed["notices"] == []
        status = (await http.get("/v1/status", headers=OPS)).json()
        assert [r["id"] for r in status["reservations"]] == [body["id"]]

        assert (await http.delete(f"/v1/reservations/{body['id']}", headers=OPS)).status_code == 204
        assert store.stored == {}
        gone = await http.delete(f"/v1/reservations/{body['id']}", headers=OPS)
        assert gone.status_code == 404


async def test_held_machines_make_a_reservation_ready(store: FakeReservations) -> None:
    tags = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}
    machines = [instance(f"i-h{n}", zone=ZONE_A, tags=tags) for n in (1, 2)]
    swarm = FakeSwarm(nodes=[node_of(m, labelled=False) for m in machines])
    scaler = autoscaler(swarm, FakeEc2(instances=machines), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        assert (await http.post("/v1/reservations", json=WANTED, headers=OPS)).status_code == 201
        await scaler.cycle()
        (one,) = (await http.get("/v1/reservations", headers=OPS)).json()["reservations"]
    assert one["status"] == "ready"
    assert one["machines_held"] == 2


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"at": NOW - 1}, "at"),
        ({"zone": "mars-1a"}, "zone"),
        ({"sessions": 11}, "sessions"),
        ({"sessions": 0}, "sessions"),
        ({"at": "2026-05-04T09:00:00"}, "at"),  # no UTC offset
        ({"at": "soon"}, "at"),
        ({"group": "no spaces"}, "group"),
        ({"resources": {"cpus": 0.5}}, "resources"),
        ({"release_after_s": -1}, "release_after_s"),
        # Issue 42: a moment main stored and then could not write in any answer; one more than a year ahead.
        ({"at": 4367682912357125.0}, "at"),
        ({"at": "9999-12-31T23:59:59Z"}, "at"),
        ({"at": NOW + 365 * 86_400 + 1}, "at"),
    ],
)
async def test_a_reservation_that_cannot_be_held_is_a_422_naming_the_field(
    store: FakeReservations, change: dict[str, Any], field: str
) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        answer = await http.post("/v1/reservations", json={**WANTED, **change}, headers=OPS)
    assert answer.status_code == 422, answer.text
    assert any(field in problem["loc"] for problem in answer.json()["detail"]), answer.json()
    assert store.stored == {}


async def test_a_size_no_type_fits_is_a_422_once_a_cycle_saw_the_types(store: FakeReservations) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    huge = {**WANTED, "resources": {"cpus": 64.0, "memory_bytes": 2**40}}
    async with client(scaler) as http:
        before = await http.post("/v1/reservations", json=huge, headers=OPS)
        assert before.status_code == 201  # no cycle yet: the planner says it
        assert before.json()["status"] == "filling"
        await scaler.cycle()
        assert any("no allowed instance type fits" in n for n in scaler.last.plan.notices)  # type: ignore[union-attr]
        after = await http.post("/v1/reservations", json=huge, headers=OPS)
    assert after.status_code == 422
    assert "no allowed instance type" in after.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/reservations"), ("GET", "/v1/reservations"), ("DELETE", "/v1/reservations/resv-000000000001")],
)
async def test_reservations_need_the_ops_token(store: FakeReservations, method: str, path: str) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        bare = await http.request(method, path, json=WANTED)
        wrong = await http.request(method, path, json=WANTED, headers={"Authorization": "Bearer nope-nope-nope"})
    async with client(scaler, ops_token=None) as off:
        refused = await off.request(method, path, json=WANTED, headers=OPS)
    assert bare.status_code == 401
    assert wrong.status_code == 401
    assert refused.status_code == 403
    assert store.stored == {}


async def test_a_store_that_does_not_answer_is_a_503_and_a_cycle_plans_without_it(store: FakeReservations) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    store.failing = True
    async with client(scaler) as http:
        assert (await http.post("/v1/reservations", json=WANTED, headers=OPS)).status_code == 503
        assert (await http.get("/v1/reservations", headers=OPS)).status_code == 503
    report = await scaler.cycle()
    assert report.ok
    assert any("plans without the reservations" in n for n in scaler.last.plan.notices)  # type: ignore[union-attr]


async def test_a_405_names_every_method_of_the_path(store: FakeReservations) -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        answer = await http.put("/v1/reservations", headers=OPS)
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, POST"


async def test_a_reservation_made_after_a_cycle_names_its_type_and_the_list_reads_the_plans_hold(
    store: FakeReservations,
) -> None:
    """A new one is no plan's yet: answered by the clock with the type the last cycle's offerings fit, held by none;
    once a cycle planned it, the list formats that plan's hold (issue 32: the read side recomputes nothing)."""
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        await scaler.cycle()
        made = (await http.post("/v1/reservations", json=WANTED, headers=OPS)).json()
        assert (made["instance_type"], made["status"], made["machines_held"]) == ("t3.medium", "filling", 0)
        assert made["reason"].startswith("no plan of this replica has held it against the machines yet")
        await scaler.cycle()
        (listed,) = (await http.get("/v1/reservations", headers=OPS)).json()["reservations"]
    (hold,) = scaler.last.plan.holds  # type: ignore[union-attr]
    assert listed["reason"] == "the hot buffer keeps 2 running t3.medium in eu-west-1a for it; 0 ready, 0 claimed"
    assert (listed["instance_type"], listed["zones"]) == (hold.instance_type, list(hold.shares))


async def test_the_served_document_states_the_autoscalers_zones_and_its_max_instances() -> None:
    # What a generator reads off the document is what this autoscaler takes (issue 42): a zone of its own, no more
    # sessions than max_instances; `at` within the static bounds every answer can write.
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=FakeReservations())
    async with client(scaler) as http:
        document = (await http.get("/openapi.json")).json()
    request = document["components"]["schemas"]["ReservationIn"]["properties"]
    (zone, _null) = request["zone"]["anyOf"]
    assert zone["enum"] == [ZONE_A]
    assert request["sessions"]["maximum"] == POLICY.max_instances
    (number, text) = request["at"]["anyOf"]
    assert (number["minimum"], number["maximum"]) == (0, 32_503_680_000)
    assert "365 days ahead" in request["at"]["description"]
    assert text["pattern"].startswith("^(19[7-9][0-9]|2[0-9]{3})-")


async def test_unreadable_records_are_in_the_status_and_the_listing_even_before_a_cycle() -> None:
    # A store that names the ids only (not the Redis one, which says why): the answers still name each, never a 500.
    store = FakeReservations()
    store.unreadable = ("resv-00000000dead",)
    scaler = autoscaler(FakeSwarm(), FakeEc2(), policy=POLICY, clock=lambda: NOW, reservations=store)
    async with client(scaler) as http:
        listed = await http.get("/v1/reservations", headers=OPS)
        status = await http.get("/v1/status", headers=OPS)
    expected = [{"kind": "reservation", "id": "resv-00000000dead", "reason": "it cannot be read as a reservation"}]
    assert listed.status_code == 200, listed.text
    assert listed.json()["unreadable"] == expected
    assert status.status_code == 200, status.text
    assert status.json()["unreadable_records"] == expected
