"""End to end: a reservation for 5 sessions at T has 5 running, joined, unclaimed hot machines before T, and 5
sessions started at T each start hot on one of them; a reservation far ahead holds nothing yet."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from warmswarm_demos.sessions import SMALL, start_session, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_models import (
    BUFFER_KIND_HOT,
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
)
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

pytestmark = pytest.mark.e2e

CLUSTER = "resv-e2e"
OPS_TOKEN = new_ops_token()
SESSIONS = 5
# Lead = refill × margin = 120 s, more than T's 50 s away: the buffer fills from the moment it is reserved.
REFILL_S = 60
AHEAD_S = 50


@pytest.fixture(scope="module")
def started(sandbox: Sandbox, endpoints: Endpoints) -> Iterator[tuple[str, StartedDirector]]:
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": f"{sandbox.region}a",
        "AUTOSCALING_MAX_INSTANCES": "8",
        "AUTOSCALING_BUFFER_REFILL_S": str(REFILL_S),
        "AUTOSCALING_RESERVATION_LEAD_MARGIN": "2",
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    url = start_autoscaler(sandbox, name="autoscaling-resv", settings=settings, ops_token=OPS_TOKEN)
    director = start_director(sandbox, name="director-resv", autoscaling_url=url, ops_token=OPS_TOKEN)
    yield url, director
    sandbox.kill("director-resv")
    sandbox.kill("autoscaling-resv")


@pytest.fixture
async def clients(started: tuple[str, StartedDirector]) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    url, director = started
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    platform = {"Authorization": f"Bearer {director.api_token}"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30, headers=ops) as autoscaler,
        httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as api,
    ):
        answer = await api.put("/v1/groups/class-7b/properties", json={}, headers=ops)
        assert answer.status_code == 200, answer.text
        yield autoscaler, api


def free_hot_machines(ec2: Any, endpoints: Endpoints) -> set[str]:
    """Running, unclaimed hot-buffer machines whose node joined, ready and drained: what a claim may take."""
    manager = Engine(endpoints.docker_host)
    joined = {
        n["Description"]["Engine"].get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID)
        for n in manager.get("/nodes")
        if n["Status"]["State"] == "ready" and n["Spec"]["Availability"] == "drain"
    }
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]},
        {"Name": f"tag:{INSTANCE_BUFFER_KIND_TAG}", "Values": [BUFFER_KIND_HOT]},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]
    found = [i for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]
    return {
        str(i["InstanceId"])
        for i in found
        if tags_of(i).get(INSTANCE_BUFFER_TAG) == "true" and "user_id" not in tags_of(i) and i["InstanceId"] in joined
    }


def owner(n: int) -> dict[str, str]:
    return {"user_id": f"pupil{n}-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}


async def test_a_reservation_fills_the_hot_buffer_before_t_and_its_sessions_start_hot(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient], ec2: Any, endpoints: Endpoints
) -> None:
    autoscaler, api = clients
    began = time.monotonic()
    at = time.time() + AHEAD_S
    wanted = {"group": "class-7b", "sessions": SESSIONS, "resources": SMALL, "at": at, "release_after_s": 600}
    made = await autoscaler.post("/v1/reservations", json=wanted)
    assert made.status_code == 201, made.text
    reservation = made.json()
    assert reservation["id"].startswith("resv-")
    assert reservation["instance_type"] == "t3.medium"
    later = await autoscaler.post("/v1/reservations", json={**wanted, "at": time.time() + 3600})
    assert later.status_code == 201, later.text

    async def filled() -> set[str] | None:
        free = free_hot_machines(ec2, endpoints)
        return free if len(free) >= SESSIONS else None

    held, _ = await wait_for(f"{SESSIONS} free hot machines", filled, timeout_s=AHEAD_S - 5, interval_s=1)
    assert time.time() < at, "the buffer is filled before T"
    ready_s, before_s = time.monotonic() - began, at - time.time()
    print(f"{SESSIONS} hot machines ready {ready_s:.0f} s after the reservation, {before_s:.0f} s before T")

    async def listed_ready() -> dict[str, Any] | None:
        body = (await autoscaler.get("/v1/reservations")).json()
        mine = {r["id"]: r for r in body["reservations"]}
        return body if mine[reservation["id"]]["status"] == "ready" else None

    body, _ = await wait_for("the reservation ready", listed_ready, timeout_s=30, interval_s=1)
    states = {r["id"]: r for r in body["reservations"]}
    assert states[reservation["id"]]["machines_held"] == SESSIONS
    assert states[later.json()["id"]]["status"] == "pending"
    assert states[later.json()["id"]]["machines_held"] == 0
    assert len(free_hot_machines(ec2, endpoints)) == SESSIONS, "the later reservation launched nothing yet"

    await asyncio.sleep(max(0.0, at - time.time()) + 1)  # T: the class starts
    pupils = [owner(n) for n in range(SESSIONS)]
    sessions = await asyncio.gather(
        *(start_session(api, endpoints.sandbox_image, p, "class-7b", "sleep 100000", timeout_s=60) for p in pupils)
    )
    ran_on = [s["instance_id"] for s in sessions]
    assert set(ran_on) <= held, (ran_on, held)
    assert len(set(ran_on)) == SESSIONS, ran_on
    for session in sessions:
        assert any("starting hot" in reason for reason in session["reasons"]), session["reasons"]

    for pupil in pupils:
        assert (await api.delete(f"/v1/services/{pupil['node_id']}")).status_code == 204
    for made_one in (reservation["id"], later.json()["id"]):
        assert (await autoscaler.delete(f"/v1/reservations/{made_one}")).status_code == 204
    print(f"done {time.monotonic() - began:.0f} s after the reservation")
