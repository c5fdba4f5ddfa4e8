"""The autoscaler's API as a process in the sandbox: cache volumes listed and expired, and a dry run.

The volumes are made with boto3 through the sandbox's strict EC2 layer, tagged as the autoscaler tags
the volumes it creates; the janitor that deletes an expired one is the real one, in the real loop.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import aiodocker
import httpx
import pytest
import redis
from botocore.exceptions import ClientError
from prometheus_client.parser import text_string_to_metric_families
from warmswarm_demos.workload import create_service, wait_for
from warmswarm_models import CLUSTER_TAG, ROLE_CACHE, ROLE_TAG, VOLUME_EXPIRES_AT_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import SANDBOX_IMAGE_ID, new_ops_token, start_autoscaler

T = TypeVar("T")

# One cluster per test session: volumes left by an earlier module or run are never this cluster's.
CLUSTER = f"api-{uuid.uuid4().hex[:6]}"
GIB = 2**30
DEVICE = "/dev/sdf"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def eventually(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0, interval_s: float = 0.25) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)


def create_cache_volume(ec2: Any, owner: dict[str, str], zone: str) -> str:
    """A cache volume of CLUSTER, tagged as the autoscaler's CreateVolume tags one."""
    tags = {CLUSTER_TAG: CLUSTER, ROLE_TAG: ROLE_CACHE, **owner}
    answer = ec2.create_volume(
        AvailabilityZone=zone,
        Size=1,
        VolumeType="gp3",
        TagSpecifications=[{"ResourceType": "volume", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}],
    )
    volume_id = str(answer["VolumeId"])
    eventually(f"{volume_id} available", lambda: volume_state(ec2, volume_id) == "available")
    return volume_id


def volume_state(ec2: Any, volume_id: str) -> str | None:
    """Its EC2 state; None once it is gone."""
    try:
        found = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    except ClientError as error:
        if error.response["Error"]["Code"] == "InvalidVolume.NotFound":
            return None
        raise
    return str(found[0]["State"]) if found else None


def tags_of(ec2: Any, volume_id: str) -> dict[str, str]:
    (found,) = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    return {t["Key"]: t["Value"] for t in found.get("Tags", [])}


def listed(http: httpx.Client, volume_id: str, **params: str) -> dict[str, Any] | None:
    answer = http.get("/v1/volumes", params=params)
    if answer.status_code != 200:
        return None  # before the first cycle
    return next((v for v in answer.json()["volumes"] if v["volume_id"] == volume_id), None)


@pytest.fixture(scope="class")
def http(sandbox: Sandbox) -> Iterator[httpx.Client]:
    """An autoscaler of CLUSTER for the volume tests only: stopped before the dry run starts its own."""
    # A fast resync and a full listing each second: the volumes below are made by hand, not by the autoscaler, which
    # sees such a volume at its next full listing only (ec2_book.py); every listing reflects EC2 within a second or so.
    ops_token = new_ops_token()
    settings = {
        "WARMSWARM_CLUSTER": CLUSTER,
        "AUTOSCALING_RESYNC_INTERVAL_S": "1",
        "AUTOSCALING_EC2_FULL_LISTING_INTERVAL_S": "1",
    }
    url = start_autoscaler(
        sandbox,
        name="autoscaling-api",
        settings=settings,
        ops_token=ops_token,
    )
    with httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {ops_token}"}) as client:
        yield client
    sandbox.kill("autoscaling-api")


