"""The strict EC2 layer in front of a real moto server, driven by real boto3 and aiobotocore clients as AWS would be."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import boto3
import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from aiohttp import web
from botocore.config import Config
from botocore.exceptions import ClientError
from warmswarm_sandbox.strict_ec2 import BucketSize, StrictEc2

REGION = "us-east-1"
IMAGE_ID = "ami-12345678"  # moto without default AMIs takes any image id
CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
SANDBOX_SRC = Path(__file__).resolve().parents[2] / "harness" / "sandbox" / "src"

Ec2 = Any  # botocore clients are generated at run time: untyped
StartLayer = Callable[..., Awaitable[StrictEc2]]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s")


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    # A moto of our own, in its own process: its state and its call counts are this module's alone.
    port = _free_port()
    env = {**os.environ, "MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
async def start_layer(moto_url: str) -> AsyncIterator[StartLayer]:
    layers: list[StrictEc2] = []

    async def start(**options: Any) -> StrictEc2:
        layer = StrictEc2(moto_url, **options)
        await layer.start()
        layers.append(layer)
        return layer

    yield start
    for layer in layers:
        await layer.stop()


@pytest.fixture(scope="module")
def aio_session() -> AioSession:
    return AioSession()  # one session: the EC2 service model is loaded once, not per client


def aio_ec2(
    session: AioSession, layer: StrictEc2, attempts: int = 1, region: str = REGION
) -> AbstractAsyncContextManager[Ec2]:
    """An aiobotocore client as production makes it; `attempts` counts every attempt (1: no retries)."""
    config = AioConfig(retries={"mode": "standard", "total_max_attempts": attempts})
    client: AbstractAsyncContextManager[Ec2] = session.create_client(
        "ec2", region_name=region, endpoint_url=layer.url, config=config, **CREDENTIALS
    )
    return client


def boto_ec2(layer: StrictEc2, attempts: int = 1) -> Ec2:
    config = Config(retries={"mode": "standard", "total_max_attempts": attempts})
    return boto3.client("ec2", region_name=REGION, endpoint_url=layer.url, config=config, **CREDENTIALS)


async def admin(layer: StrictEc2, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, f"{layer.url}/strict/{path}", json=body) as answer,
    ):
        assert answer.status == 200, await answer.text()
        return await answer.json()


def run_params(zone: str, **overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "ImageId": IMAGE_ID,
        "InstanceType": "t3.medium",
        "MinCount": 1,
        "MaxCount": 1,
        "Placement": {"AvailabilityZone": zone},
        "ClientToken": uuid.uuid4().hex,
    }
    params.update(overrides)
    return params


async def launch(ec2: Ec2, zone: str = "us-east-1a", **overrides: Any) -> str:
    answer = await ec2.run_instances(**run_params(zone, **overrides))
    return str(answer["Instances"][0]["InstanceId"])


async def volume_in(ec2: Ec2, zone: str = "us-east-1a") -> str:
    return str((await ec2.create_volume(AvailabilityZone=zone, Size=1))["VolumeId"])


async def state_of(ec2: Ec2, instance_id: str) -> dict[str, Any]:
    answer = await ec2.describe_instances(InstanceIds=[instance_id])
    state: dict[str, Any] = answer["Reservations"][0]["Instances"][0]["State"]
    return state


async def volume(ec2: Ec2, volume_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await ec2.describe_volumes(VolumeIds=[volume_id]))["Volumes"][0]
    return found


async def attachment_states(ec2: Ec2, volume_id: str) -> tuple[str, list[str]]:
    found = await volume(ec2, volume_id)
    return found["State"], [attachment["State"] for attachment in found["Attachments"]]


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    deadline_s = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline_s, "condition not met in time"
        await asyncio.sleep(0.1)


def error_of(info: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    response = info.value.response
    return response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]


async def test_new_instance_is_pending_then_running(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(pending_s=1.0)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id = await launch(ec2)

        assert await state_of(ec2, instance_id) == {"Code": 0, "Name": "pending"}
        # State filters see the state AWS would show, not moto's.
        running = await ec2.describe_instances(
            InstanceIds=[instance_id], Filters=[{"Name": "instance-state-name", "Values": ["running"]}]
        )
        assert running["Reservations"] == []
        pending = await ec2.describe_instances(
            InstanceIds=[instance_id], Filters=[{"Name": "instance-state-name", "Values": ["pending", "stopped"]}]
        )
        assert pending["Reservations"][0]["Instances"][0]["InstanceId"] == instance_id

        await eventually(lambda: _is_running(ec2, instance_id))
        assert await state_of(ec2, instance_id) == {"Code": 16, "Name": "running"}


async def _is_running(ec2: Ec2, instance_id: str) -> bool:
    name: str = (await state_of(ec2, instance_id))["Name"]
    return name == "running"


async def test_state_filter_pages_through_every_instance(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(pending_s=60.0, throttle=False)  # 7 launches exceed the burst of 5
    async with aio_ec2(aio_session, layer) as ec2:
        tag = uuid.uuid4().hex
        tags = [{"ResourceType": "instance", "Tags": [{"Key": "page-test", "Value": tag}]}]
        launched = {await launch(ec2, TagSpecifications=tags) for _ in range(7)}

        pages = ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": "tag:page-test", "Values": [tag]}, {"Name": "instance-state-code", "Values": ["0"]}],
            PaginationConfig={"PageSize": 5},
        )
        seen = [
            instance["InstanceId"]
            async for page in pages
            for reservation in page["Reservations"]
            for instance in reservation["Instances"]
        ]
        assert sorted(seen) == sorted(launched)


async def test_same_client_token_launches_one_instance(start_layer: StartLayer) -> None:
    layer = await start_layer()
    ec2 = boto_ec2(layer)
    params = run_params("us-east-1b")

    first = await asyncio.to_thread(ec2.run_instances, **params)
    again = await asyncio.to_thread(ec2.run_instances, **params)

    assert again["Instances"][0]["InstanceId"] == first["Instances"][0]["InstanceId"]
    assert again["ReservationId"] == first["ReservationId"]
    calls = await admin(layer, "GET", "calls")
    assert calls["received"]["RunInstances"] == 2
    assert calls["forwarded"]["RunInstances"] == 1  # only one reached moto


async def test_same_client_token_with_other_parameters_is_refused(start_layer: StartLayer) -> None:
    layer = await start_layer()
    ec2 = boto_ec2(layer)
    params = run_params("us-east-1b")
    await asyncio.to_thread(ec2.run_instances, **params)

    with pytest.raises(ClientError) as refused:
        await asyncio.to_thread(ec2.run_instances, **{**params, "InstanceType": "t3.large"})

    assert error_of(refused) == ("IdempotentParameterMismatch", 400)
    assert (await admin(layer, "GET", "calls"))["forwarded"]["RunInstances"] == 1


async def test_insufficient_capacity_is_per_type_and_zone(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer()
    offering = {"instance_type": "t3.medium", "availability_zone": "us-east-1a"}
    listed = await admin(layer, "POST", "capacity", {**offering, "available": False})
    assert listed == {"unavailable": [offering]}

    # Two attempts: botocore retries an HTTP 500, and so this AWS error, once before giving up.
    async with aio_ec2(aio_session, layer, attempts=2) as ec2:
        with pytest.raises(ClientError) as refused:
            await ec2.run_instances(**run_params("us-east-1a"))
        assert error_of(refused) == ("InsufficientInstanceCapacity", 500)
        assert refused.value.response["ResponseMetadata"]["RetryAttempts"] == 1

        assert await launch(ec2, "us-east-1b")  # the other AZ has room
        assert await launch(ec2, "us-east-1a", InstanceType="t3.large")  # and so has another type

        await admin(layer, "POST", "capacity", {**offering, "available": True})
        assert await launch(ec2, "us-east-1a")

    calls = await admin(layer, "GET", "calls")
    assert calls["answers"]["RunInstances"] == {"InsufficientInstanceCapacity": 2, "ok": 3}
    assert calls["forwarded"]["RunInstances"] == 3
    assert await admin(layer, "GET", "capacity") == {"unavailable": []}


async def test_capacity_without_zone_means_every_zone(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer()
    layer.set_capacity("t3.xlarge", None, available=False)
    async with aio_ec2(aio_session, layer) as ec2:
        subnet = (await ec2.describe_subnets())["Subnets"][0]
        for where in ({"Placement": {"AvailabilityZone": "us-east-1c"}}, {"SubnetId": subnet["SubnetId"]}):
            with pytest.raises(ClientError) as refused:
                await ec2.run_instances(ImageId=IMAGE_ID, InstanceType="t3.xlarge", MinCount=1, MaxCount=1, **where)
            assert error_of(refused) == ("InsufficientInstanceCapacity", 500)


async def test_a_start_finds_no_capacity_kept_while_stopped_and_states_are_checked(
    start_layer: StartLayer, aio_session: AioSession
) -> None:
    layer = await start_layer(pending_s=30.0)
    async with aio_ec2(aio_session, layer) as ec2:
        pending, stopping = await launch(ec2), await launch(ec2)
        with pytest.raises(ClientError) as not_running:
            await ec2.stop_instances(InstanceIds=[stopping])  # still pending: AWS stops only a running instance
        assert error_of(not_running) == ("IncorrectInstanceState", 400)
        await ec2.start_instances(InstanceIds=[pending])  # pending already: left as it is
        assert await state_of(ec2, pending) == {"Code": 0, "Name": "pending"}

    layer.pending_s = 0.0
    async with aio_ec2(aio_session, layer) as ec2:
        await ec2.stop_instances(InstanceIds=[stopping])
        await ec2.stop_instances(InstanceIds=[stopping])  # stopped already: left as it is
        layer.set_capacity("t3.medium", "us-east-1a", available=False)
        with pytest.raises(ClientError) as no_room:
            await ec2.start_instances(InstanceIds=[stopping])
        assert error_of(no_room) == ("InsufficientInstanceCapacity", 500)
        assert (await state_of(ec2, stopping))["Name"] == "stopped"

        layer.set_capacity("t3.medium", "us-east-1a", available=True)
        await ec2.start_instances(InstanceIds=[stopping])
        assert (await state_of(ec2, stopping))["Name"] == "running"
        await ec2.terminate_instances(InstanceIds=[stopping])
        with pytest.raises(ClientError) as gone:
            await ec2.start_instances(InstanceIds=[stopping])
        assert error_of(gone) == ("IncorrectInstanceState", 400)


async def test_burst_of_launches_is_throttled_and_retries_get_through(
    start_layer: StartLayer, aio_session: AioSession
) -> None:
    # A small bucket, so the test sees throttling and its recovery in a second or two.
    layer = await start_layer(buckets={"run_instances": BucketSize(burst=2, refill_per_s=5)})

    no_retries = boto_ec2(layer)
    outcomes: list[tuple[str, int]] = []
    for _ in range(6):
        try:
            await asyncio.to_thread(no_retries.run_instances, **run_params("us-east-1a"))
            outcomes.append(("ok", 200))
        except ClientError as error:
            outcomes.append((error.response["Error"]["Code"], error.response["ResponseMetadata"]["HTTPStatusCode"]))
    assert outcomes.count(("ok", 200)) >= 2
    assert set(outcomes) == {("ok", 200), ("RequestLimitExceeded", 503)}

    layer.reset()
    async with aio_ec2(aio_session, layer, attempts=10) as ec2:
        launched = await asyncio.gather(*(launch(ec2) for _ in range(6)))
    assert len(set(launched)) == 6
    answers = (await admin(layer, "GET", "calls"))["answers"]["RunInstances"]
    assert answers["ok"] == 6
    assert answers["RequestLimitExceeded"] >= 1  # botocore backed off and tried again
    # Describe calls draw from their own, bigger bucket.
    assert (await admin(layer, "GET", "throttle"))["buckets"]["describe"]["burst"] == 100


async def test_volume_attaches_only_in_its_own_zone(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer()
    # Another region: the layer's own reads of moto must follow the caller's region.
    async with aio_ec2(aio_session, layer, region="eu-west-1") as ec2:
        instance_id = await launch(ec2, "eu-west-1a")
        volume_id = await volume_in(ec2, "eu-west-1b")

        with pytest.raises(ClientError) as refused:
            await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        assert error_of(refused) == ("InvalidVolume.ZoneMismatch", 400)
        assert await attachment_states(ec2, volume_id) == ("available", [])


async def test_volume_attaches_to_one_instance_only(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(attach_s=0.3)
    async with aio_ec2(aio_session, layer) as ec2:
        first, second = await launch(ec2), await launch(ec2)
        volume_id = await volume_in(ec2)
        await ec2.attach_volume(VolumeId=volume_id, InstanceId=first, Device="/dev/sdf")

        for instance_id in (second, first):  # while attaching: to another instance, or again to the same
            with pytest.raises(ClientError) as refused:
                await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdg")
            assert error_of(refused) == ("VolumeInUse", 400)

        await eventually(lambda: _attachment_is(ec2, volume_id, ["attached"]))
        with pytest.raises(ClientError) as refused:
            await ec2.attach_volume(VolumeId=volume_id, InstanceId=second, Device="/dev/sdf")
        assert error_of(refused) == ("VolumeInUse", 400)
        assert (await volume(ec2, volume_id))["Attachments"][0]["InstanceId"] == first


async def _attachment_is(ec2: Ec2, volume_id: str, states: list[str]) -> bool:
    return (await attachment_states(ec2, volume_id))[1] == states


async def test_attach_takes_time(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(attach_s=1.0)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id = await launch(ec2)
        volume_id = await volume_in(ec2)

        attached = await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        assert attached["State"] == "attaching"
        assert await attachment_states(ec2, volume_id) == ("in-use", ["attaching"])
        described = await ec2.describe_instances(InstanceIds=[instance_id])
        mappings = described["Reservations"][0]["Instances"][0]["BlockDeviceMappings"]
        assert {"/dev/sdf": "attaching"}.items() <= {m["DeviceName"]: m["Ebs"]["Status"] for m in mappings}.items()
        filtered = await ec2.describe_volumes(
            VolumeIds=[volume_id], Filters=[{"Name": "attachment.status", "Values": ["attached"]}]
        )
        assert filtered["Volumes"] == []

        await eventually(lambda: _attachment_is(ec2, volume_id, ["attached"]))
        assert await attachment_states(ec2, volume_id) == ("in-use", ["attached"])


async def test_attach_to_a_pending_instance_is_refused(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(pending_s=30.0)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id = await launch(ec2)
        volume_id = await volume_in(ec2)

        with pytest.raises(ClientError) as refused:
            await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        assert error_of(refused) == ("IncorrectInstanceState", 400)
        # A DryRun checks permissions only, as on AWS.
        with pytest.raises(ClientError) as dry:
            await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf", DryRun=True)
        assert error_of(dry)[0] == "DryRunOperation"


async def test_volume_in_use_cannot_be_deleted(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(attach_s=0.3, detach_s=0.3)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id = await launch(ec2)
        volume_id = await volume_in(ec2)
        await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        async def refused_now() -> None:
            with pytest.raises(ClientError) as refused:
                await ec2.delete_volume(VolumeId=volume_id)
            assert error_of(refused) == ("VolumeInUse", 400)

        await refused_now()  # attaching
        await eventually(lambda: _attachment_is(ec2, volume_id, ["attached"]))
        await refused_now()  # attached
        await ec2.detach_volume(VolumeId=volume_id, InstanceId=instance_id)
        await refused_now()  # detaching
        await eventually(lambda: _attachment_is(ec2, volume_id, []))

        await ec2.delete_volume(VolumeId=volume_id)
        with pytest.raises(ClientError) as gone:
            await volume(ec2, volume_id)
        assert error_of(gone)[0] == "InvalidVolume.NotFound"


async def _last_modification(ec2: Ec2, volume_id: str) -> dict[str, Any]:
    found = (await ec2.describe_volumes_modifications(VolumeIds=[volume_id]))["VolumesModifications"]
    assert len(found) == 1, found  # the last one only, as AWS describes it
    last: dict[str, Any] = found[0]
    return last


async def test_a_volume_grows_through_modifying_and_optimizing_once_in_six_hours(
    start_layer: StartLayer, aio_session: AioSession
) -> None:
    layer = await start_layer()
    layer.modifying_s, layer.optimizing_s = 0.5, 0.5
    async with aio_ec2(aio_session, layer) as ec2:
        volume_id = await volume_in(ec2)  # 1 GiB

        with pytest.raises(ClientError) as smaller:
            await ec2.modify_volume(VolumeId=volume_id, Size=1 - 1)
        assert error_of(smaller) == ("InvalidParameterValue", 400)

        grown = (await ec2.modify_volume(VolumeId=volume_id, Size=4))["VolumeModification"]
        assert (grown["ModificationState"], grown["OriginalSize"], grown["TargetSize"]) == ("modifying", 1, 4)
        assert "EndTime" not in grown
        with pytest.raises(ClientError) as busy:
            await ec2.modify_volume(VolumeId=volume_id, Size=8)
        assert error_of(busy) == ("IncorrectModificationState", 400)

        async def reaches(state: str) -> bool:
            return bool((await _last_modification(ec2, volume_id))["ModificationState"] == state)

        await eventually(lambda: reaches("optimizing"))
        await eventually(lambda: reaches("completed"))
        done = await _last_modification(ec2, volume_id)
        assert (done["Progress"], done["TargetSize"]) == (100, 4)
        assert "EndTime" in done
        assert (await volume(ec2, volume_id))["Size"] == 4

        # Completed, but within AWS's six hours of the last: refused, and the size is unchanged.
        with pytest.raises(ClientError) as early:
            await ec2.modify_volume(VolumeId=volume_id, Size=8)
        assert error_of(early) == ("VolumeModificationRateExceeded", 400)
        assert (await volume(ec2, volume_id))["Size"] == 4

        await admin(layer, "POST", "config", {"modify_cooldown_s": 0.0})  # six hours later
        again = (await ec2.modify_volume(VolumeId=volume_id, Size=8))["VolumeModification"]
        assert (again["OriginalSize"], again["TargetSize"]) == (4, 8)
        assert (await _last_modification(ec2, volume_id))["TargetSize"] == 8


async def test_detach_without_instance_id(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(attach_s=0.0, detach_s=0.5)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id = await launch(ec2)
        volume_id = await volume_in(ec2)
        await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        detached = await ec2.detach_volume(VolumeId=volume_id)  # moto alone answers HTTP 500 here

        assert (detached["State"], detached["InstanceId"]) == ("detaching", instance_id)
        assert await attachment_states(ec2, volume_id) == ("in-use", ["detaching"])
        in_use = await ec2.describe_volumes(VolumeIds=[volume_id], Filters=[{"Name": "status", "Values": ["in-use"]}])
        assert [found["VolumeId"] for found in in_use["Volumes"]] == [volume_id]
        with pytest.raises(ClientError) as again:
            await ec2.detach_volume(VolumeId=volume_id)
        assert error_of(again) == ("IncorrectState", 400)

        await eventually(lambda: _attachment_is(ec2, volume_id, []))
        assert (await volume(ec2, volume_id))["State"] == "available"


async def test_terminating_the_instance_frees_its_volume(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer(attach_s=0.0, detach_s=0.5)
    async with aio_ec2(aio_session, layer) as ec2:
        instance_id, next_instance_id = await launch(ec2), await launch(ec2)
        volume_id = await volume_in(ec2)
        await ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")

        await ec2.terminate_instances(InstanceIds=[instance_id])

        # AWS detaches while the instance shuts down: not yet free for the next one.
        assert await attachment_states(ec2, volume_id) == ("in-use", ["detaching"])
        with pytest.raises(ClientError) as busy:
            await ec2.attach_volume(VolumeId=volume_id, InstanceId=next_instance_id, Device="/dev/sdf")
        assert error_of(busy)[0] == "IncorrectState"
        await eventually(lambda: _attachment_is(ec2, volume_id, []))
        assert (await volume(ec2, volume_id))["State"] == "available"  # kept: DeleteOnTermination is false

        await ec2.attach_volume(VolumeId=volume_id, InstanceId=next_instance_id, Device="/dev/sdf")
        assert (await volume(ec2, volume_id))["Attachments"][0]["InstanceId"] == next_instance_id


async def test_injected_faults_fail_the_next_calls(start_layer: StartLayer, aio_session: AioSession) -> None:
    layer = await start_layer()
    fault = {"action": "DescribeInstances", "code": "InternalError", "status": 500, "times": 2}
    assert len((await admin(layer, "POST", "fail", fault))["faults"]) == 1

    ec2 = boto_ec2(layer)
    for _ in range(2):
        with pytest.raises(ClientError) as failed:
            await asyncio.to_thread(ec2.describe_instances)
        assert error_of(failed) == ("InternalError", 500)
    await asyncio.to_thread(ec2.describe_instances)  # the fault is used up
    assert (await admin(layer, "GET", "fail"))["faults"] == []

    # With retries, one failure is botocore's business, not the caller's.
    await admin(layer, "POST", "fail", {"action": "CreateVolume", "code": "Unavailable", "status": 503})
    async with aio_ec2(aio_session, layer, attempts=3) as retrying:
        assert await volume_in(retrying)

    answers = (await admin(layer, "GET", "calls"))["answers"]
    assert answers["DescribeInstances"] == {"InternalError": 2, "ok": 1}
    assert answers["CreateVolume"] == {"Unavailable": 1, "ok": 1}


async def test_calls_counts_what_came_in_and_what_reached_moto(start_layer: StartLayer) -> None:
    layer = await start_layer(buckets={"describe": BucketSize(burst=1, refill_per_s=0.01)})
    ec2 = boto_ec2(layer)

    await asyncio.to_thread(ec2.describe_volumes)
    with pytest.raises(ClientError) as throttled:
        await asyncio.to_thread(ec2.describe_volumes)

    assert error_of(throttled) == ("RequestLimitExceeded", 503)
    assert await admin(layer, "GET", "calls") == {
        "received": {"DescribeVolumes": 2},
        "forwarded": {"DescribeVolumes": 1},
        "lookups": {},
        "answers": {"DescribeVolumes": {"ok": 1, "RequestLimitExceeded": 1}},
    }
    await admin(layer, "POST", "reset")
    assert (await admin(layer, "GET", "calls"))["received"] == {}


async def test_calls_pass_through_byte_for_byte() -> None:
    received: list[tuple[dict[str, str], bytes]] = []

    async def upstream(request: web.Request) -> web.Response:
        received.append((dict(request.headers), await request.read()))
        return web.Response(body=REGIONS_XML, content_type="text/xml")

    app = web.Application()
    app.router.add_post("/", upstream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    layer = StrictEc2(f"http://{host}:{port}")
    await layer.start()
    try:
        ec2 = boto_ec2(layer)
        sent: list[Any] = []
        ec2.meta.events.register("before-send.ec2", lambda request, **_: sent.append(request))

        regions = await asyncio.to_thread(ec2.describe_regions, RegionNames=["us-east-1"])

        assert [region["RegionName"] for region in regions["Regions"]] == ["us-east-1"]
        [(headers, body)] = received
        assert body.decode() == _text(sent[0].body)
        for name in ("Authorization", "X-Amz-Date", "User-Agent", "Content-Type"):
            assert headers[name] == _text(sent[0].headers[name])
    finally:
        await layer.stop()
        await runner.cleanup()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # botocore mixes both in a prepared request


REGIONS_XML = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<DescribeRegionsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r-1</requestId>'
    b"<regionInfo><item><regionName>us-east-1</regionName><regionEndpoint>ec2.us-east-1.amazonaws.com"
    b"</regionEndpoint></item></regionInfo></DescribeRegionsResponse>"
)


async def test_admin_api_refuses_bad_requests(start_layer: StartLayer) -> None:
    layer = await start_layer()
    async with aiohttp.ClientSession() as http:
        for method, path, body in (
            ("POST", "capacity", {"instance_type": "t3.medium", "available": "no"}),
            ("POST", "fail", {"code": "InternalError"}),
            ("POST", "throttle", {"bucket": "nope", "burst": 1, "refill_per_s": 1}),
            ("GET", "nothing-here", None),
        ):
            async with http.request(method, f"{layer.url}/strict/{path}", json=body) as answer:
                assert answer.status in (400, 404), (path, answer.status)


async def test_cli_serves_until_sigterm(moto_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SANDBOX_SRC), os.environ.get("PYTHONPATH")]))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "warmswarm_sandbox.strict_ec2",
        "--upstream",
        moto_url,
        "--port",
        "0",
        "--pending-s",
        "2.5",
        "--no-throttle",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        url = (await asyncio.wait_for(process.stdout.readline(), timeout=15)).decode().strip()
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as http, http.get(f"{url}/strict/config") as answer:
            assert await answer.json() == {
                "pending_s": 2.5,
                "attach_s": 0.5,
                "detach_s": 0.5,
                "modifying_s": 1.0,
                "optimizing_s": 2.0,
                "modify_cooldown_s": 6 * 3600.0,
                "throttle": False,
            }
        ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=url, **CREDENTIALS)
        launched = await asyncio.to_thread(ec2.run_instances, **run_params("us-east-1a"))
        instance_id = launched["Instances"][0]["InstanceId"]
        described = await asyncio.to_thread(ec2.describe_instances, InstanceIds=[instance_id])
        assert described["Reservations"][0]["Instances"][0]["State"]["Name"] == "pending"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0


async def test_run_instances_draws_one_token_per_instance_from_its_resource_bucket(
    start_layer: StartLayer, aio_session: AioSession
) -> None:
    # AWS's resource rate limit counts instances, not calls: one call for 8 machines takes 8 tokens.
    layer = await start_layer(buckets={"run_instances_instances": BucketSize(burst=10, refill_per_s=0.01)})

    no_retries = boto_ec2(layer)
    many = await asyncio.to_thread(no_retries.run_instances, **run_params("us-east-1a", MaxCount=8))
    with pytest.raises(ClientError) as refused:
        await asyncio.to_thread(no_retries.run_instances, **run_params("us-east-1a", MaxCount=3))
    one_more = await asyncio.to_thread(no_retries.run_instances, **run_params("us-east-1a", MaxCount=2))

    assert len(many["Instances"]) == 8
    assert error_of(refused) == ("RequestResourceCountExceeded", 503)
    assert len(one_more["Instances"]) == 2
