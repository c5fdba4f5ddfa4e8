"""The EC2 adapter's cache volumes against the strict EC2 layer in front of a real moto server.

moto alone attaches and detaches at once, ignores availability zones and lets a pending instance take a
volume; the strict layer adds those AWS rules back, so what passes here is what AWS would answer.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import aiohttp
import pytest
from warmswarm_autoscaling.adapters.ec2_aiobotocore import ROLE_ROOT, AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client, ec2_client
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, LaunchRequest, VolumeRequest
from warmswarm_autoscaling.snapshot import Instance, Volume
from warmswarm_autoscaling.tags import grown_tags
from warmswarm_models import CLUSTER_TAG, ROLE_CACHE, ROLE_TAG, ROLE_WORKER, VOLUME_TTL_TAG
from warmswarm_sandbox.strict_ec2 import StrictEc2

T = TypeVar("T")

REGION = "us-east-1"
ZONE = "us-east-1a"
OTHER_ZONE = "us-east-1b"
IMAGE_ID = "ami-12345678"  # moto without default AMIs takes any image id
DEVICE = "/dev/sdf"
# Long enough to see the in-between states (pending, attaching, detaching), short enough to wait out.
TRANSITION_S = 0.5


@pytest.fixture(scope="module")
async def layer(moto_endpoint: str) -> AsyncIterator[StrictEc2]:
    # Started in the tests' event loop: it serves while a test awaits the adapter's calls.
    strict = StrictEc2(moto_endpoint, pending_s=TRANSITION_S, attach_s=TRANSITION_S, detach_s=TRANSITION_S)
    await strict.start()
    try:
        yield strict
    finally:
        await strict.stop()


@pytest.fixture(scope="module")
async def client(layer: StrictEc2) -> AsyncIterator[Ec2Client]:
    assert layer.url is not None
    # Retries as production has them: a throttled call (the layer keeps AWS's buckets) is tried again.
    async with ec2_client(layer.url, REGION, max_attempts=4) as ec2:
        yield ec2


@pytest.fixture(autouse=True)
async def _fresh_world(layer: StrictEc2) -> None:
    # Through the layer, so it forgets its mirrors (moves, pending instances) with moto's world.
    async with aiohttp.ClientSession() as http, http.post(f"{layer.url}/moto-api/reset") as answer:
        assert answer.status == 200
    layer.reset()  # refills the throttling buckets: each test starts with AWS's full burst


@pytest.fixture
def ec2(ec2_adapter: AiobotocoreEc2) -> AiobotocoreEc2:
    return ec2_adapter


def volume_request(cluster: str, **overrides: Any) -> VolumeRequest:
    fields: dict[str, Any] = {
        "availability_zone": ZONE,
        "size_gib": 8,
        "volume_type": "gp3",
        "tags": {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_CACHE, "user_id": "42"},
        "client_token": uuid.uuid4().hex,
    }
    fields.update(overrides)
    return VolumeRequest(**fields)


async def eventually(read: Callable[[], Awaitable[T | None]], timeout_s: float = 10.0) -> T:
    """Polls until `read` returns something truthy: attach, detach and boot take a while on AWS too."""
    async with asyncio.timeout(timeout_s):
        while True:
            if value := await read():
                return value
            await asyncio.sleep(0.05)


async def launch(ec2: AiobotocoreEc2, cluster: str, zone: str = ZONE) -> str:
    request = LaunchRequest(
        instance_type="t3.medium",
        availability_zone=zone,
        image_id=IMAGE_ID,
        user_data="#!/bin/sh\n",
        tags={CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER, "user_id": "42"},
        client_token=uuid.uuid4().hex,
    )
    return await ec2.run_instance(request)


async def running(ec2: AiobotocoreEc2, cluster: str, zone: str = ZONE) -> str:
    """A new instance of the cluster, once it runs (a pending one takes no volume)."""
    instance_id = await launch(ec2, cluster, zone)

    async def read() -> Instance | None:
        instances = await ec2.list_instances(cluster)
        return next((i for i in instances if i.id == instance_id and i.state == "running"), None)

    await eventually(read)
    return instance_id


async def listed(ec2: AiobotocoreEc2, cluster: str, volume_id: str) -> Volume | None:
    return next((v for v in await ec2.list_volumes(cluster) if v.id == volume_id), None)


async def test_create_makes_an_encrypted_tagged_volume(ec2: AiobotocoreEc2, client: Ec2Client, cluster: str) -> None:
    tags = {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_CACHE, VOLUME_TTL_TAG: "86400", "long": "y" * 300}
    request = volume_request(cluster, size_gib=20, volume_type="st1", tags=tags)

    volume_id = await ec2.create_volume(request)

    [raw] = (await client.describe_volumes(VolumeIds=[volume_id]))["Volumes"]
    assert raw["Encrypted"] is True
    assert raw["Size"] == 20
    assert raw["VolumeType"] == "st1"
    assert raw["AvailabilityZone"] == ZONE
    assert {t["Key"]: t["Value"] for t in raw["Tags"]} == {**tags, "long": "y" * 255}
    assert ec2.call_counts[("CreateVolume", "ok")] == 1


async def test_create_with_a_used_token_returns_the_same_volume(ec2: AiobotocoreEc2, cluster: str) -> None:
    request = volume_request(cluster)

    first = await ec2.create_volume(request)
    again = await ec2.create_volume(request)

    assert again == first
    assert [v.id for v in await ec2.list_volumes(cluster)] == [first]


async def test_list_shows_only_this_clusters_cache_volumes(
    ec2: AiobotocoreEc2, client: Ec2Client, cluster: str
) -> None:
    before_s = time.time()
    mine = await ec2.create_volume(volume_request(cluster))
    await ec2.create_volume(volume_request(cluster + "-other"))
    await ec2.create_volume(volume_request(cluster, tags={CLUSTER_TAG: cluster}))  # no role
    await ec2.create_volume(volume_request(cluster, tags={CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER}))
    await client.create_volume(AvailabilityZone=ZONE, Size=1)  # not ours at all
    instance_id = await launch(ec2, cluster)  # its root volume carries the cluster tag

    volumes = await ec2.list_volumes(cluster)

    assert [v.id for v in volumes] == [mine]
    [volume] = volumes
    assert volume.availability_zone == ZONE
    assert volume.state == "available"
    assert volume.size_gib == 8
    assert volume.volume_type == "gp3"
    assert before_s - 2 <= volume.created_at <= time.time() + 2
    assert volume.tags == {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_CACHE, "user_id": "42"}
    assert volume.attachments == ()
    roots = await client.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])
    [root] = roots["Volumes"]
    assert {t["Key"]: t["Value"] for t in root["Tags"]} == {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_ROOT}


async def test_a_pending_instance_takes_no_volume(ec2: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster))
    instance_id = await launch(ec2, cluster)

    with pytest.raises(Ec2Error) as error:
        await ec2.attach_volume(volume_id, instance_id, DEVICE)

    assert (error.value.operation, error.value.code) == ("AttachVolume", "IncorrectInstanceState")
    assert ec2.call_counts[("AttachVolume", "IncorrectInstanceState")] == 1
    volume = await listed(ec2, cluster, volume_id)
    assert volume is not None
    assert volume.attachments == ()


async def test_a_volume_attaches_only_in_its_own_zone(ec2: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster, availability_zone=ZONE))
    elsewhere = await running(ec2, cluster, OTHER_ZONE)

    with pytest.raises(Ec2Error) as error:
        await ec2.attach_volume(volume_id, elsewhere, DEVICE)

    assert error.value.code == "InvalidVolume.ZoneMismatch"
    assert not isinstance(error.value, InsufficientCapacity)


async def test_attach_detach_delete_lifecycle(ec2: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster))
    instance_id, other_id = await asyncio.gather(running(ec2, cluster), running(ec2, cluster))

    attach_called_s = time.time()
    await ec2.attach_volume(volume_id, instance_id, DEVICE)

    attaching = await listed(ec2, cluster, volume_id)
    assert attaching is not None
    [attachment] = attaching.attachments
    assert (attachment.instance_id, attachment.state, attachment.device) == (instance_id, "attaching", DEVICE)
    assert attach_called_s - 2 <= attachment.attached_at <= time.time() + 2

    async def attached() -> Volume | None:
        volume = await listed(ec2, cluster, volume_id)
        return volume if volume and [a.state for a in volume.attachments] == ["attached"] else None

    volume = await eventually(attached)
    assert volume.state == "in-use"
    assert volume.attachments[0].instance_id == instance_id

    # One attachment per volume: neither another instance nor the same one again.
    for target in (other_id, instance_id):
        with pytest.raises(Ec2Error) as in_use:
            await ec2.attach_volume(volume_id, target, "/dev/sdg")
        assert in_use.value.code == "VolumeInUse"
    with pytest.raises(Ec2Error) as delete_in_use:
        await ec2.delete_volume(volume_id)
    assert (delete_in_use.value.operation, delete_in_use.value.code) == ("DeleteVolume", "VolumeInUse")

    await ec2.detach_volume(volume_id, instance_id)

    detaching = await listed(ec2, cluster, volume_id)
    assert detaching is not None
    assert [(a.instance_id, a.state) for a in detaching.attachments] == [(instance_id, "detaching")]
    with pytest.raises(Ec2Error) as delete_detaching:
        await ec2.delete_volume(volume_id)  # still in use until the detach completes
    assert delete_detaching.value.code == "VolumeInUse"

    async def available() -> Volume | None:
        volume = await listed(ec2, cluster, volume_id)
        return volume if volume and volume.state == "available" else None

    assert (await eventually(available)).attachments == ()

    await ec2.delete_volume(volume_id)
    await ec2.delete_volume(volume_id)  # already gone: fine

    assert await ec2.list_volumes(cluster) == []
    assert ec2.call_counts[("DeleteVolume", "ok")] == 1
    assert ec2.call_counts[("DeleteVolume", "InvalidVolume.NotFound")] == 1


async def test_a_detached_volume_attaches_to_the_next_instance(ec2: AiobotocoreEc2, cluster: str) -> None:
    # The point of a cache volume: the user's next session, on a new instance, gets the same data.
    volume_id = await ec2.create_volume(volume_request(cluster))
    first, second = await asyncio.gather(running(ec2, cluster), running(ec2, cluster))
    await ec2.attach_volume(volume_id, first, DEVICE)
    await ec2.detach_volume(volume_id, first, force=True)

    async def free() -> Volume | None:
        volume = await listed(ec2, cluster, volume_id)
        return volume if volume and not volume.attachments else None

    await eventually(free)
    await ec2.attach_volume(volume_id, second, DEVICE)

    volume = await listed(ec2, cluster, volume_id)
    assert volume is not None
    assert [a.instance_id for a in volume.attachments] == [second]


async def test_tags_set_and_remove_round_trip(ec2: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster))

    await ec2.tag_volume(volume_id, {"warmswarm:released-at": "2024-01-01T00:00:00Z", "note": "z" * 300}, [])
    await ec2.tag_volume(volume_id, {"user_id": "43"}, ["note", "never-set"])
    calls_before = dict(ec2.call_counts)
    await ec2.tag_volume(volume_id, {}, [])

    assert ec2.call_counts == calls_before  # nothing to change: no call
    volume = await listed(ec2, cluster, volume_id)
    assert volume is not None
    assert volume.tags == {
        CLUSTER_TAG: cluster,
        ROLE_TAG: ROLE_CACHE,
        "user_id": "43",
        "warmswarm:released-at": "2024-01-01T00:00:00Z",
    }
    assert ec2.call_counts[("CreateTags", "ok")] == 2
    assert ec2.call_counts[("DeleteTags", "ok")] == 1


async def test_volume_errors_are_ec2_errors_with_their_code(
    ec2: AiobotocoreEc2, layer: StrictEc2, cluster: str
) -> None:
    instance_id = await running(ec2, cluster)
    # What AWS answers for a volume type an availability zone does not offer (moto takes any).
    layer.inject_fault("CreateVolume", "Unsupported", status=400, message="io2 is not supported in us-east-1a")

    with pytest.raises(Ec2Error) as attach_error:
        await ec2.attach_volume("vol-0123456789abcdef0", instance_id, DEVICE)
    with pytest.raises(Ec2Error) as create_error:
        await ec2.create_volume(volume_request(cluster, volume_type="io2"))

    assert (attach_error.value.operation, attach_error.value.code) == ("AttachVolume", "InvalidVolume.NotFound")
    assert (create_error.value.operation, create_error.value.code) == ("CreateVolume", "Unsupported")
    # Not "this instance offering is full": that is a launch's answer, and the caller acts on it as one.
    assert not isinstance(create_error.value, InsufficientCapacity)
    assert ec2.call_counts[("CreateVolume", "Unsupported")] == 1


@pytest.fixture
def quick_modifications(layer: StrictEc2) -> Iterator[StrictEc2]:
    """AWS's modifying and optimizing in TRANSITION_S each (seconds to hours on AWS), the six hours kept."""
    saved = (layer.modifying_s, layer.optimizing_s, layer.modify_cooldown_s)
    layer.modifying_s, layer.optimizing_s = TRANSITION_S, TRANSITION_S
    try:
        yield layer
    finally:
        layer.modifying_s, layer.optimizing_s, layer.modify_cooldown_s = saved