class TestVolumes:
    def test_volumes_are_listed_with_their_owner_and_filtered_by_user(self, http: httpx.Client, ec2: Any) -> None:
        ana = {"user_id": unique("ana"), "project_id": "p1", "node_id": unique("n")}
        ben = {"user_id": unique("ben"), "project_id": "p2", "node_id": unique("n")}
        anas = create_cache_volume(ec2, ana, "us-east-1a")
        bens = create_cache_volume(ec2, ben, "us-east-1b")

        # The janitor finds them released (no machine holds them) and tags when they expire.
        entry = eventually(
            "ana's volume listed as released", lambda: (v := listed(http, anas)) and v["expires_at"] and v
        )

        assert entry["owner"] == ana
        assert (entry["availability_zone"], entry["state"], entry["size_gib"], entry["volume_type"]) == (
            "us-east-1a",
            "available",
            1,
            "gp3",
        )
        assert entry["attached_to"] is None
        assert entry["released_at"] is not None
        assert entry["released_at"] < entry["expires_at"], "kept for the default TTL after release"
        assert listed(http, bens) is not None
        only_ana = http.get("/v1/volumes", params={"user_id": ana["user_id"]}).json()["volumes"]
        assert [v["volume_id"] for v in only_ana] == [anas]

    def test_the_status_and_the_volumes_are_shown_to_the_ops_token_only(self, http: httpx.Client, ec2: Any) -> None:
        owner = {"user_id": unique("ed"), "project_id": "p1", "node_id": unique("n")}
        volume_id = create_cache_volume(ec2, owner, "us-east-1a")
        eventually("the volume listed", lambda: listed(http, volume_id))

        for path in ("/v1/status", "/v1/volumes"):
            for authorization in ("", "Bearer not-the-token-at-all-0123"):
                refused = http.get(path, headers={"Authorization": authorization})
                assert refused.status_code == 401, refused.text
                assert refused.headers["WWW-Authenticate"] == "Bearer"
                assert owner["user_id"] not in refused.text
                assert volume_id not in refused.text
        with httpx.Client(base_url=http.base_url, timeout=10) as anyone:
            assert [anyone.get(path).status_code for path in ("/health", "/ready", "/metrics")] == [200, 200, 200]

    def test_expire_makes_the_janitor_delete_the_volume(self, http: httpx.Client, ec2: Any) -> None:
        owner = {"user_id": unique("cy"), "project_id": "p1", "node_id": unique("n")}
        volume_id = create_cache_volume(ec2, owner, "us-east-1a")
        eventually("the volume listed", lambda: listed(http, volume_id))

        # Without the ops token: refused, and the volume keeps its expiry.
        tags_before = tags_of(ec2, volume_id)
        for authorization in ("", "Bearer not-the-token-at-all-0123"):
            refused = http.post(f"/v1/volumes/{volume_id}/expire", headers={"Authorization": authorization})
            assert refused.status_code == 401, refused.text
        assert tags_of(ec2, volume_id) == tags_before

        answer = http.post(f"/v1/volumes/{volume_id}/expire")

        assert answer.status_code == 202, answer.text
        body = answer.json()
        assert body["volume_id"] == volume_id
        assert tags_of(ec2, volume_id)[VOLUME_EXPIRES_AT_TAG] == body["expires_at"]
        eventually("the janitor deletes it", lambda: volume_state(ec2, volume_id) in (None, "deleting", "deleted"))
        decisions = http.get("/v1/status").json()["decisions"]
        kinds = {(d["kind"], d["target"]) for d in decisions}
        assert {("expire_volume", volume_id), ("delete_volume", volume_id)} <= kinds

    def test_expire_refuses_an_attached_volume_and_an_unknown_one(self, http: httpx.Client, ec2: Any) -> None:
        owner = {"user_id": unique("di"), "project_id": "p1", "node_id": unique("n")}
        volume_id = create_cache_volume(ec2, owner, "us-east-1a")
        # A machine that is not this cluster's (no cluster tag, no boot script): the autoscaler leaves it be.
        launched = ec2.run_instances(
            ImageId=SANDBOX_IMAGE_ID,
            MinCount=1,
            MaxCount=1,
            InstanceType="t3.medium",
            Placement={"AvailabilityZone": "us-east-1a"},
        )
        instance_id = str(launched["Instances"][0]["InstanceId"])
        try:
            eventually("the instance running", lambda: instance_state(ec2, instance_id) == "running")
            ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=DEVICE)
            eventually("the volume in use", lambda: volume_state(ec2, volume_id) == "in-use")

            refused = http.post(f"/v1/volumes/{volume_id}/expire")

            assert refused.status_code == 409, refused.text
            assert f"to {instance_id}" in refused.json()["detail"]
        finally:
            ec2.terminate_instances(InstanceIds=[instance_id])

        unknown = http.post("/v1/volumes/vol-0123456789abcdef0/expire")
        assert unknown.status_code == 404
        assert "no cache volume vol-0123456789abcdef0" in unknown.json()["detail"]


def instance_state(ec2: Any, instance_id: str) -> str:
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservation["Instances"][0]["State"]["Name"])


async def test_dry_run_reports_a_launch_and_launches_nothing(sandbox: Sandbox, endpoints: Endpoints, ec2: Any) -> None:
    cluster = unique("dry")
    ops_token = new_ops_token()
    url = start_autoscaler(
        sandbox,
        name="autoscaling-dry",
        settings={"WARMSWARM_CLUSTER": cluster, "AUTOSCALING_DRY_RUN": "true"},
        ops_token=ops_token,
    )
    owner = {"user_id": unique("eve"), "project_id": "p1", "node_id": unique("n")}
    ops = {"Authorization": f"Bearer {ops_token}"}
    try:
        async with (
            aiodocker.Docker(url=endpoints.docker_host) as docker,
            httpx.AsyncClient(base_url=url, headers=ops) as http,
        ):
            # Before any work exists: a process that ignores the setting must not get the chance to launch.
            answer = await http.get("/v1/status")
            assert answer.json()["dry_run"] is True, "main.py must pass dry_run=settings.dry_run to the Autoscaler"
            service_id = await create_service(
                docker, unique("api-dry"), endpoints.sandbox_image, owner=owner, cpus=1, memory_bytes=GIB
            )
            try:

                async def launch_decision() -> dict[str, Any] | None:
                    status: dict[str, Any] = (await http.get("/v1/status")).json()
                    return next((d for d in status["decisions"] if d["kind"] == "launch_batch"), None)

                decision, _ = await wait_for("a launch decision", launch_decision, timeout_s=60)

                # A few more cycles, counted rather than waited for: still nothing launched, nothing told again.
                async def cycles_done() -> float:
                    return sample((await http.get("/metrics")).text, "warmswarm_cycles_total", outcome="ok")

                seen = await cycles_done()

                async def three_more_cycles() -> bool:
                    return await cycles_done() >= seen + 3

                await wait_for("three more cycles", three_more_cycles, timeout_s=60)
                status = (await http.get("/v1/status")).json()
                metrics = (await http.get("/metrics")).text
            finally:
                await docker.services.delete(service_id)
    finally:
        sandbox.kill("autoscaling-dry")

    assert decision["dry_run"] is True
    assert (decision["error"], decision["created"]) == (None, None)
    assert "cheapest fit" in decision["reason"]
    assert status["dry_run"] is True
    assert [d["kind"] for d in status["decisions"]] == ["launch_batch"], "reported once, not every cycle"
    assert any(p["service"].startswith("api-dry") for p in status["pending"])
    ours = ec2.describe_instances(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}])["Reservations"]
    assert ours == [], "a dry run launches nothing"
    assert sample(metrics, "warmswarm_dry_run") == 1
    assert sample(metrics, "warmswarm_launches_total", reason="pending_work") == 0
    assert 'warmswarm_aws_calls_total{operation="RunInstances"' not in metrics


