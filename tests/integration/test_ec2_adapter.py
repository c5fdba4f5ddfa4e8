"""The EC2 adapter against a real moto server (and, for capacity errors moto cannot produce, a raw EC2 error)."""

from __future__ import annotations

import asyncio
import base64
import socket
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from warmswarm_autoscaling.adapters.ec2_aiobotocore import ROLE_ROOT, AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client, ec2_client
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, LaunchRequest, VolumeRequest
from warmswarm_models import CLUSTER_TAG, GPU, INSTANCE_VOLUME_TAG, ROLE_CACHE, ROLE_TAG, ROLE_WORKER

REGION = "us-east-1"
IMAGE_ID = "ami-12345678"


@pytest.fixture(scope="module")
async def client(moto_endpoint: str) -> AsyncIterator[Ec2Client]:
    async with ec2_client(moto_endpoint, REGION, max_attempts=2) as ec2:
        yield ec2


@pytest.fixture(autouse=True)
def _fresh_moto(moto_endpoint: str) -> None:
    request = urllib.request.Request(f"{moto_endpoint}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


@pytest.fixture
def ec2(ec2_adapter: AiobotocoreEc2) -> AiobotocoreEc2:
    return ec2_adapter


def launch(cluster: str, **overrides: Any) -> LaunchRequest:
    fields: dict[str, Any] = {
        "instance_type": "t3.medium",
        "availability_zone": "us-east-1b",
        "image_id": IMAGE_ID,
        "user_data": "#!/bin/sh\necho hello\n",
        "tags": {CLUSTER_TAG: cluster, "user_id": "42"},
        "client_token": uuid.uuid4().hex,
    }
    fields.update(overrides)
    return LaunchRequest(**fields)


async def test_run_then_list_shows_only_this_clusters_instances(
    ec2: AiobotocoreEc2, client: Ec2Client, cluster: str
) -> None:
    before_s = time.time()
    mine = await ec2.run_instance(launch(cluster))
    other = await ec2.run_instance(launch(cluster + "-other"))
    untagged = await client.run_instances(ImageId=IMAGE_ID, InstanceType="t3.medium", MinCount=1, MaxCount=1)

    instances = await ec2.list_instances(cluster)

    assert [i.id for i in instances] == [mine]
    listed = instances[0]
    assert listed.instance_type == "t3.medium"
    assert listed.availability_zone == "us-east-1b"
    assert listed.state == "running"
    assert listed.is_live
    assert before_s - 2 <= listed.launched_at <= time.time() + 2
    assert listed.tags[CLUSTER_TAG] == cluster
    assert listed.tags["user_id"] == "42"
    await ec2.terminate_instances([mine, other, untagged["Instances"][0]["InstanceId"]])


async def test_terminated_instances_are_not_listed(ec2: AiobotocoreEc2, cluster: str) -> None:
    kept = await ec2.run_instance(launch(cluster))
    gone = await ec2.run_instance(launch(cluster))

    await ec2.terminate_instances([gone])

    assert [i.id for i in await ec2.list_instances(cluster)] == [kept]


async def test_a_stopped_instance_is_listed_stopped_and_starts_again(ec2: AiobotocoreEc2, cluster: str) -> None:
    machine = await ec2.run_instance(launch(cluster))

    await ec2.stop_instances([machine])
    [stopped] = await ec2.list_instances(cluster)
    await ec2.start_instances([machine])
    [started] = await ec2.list_instances(cluster)

    assert (stopped.id, stopped.state) == (machine, "stopped")
    assert (started.id, started.state) == (machine, "running")  # moto runs it at once; the strict layer adds pending


async def test_untag_removes_those_keys_whatever_their_values_and_leaves_the_others(
    ec2: AiobotocoreEc2, cluster: str
) -> None:
    tags = {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER, "user_id": "42", "project_id": "p-7", INSTANCE_VOLUME_TAG: "v"}
    machine = await ec2.run_instance(launch(cluster, tags=tags))

    # "node_id" was never there: no error. Keys only, so no value has to match what the instance carries.
    await ec2.untag_instance(machine, ["user_id", "project_id", "node_id"])

    [instance] = await ec2.list_instances(cluster)
    assert instance.tags == {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER, INSTANCE_VOLUME_TAG: "v"}
    assert ec2.call_counts[("DeleteTags", "ok")] == 1


async def test_untag_of_no_keys_makes_no_call(ec2: AiobotocoreEc2, cluster: str) -> None:
    machine = await ec2.run_instance(launch(cluster))

    await ec2.untag_instance(machine, [])

    assert ec2.call_counts[("DeleteTags", "ok")] == 0
    [instance] = await ec2.list_instances(cluster)
    assert instance.tags == {CLUSTER_TAG: cluster, "user_id": "42"}


async def test_user_data_round_trips(ec2: AiobotocoreEc2, client: Ec2Client, cluster: str) -> None:
    script = "#!/bin/sh\nset -eu\necho 'ünïcode & <xml>' > /tmp/boot\n"
    instance_id = await ec2.run_instance(launch(cluster, user_data=script))

    attribute = await client.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")

    assert base64.b64decode(attribute["UserData"]["Value"]).decode() == script


async def test_tags_reach_instance_and_root_volume_and_long_values_are_cut_to_255(
    ec2: AiobotocoreEc2, client: Ec2Client, cluster: str
) -> None:
    long_value = "x" * 300
    tags = {
        CLUSTER_TAG: cluster,
        ROLE_TAG: ROLE_WORKER,
        "warmswarm:launch-reason": long_value,
        INSTANCE_VOLUME_TAG: "vol-0123456789abcdef0",
        "user_id": "42",
    }
    instance_id = await ec2.run_instance(launch(cluster, tags=tags))

    [instance] = await ec2.list_instances(cluster)
    volumes = await client.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [instance_id]}])

    assert instance.tags == {**tags, "warmswarm:launch-reason": "x" * 255}
    # The root volume says whose cluster it is and that it is a root volume: never a cache volume,
    # and none of the owner's tags (a search by owner finds their cache volumes only).
    [volume] = volumes["Volumes"]
    assert {t["Key"]: t["Value"] for t in volume["Tags"]} == {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_ROOT}