async def test_an_attached_volume_grows_once_and_what_aws_refuses_is_an_ec2_error_with_its_code(
    ec2: AiobotocoreEc2, cluster: str, quick_modifications: StrictEc2
) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster, size_gib=8))
    instance_id = await running(ec2, cluster)
    await ec2.attach_volume(volume_id, instance_id, DEVICE)

    async def attached() -> Volume | None:
        volume = await listed(ec2, cluster, volume_id)
        return volume if volume and [a.state for a in volume.attachments] == ["attached"] else None

    await eventually(attached)

    with pytest.raises(Ec2Error) as smaller:
        await ec2.modify_volume(volume_id, 4)
    assert (smaller.value.operation, smaller.value.code) == ("ModifyVolume", "InvalidParameterValue")
    assert "only grow" in str(smaller.value)  # refusals.py's hint for this call

    await ec2.modify_volume(volume_id, 16)

    with pytest.raises(Ec2Error) as busy:
        await ec2.modify_volume(volume_id, 32)  # the first is still modifying
    assert busy.value.code == "IncorrectModificationState"

    volume = await eventually(grown_to(ec2, cluster, volume_id, 16))
    assert (volume.state, [a.instance_id for a in volume.attachments]) == ("in-use", [instance_id])  # online
    await asyncio.sleep(2 * TRANSITION_S + 0.2)  # completed

    with pytest.raises(Ec2Error) as early:
        await ec2.modify_volume(volume_id, 32)  # completed, but within AWS's six hours
    assert early.value.code == "VolumeModificationRateExceeded"
    assert "six hours" in str(early.value)
    after = await listed(ec2, cluster, volume_id)
    assert after is not None
    assert after.size_gib == 16  # nothing refused changed the size
    assert ec2.call_counts[("ModifyVolume", "ok")] == 1
    assert ec2.call_counts[("ModifyVolume", "InvalidParameterValue")] == 1
    assert ec2.call_counts[("ModifyVolume", "IncorrectModificationState")] == 1
    assert ec2.call_counts[("ModifyVolume", "VolumeModificationRateExceeded")] == 1

    quick_modifications.modify_cooldown_s = 0.0  # six hours later
    await ec2.modify_volume(volume_id, 32)
    assert (await eventually(grown_to(ec2, cluster, volume_id, 32))).size_gib == 32


def grown_to(
    ec2: AiobotocoreEc2, cluster: str, volume_id: str, size_gib: int
) -> Callable[[], Awaitable[Volume | None]]:
    """A read for `eventually`: the volume once EC2 reports it at `size_gib`."""

    async def read() -> Volume | None:
        volume = await listed(ec2, cluster, volume_id)
        return volume if volume and volume.size_gib == size_gib else None

    return read


async def test_the_grown_at_tag_reads_back_as_the_planner_reads_it(ec2: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2.create_volume(volume_request(cluster))

    await ec2.tag_volume(volume_id, grown_tags(1_700_000_000.0), [])

    volume = await listed(ec2, cluster, volume_id)
    assert volume is not None
    assert (volume.grown_at, volume.unreadable_tags) == (1_700_000_000.0, frozenset())