def sample(exposition: str, name: str, **labels: str) -> float:
    """One sample's value in a Prometheus text exposition, as Prometheus reads it."""
    for family in text_string_to_metric_families(exposition):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    raise AssertionError(f"no sample {name}{labels} in the exposition")


# The probe of issue 42: a number the document allowed, which main stored and then could neither answer nor list.
FAR_MOMENT = 4367682912357125.0
SIZE = {"cpus": 0.5, "memory_bytes": 2**28}


def reservations_key(cluster: str) -> str:
    """Where the autoscaler of `cluster` keeps its reservations (settings.reservations_key)."""
    return f"warmswarm:autoscaling:{cluster}:reservations"


@pytest.fixture
def raw_redis(endpoints: Endpoints) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(endpoints.redis_url)
    yield client
    client.close()


class TestReservationBounds:
    def test_a_moment_past_the_bounds_is_a_422_and_nothing_is_stored(
        self, http: httpx.Client, raw_redis: redis.Redis
    ) -> None:
        body = {"group": "lab", "sessions": 1, "resources": SIZE, "at": FAR_MOMENT}
        stored_before = raw_redis.hlen(reservations_key(CLUSTER))

        answer = http.post("/v1/reservations", json=body)

        assert answer.status_code == 422, answer.text
        (problem,) = answer.json()["detail"]
        assert problem["loc"][:2] == ["body", "at"]
        assert "not a moment between 1970 and 3000" in problem["msg"]
        # Two years ahead is a moment, but further than a reservation may be made.
        two_years = http.post("/v1/reservations", json={**body, "at": time.time() + 2 * 365 * 86_400})
        assert two_years.status_code == 422, two_years.text
        assert "more than 365 days ahead" in two_years.text
        assert raw_redis.hlen(reservations_key(CLUSTER)) == stored_before, "a refused reservation is never stored"
        for path in ("/v1/reservations", "/v1/status"):
            assert http.get(path).status_code == 200

    def test_unreadable_records_are_named_skipped_and_deletable(
        self, http: httpx.Client, raw_redis: redis.Redis
    ) -> None:
        key = reservations_key(CLUSTER)
        good = http.post(
            "/v1/reservations", json={"group": "lab", "sessions": 1, "resources": SIZE, "at": time.time() + 3600}
        )
        assert good.status_code == 201, good.text
        # What main stored for the probe, and a value nobody can read.
        far = "resv-00000000f00d"
        stored_by_main = {
            "id": far,
            "group": "lab",
            "sessions": 1,
            "resources": SIZE,
            "at": FAR_MOMENT,
            "zone": None,
            "release_after_s": 900,
            "created_at": time.time(),
        }
        raw_redis.hset(key, far, json.dumps(stored_by_main))
        raw_redis.hset(key, "resv-00000000beef", "{not json")
        try:
            listed_now = http.get("/v1/reservations")
            assert listed_now.status_code == 200, listed_now.text
            body = listed_now.json()
            assert [r["id"] for r in body["reservations"]] == [good.json()["id"]]
            reasons = {u["id"]: u["reason"] for u in body["unreadable"]}
            assert set(reasons) == {far, "resv-00000000beef"}
            assert reasons[far].startswith("at:"), reasons[far]

            # From the next cycle on, the status names them too (and still answers).
            def named_in_status() -> dict[str, Any] | None:
                status = http.get("/v1/status")
                assert status.status_code == 200, status.text
                found = {u["id"]: u for u in status.json()["unreadable_records"]}
                return found if set(found) == {far, "resv-00000000beef"} else None

            in_status = eventually("the status names the unreadable records", named_in_status)
            assert in_status[far]["kind"] == "reservation"
            assert "less than or equal to" in in_status[far]["reason"]

            for record_id in (far, "resv-00000000beef"):
                assert http.delete(f"/v1/reservations/{record_id}").status_code == 204
            after = http.get("/v1/reservations").json()
            assert after["unreadable"] == []
            assert raw_redis.hkeys(key) == [good.json()["id"].encode()]
        finally:
            raw_redis.delete(key)