async def test_launch_options_reach_the_instance(ec2: AiobotocoreEc2, client: Ec2Client, cluster: str) -> None:
    vpc = await client.create_vpc(CidrBlock="10.0.0.0/16")
    subnet = await client.create_subnet(
        VpcId=vpc["Vpc"]["VpcId"], CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1c"
    )
    group = await client.create_security_group(GroupName=cluster, Description="test", VpcId=vpc["Vpc"]["VpcId"])
    await client.create_key_pair(KeyName=cluster)
    subnet_id = subnet["Subnet"]["SubnetId"]

    instance_id = await ec2.run_instance(
        launch(
            cluster,
            availability_zone="us-east-1c",
            subnet_id=subnet_id,
            security_group_ids=(group["GroupId"],),
            key_name=cluster,
        )
    )

    described = await client.describe_instances(InstanceIds=[instance_id])
    raw = described["Reservations"][0]["Instances"][0]
    assert raw["SubnetId"] == subnet_id
    assert [g["GroupId"] for g in raw["SecurityGroups"]] == [group["GroupId"]]
    assert raw["KeyName"] == cluster
    assert raw["MetadataOptions"]["HttpTokens"] == "required"
    assert raw["Placement"]["AvailabilityZone"] == "us-east-1c"


async def test_listing_follows_every_page(client: Ec2Client, cluster: str) -> None:
    ec2 = AiobotocoreEc2(client, page_size=5)
    launched = {await ec2.run_instance(launch(cluster)) for _ in range(30)}

    listed = await ec2.list_instances(cluster)

    assert {i.id for i in listed} == launched
    assert len(listed) == len(launched)
    assert ec2.call_counts[("DescribeInstances", "ok")] >= 6  # 30 reservations, 5 per page


async def test_instance_types_carry_real_figures(ec2: AiobotocoreEc2) -> None:
    types = {t.name: t for t in await ec2.describe_instance_types(["t3.medium", "g4dn.xlarge", "t3.medium"])}

    assert set(types) == {"t3.medium", "g4dn.xlarge"}
    t3 = types["t3.medium"]
    assert t3.resources.cpus == 2
    assert t3.resources.memory_bytes == 4 * 2**30
    assert t3.resources.gpus == 0
    assert t3.max_ebs_attachments > 0
    g4 = types["g4dn.xlarge"]
    assert g4.resources.generic == {GPU: 1}
    assert g4.resources.cpus == 4
    assert g4.resources.memory_bytes == 16 * 2**30
    assert await ec2.describe_instance_types([]) == []


async def test_terminating_unknown_ids_is_fine_and_known_ones_still_go(ec2: AiobotocoreEc2, cluster: str) -> None:
    real = await ec2.run_instance(launch(cluster))

    await ec2.terminate_instances(["i-0123456789abcdef0"])
    # AWS rejects a whole batch for one unknown id; the adapter must still terminate the real one.
    await ec2.terminate_instances(["i-0123456789abcdef0", real])
    calls_before = dict(ec2.call_counts)
    await ec2.terminate_instances([])

    assert ec2.call_counts == calls_before
    assert await ec2.list_instances(cluster) == []


async def test_client_errors_become_ec2_errors_with_their_code(ec2: AiobotocoreEc2, cluster: str) -> None:
    with pytest.raises(Ec2Error) as launch_error:
        await ec2.run_instance(launch(cluster, availability_zone="us-east-1z"))
    with pytest.raises(Ec2Error) as types_error:
        await ec2.describe_instance_types(["t3.nonexistent"])

    assert not isinstance(launch_error.value, InsufficientCapacity)
    assert (launch_error.value.operation, launch_error.value.code) == ("RunInstances", "InvalidParameterValue")
    assert "us-east-1z" in str(launch_error.value)
    assert types_error.value.code == "InvalidInstanceType"
    assert ec2.call_counts[("RunInstances", "InvalidParameterValue")] == 1
    assert ec2.call_counts[("DescribeInstanceTypes", "InvalidInstanceType")] == 1


async def test_unreachable_endpoint_is_an_ec2_error_not_a_hang() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # bound, never listening: connections are refused
        async with ec2_client(f"http://127.0.0.1:{closed_port}", REGION, max_attempts=2) as unreachable:
            ec2 = AiobotocoreEc2(unreachable)
            with pytest.raises(Ec2Error) as error:
                # A guard, not a timing: a refused connection must end in an error, never in a wait.
                await asyncio.wait_for(ec2.list_instances("any"), timeout=60)

    assert error.value.code == "ConnectionError"
    assert ec2.call_counts == {("DescribeInstances", "ConnectionError"): 1}


# moto never runs out of capacity. These errors come from a minimal EC2 endpoint that answers
# every request the way AWS answers a launch it has no room for (same status, same XML).
_EC2_ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
)


@pytest.mark.parametrize(("code", "status"), [("InsufficientInstanceCapacity", 500), ("Unsupported", 400)])
async def test_no_capacity_is_insufficient_capacity(code: str, status: int, cluster: str) -> None:
    async def answer(request: web.Request) -> web.Response:
        body = _EC2_ERROR_XML.format(code=code, message="no room for t3.medium here", request_id=uuid.uuid4())
        return web.Response(status=status, text=body, content_type="text/xml")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with ec2_client(f"http://127.0.0.1:{port}", REGION, max_attempts=1) as no_room:
            ec2 = AiobotocoreEc2(no_room)
            with pytest.raises(InsufficientCapacity) as error:
                await ec2.run_instance(launch(cluster))
    finally:
        await runner.cleanup()

    assert error.value.code == code
    assert ec2.call_counts == {("RunInstances", code): 1}


async def test_describe_instances_by_id_answers_only_the_asked_of_this_cluster_and_a_terminated_one_is_absent(
    ec2: AiobotocoreEc2, cluster: str
) -> None:
    asked, not_asked, gone = [await ec2.run_instance(launch(cluster)) for _ in range(3)]
    other_cluster = await ec2.run_instance(launch(cluster + "-other"))
    await ec2.terminate_instances([gone])
    never = "i-0123456789abcdef0"  # no such instance: with InstanceIds=, AWS would fail the whole call for it
    before = ec2.call_counts[("DescribeInstances", "ok")]

    found = await ec2.describe_instances(cluster, [asked, gone, other_cluster, never])

    assert [i.id for i in found] == [asked]
    assert found[0].tags["user_id"] == "42"
    assert ec2.call_counts[("DescribeInstances", "ok")] - before == 1
    # Past 200 ids (AWS's limit of one filter's values), one call per 200.
    many = [asked, *(f"i-{n:017x}" for n in range(200))]
    assert [i.id for i in await ec2.describe_instances(cluster, many)] == [asked]
    assert ec2.call_counts[("DescribeInstances", "ok")] - before == 3
    assert not_asked in {i.id for i in await ec2.list_instances(cluster)}
    await ec2.terminate_instances([asked, not_asked, other_cluster])


async def test_describe_volumes_by_id_answers_only_this_clusters_cache_volumes_and_a_deleted_one_is_absent(
    ec2: AiobotocoreEc2, cluster: str
) -> None:
    def request(tags: dict[str, str]) -> VolumeRequest:
        return VolumeRequest("us-east-1b", 8, "gp3", tags, uuid.uuid4().hex)

    cache = {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_CACHE}
    asked, not_asked, deleted = [await ec2.create_volume(request(cache)) for _ in range(3)]
    root = await ec2.create_volume(request({CLUSTER_TAG: cluster, ROLE_TAG: ROLE_ROOT}))
    other_cluster = await ec2.create_volume(request({**cache, CLUSTER_TAG: cluster + "-other"}))
    await ec2.delete_volume(deleted)

    found = await ec2.describe_volumes(cluster, [asked, deleted, root, other_cluster, "vol-0123456789abcdef0"])

    assert [v.id for v in found] == [asked]
    assert {asked, not_asked} <= {v.id for v in await ec2.list_volumes(cluster)}


async def test_aws_clock_runs_on_from_the_last_answer_while_no_call_is_made(ec2: AiobotocoreEc2, cluster: str) -> None:
    assert ec2.aws_clock() is None  # no answer yet
    await ec2.list_instances(cluster)
    answered = ec2.aws_clock()
    assert answered is not None
    assert abs(answered - time.time()) < 5.0  # the Date of moto's answer, on this machine's clock

    await asyncio.sleep(1.0)  # no call meanwhile: a cycle whose book had nothing to read

    later = ec2.aws_clock()
    assert later is not None
    assert 1.0 <= later - answered < 3.0
