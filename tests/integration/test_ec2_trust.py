"""The EC2 adapter's trust rules against the strict layer (AWS's rules) in front of moto: a lost answer retried
creates nothing twice, a spent token says so, machines cannot reach the user data, a node's address, AWS's clock;
and AWS's refusals the autoscaler must understand (issue 19): a start without capacity, an unknown instance type, a
token first used with other arguments."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from botocore.exceptions import ClientError
from warmswarm_autoscaling.actions import LaunchBatch
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client, ec2_client
from warmswarm_autoscaling.observe import InstanceCatalogue
from warmswarm_autoscaling.plan import plan
from warmswarm_autoscaling.plan.tokens import launch_token, volume_token
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import (
    Ec2Error,
    InsufficientCapacity,
    LaunchRequest,
    TokenSpent,
    UnknownInstanceTypes,
    VolumeRequest,
)
from warmswarm_autoscaling.readings import read_task
from warmswarm_autoscaling.snapshot import InstanceType, Snapshot
from warmswarm_models import CLUSTER_TAG, INSTANCE_BATCH_TAG, ROLE_CACHE, ROLE_TAG, ROLE_WORKER, Owner, Resources
from warmswarm_sandbox.strict_ec2 import StrictEc2
from warmswarm_sandbox.strict_ec2_state import NodeAddresses

REGION = "us-east-1"
ZONE = "us-east-1a"
IMAGE_ID = "ami-12345678"
ALICE = Owner(user_id="alice", project_id="p1", node_id="n1")
SUBNET = 42  # the sandbox number the layer gives addresses in: 10.42.H.L


@pytest.fixture(scope="module")
async def layer(moto_endpoint: str) -> AsyncIterator[StrictEc2]:
    strict = StrictEc2(moto_endpoint, pending_s=0.2, node_addresses=NodeAddresses(SUBNET, first_host_index=3))
    await strict.start()
    try:
        yield strict
    finally:
        await strict.stop()


@pytest.fixture(scope="module")
async def client(layer: StrictEc2) -> AsyncIterator[Ec2Client]:
    assert layer.url is not None
    async with ec2_client(layer.url, REGION, max_attempts=1) as ec2:
        yield ec2


@pytest.fixture(autouse=True)
async def _fresh_world(layer: StrictEc2) -> None:
    async with aiohttp.ClientSession() as http, http.post(f"{layer.url}/moto-api/reset") as answer:
        assert answer.status == 200
    layer.reset()


def launch_request(cluster: str, token: str) -> LaunchRequest:
    return LaunchRequest(
        instance_type="t3.medium",
        availability_zone=ZONE,
        image_id=IMAGE_ID,
        user_data="#!/bin/sh\n",
        tags={CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER, **ALICE.labels()},
        client_token=token,
    )


def volume_request(cluster: str, token: str) -> VolumeRequest:
    tags = {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_CACHE, **ALICE.labels()}
    return VolumeRequest(availability_zone=ZONE, size_gib=8, volume_type="gp3", tags=tags, client_token=token)


async def raw_instances(client: Ec2Client, cluster: str) -> list[dict[str, Any]]:
    answer = await client.describe_instances(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}])
    return [i for r in answer["Reservations"] for i in r["Instances"]]


async def test_a_launch_whose_answer_was_lost_is_one_instance_when_retried(
    layer: StrictEc2, client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    # The decision's token: the same at any later moment (the planner's unit tests show it for 61 s later).
    request = launch_request(cluster, launch_token(cluster, ALICE, "task-1", frozenset()))
    layer.inject_fault("RunInstances", "InternalError", after_effect=True)

    with pytest.raises(Ec2Error, match="InternalError"):
        await ec2_adapter.run_instance(request)
    retried = await ec2_adapter.run_instance(request)

    instances = await raw_instances(client, cluster)
    assert [i["InstanceId"] for i in instances] == [retried]


async def test_a_token_whose_instance_is_gone_is_spent_not_a_silent_no_op(
    client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    token = launch_token(cluster, ALICE, "task-1", frozenset())
    first = await ec2_adapter.run_instance(launch_request(cluster, token))
    await ec2_adapter.terminate_instances([first])

    with pytest.raises(TokenSpent) as spent:
        await ec2_adapter.run_instance(launch_request(cluster, token))

    assert spent.value.token == token
    again = await ec2_adapter.run_instance(launch_request(cluster, launch_token(cluster, ALICE, "task-1", {token})))
    assert again != first


async def test_a_volume_whose_answer_was_lost_is_one_volume_when_retried_and_spent_once_deleted(
    layer: StrictEc2, client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    token = volume_token(cluster, ALICE, frozenset())
    layer.inject_fault("CreateVolume", "InternalError", after_effect=True)

    with pytest.raises(Ec2Error, match="InternalError"):
        await ec2_adapter.create_volume(volume_request(cluster, token))
    volume_id = await ec2_adapter.create_volume(volume_request(cluster, token))

    assert [v.id for v in await ec2_adapter.list_volumes(cluster)] == [volume_id]
    await ec2_adapter.delete_volume(volume_id)
    with pytest.raises(TokenSpent):
        await ec2_adapter.create_volume(volume_request(cluster, token))


async def test_an_untag_whose_answer_was_lost_took_effect_and_its_retry_is_no_error(
    layer: StrictEc2, client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    # A recycled machine's strip: the owner's keys go, whatever else it carries stays; the strict layer passes
    # DeleteTags of an instance to moto as AWS would take it.
    machine = await ec2_adapter.run_instance(launch_request(cluster, uuid.uuid4().hex))
    layer.inject_fault("DeleteTags", "InternalError", after_effect=True)

    with pytest.raises(Ec2Error, match="InternalError"):
        await ec2_adapter.untag_instance(machine, list(ALICE.labels()))
    await ec2_adapter.untag_instance(machine, list(ALICE.labels()))  # the next cycle's retry: nothing left to remove

    [instance] = await raw_instances(client, cluster)
    assert {t["Key"]: t["Value"] for t in instance["Tags"]} == {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER}


async def test_machines_are_launched_with_an_imds_hop_limit_of_one(
    client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    await ec2_adapter.run_instance(launch_request(cluster, uuid.uuid4().hex))

    (launched,) = await raw_instances(client, cluster)
    options = launched["MetadataOptions"]
    # One hop: a container behind the node's bridge cannot get an IMDSv2 token, so it cannot read the
    # user data (the swarm's join token) nor the instance role's credentials.
    assert (options["HttpTokens"], options["HttpPutResponseHopLimit"]) == ("required", 1)


async def test_an_instances_private_address_is_its_sandbox_machines(
    layer: StrictEc2, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    instance_id = await ec2_adapter.run_instance(launch_request(cluster, uuid.uuid4().hex))

    (listed,) = await ec2_adapter.list_instances(cluster)

    assert listed.private_ip == layer.addresses()[instance_id]
    assert listed.private_ip.startswith(f"10.{SUBNET}.")


async def test_the_adapter_reads_aws_clock_from_its_answers(ec2_adapter: AiobotocoreEc2, cluster: str) -> None:
    before_s = int(time.time())  # the Date header has whole seconds
    await ec2_adapter.list_volumes(cluster)
    after_s = time.time()

    aws_now = ec2_adapter.aws_clock()

    assert aws_now is not None
    assert before_s <= aws_now <= after_s


async def test_a_volume_is_read_again_by_id_and_none_once_gone(ec2_adapter: AiobotocoreEc2, cluster: str) -> None:
    volume_id = await ec2_adapter.create_volume(volume_request(cluster, uuid.uuid4().hex))

    read = await ec2_adapter.describe_volume(volume_id)
    await ec2_adapter.delete_volume(volume_id)

    assert read is not None
    assert (read.id, read.owner) == (volume_id, ALICE)
    assert await ec2_adapter.describe_volume(volume_id) is None


async def test_the_planners_launch_retried_61_s_later_after_a_lost_answer_is_still_one_instance(
    layer: StrictEc2, client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    # The answer to the first launch is lost; 61 s later the world does not show the instance yet (a lagging
    # listing), so the planner decides the launch again: with the same token, the same instance comes back.
    policy = Policy(
        cluster=cluster,
        allowed_instance_types=("t3.medium",),
        price_per_hour={"t3.medium": 0.0416},
        availability_zones=(ZONE,),
        max_start_s=60.0,
    )
    task = read_task(
        id="task-1",
        service_id="s1",
        service_name="ws-n1",
        state="pending",
        desired_state="running",
        reservations=Resources(1.0, 2**30),
        constraints=ALICE.constraints(),
        node_id=None,
        err="no suitable node (scheduling constraints not satisfied on 1 node)",
        service_labels={},
        global_service=False,
    )
    types = {"t3.medium": InstanceType("t3.medium", Resources(2.0, 4 * 2**30))}
    now = time.time()
    batches = []
    for at in (now, now + 61):
        actions = plan(Snapshot(at, (), (task,), (), types), policy).actions
        (batch,) = [a for a in actions if isinstance(a, LaunchBatch)]
        batches.append(batch)
    layer.inject_fault("RunInstances", "InternalError", after_effect=True)

    with pytest.raises(Ec2Error):
        await ec2_adapter.run_instances(replace(launch_request(cluster, batches[0].client_token), count=1))
    retried = await ec2_adapter.run_instances(replace(launch_request(cluster, batches[1].client_token), count=1))

    assert [i["InstanceId"] for i in await raw_instances(client, cluster)] == retried


async def test_a_batch_whose_answer_was_lost_is_the_same_machines_when_retried(
    layer: StrictEc2, client: Ec2Client, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    # One call for three owners' machines, alike and tagged with the batch, none with an owner yet.
    tags = {CLUSTER_TAG: cluster, ROLE_TAG: ROLE_WORKER, INSTANCE_BATCH_TAG: "batch-1"}
    request = replace(launch_request(cluster, uuid.uuid4().hex), tags=tags, count=3)
    layer.inject_fault("RunInstances", "InternalError", after_effect=True)

    with pytest.raises(Ec2Error, match="InternalError"):
        await ec2_adapter.run_instances(request)
    retried = await ec2_adapter.run_instances(request)

    listed = await ec2_adapter.list_instances(cluster)
    assert sorted(i.id for i in listed) == sorted(retried)
    assert len(retried) == 3
    assert all(i.unbound and i.batch == "batch-1" for i in listed)
    await ec2_adapter.tag_instance(retried[0], ALICE.labels())
    bound = {i.id: i for i in await ec2_adapter.list_instances(cluster)}[retried[0]]
    assert (bound.owner, bound.unbound) == (ALICE, False)


# -- AWS's refusals the autoscaler must understand (issue 19) ---------------------------------------------------


async def test_a_start_of_a_stopped_machine_whose_offering_has_no_capacity_is_insufficient_capacity(
    layer: StrictEc2, ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    machine = await ec2_adapter.run_instance(launch_request(cluster, uuid.uuid4().hex))
    deadline_s = time.monotonic() + 10
    while (await ec2_adapter.list_instances(cluster))[0].state == "pending":  # the layer's pending_s
        assert time.monotonic() < deadline_s, "the instance never ran"
        await asyncio.sleep(0.05)
    await ec2_adapter.stop_instances([machine])
    layer.set_capacity("t3.medium", ZONE, available=False)  # a stopped machine keeps no capacity

    with pytest.raises(InsufficientCapacity) as refused:
        await ec2_adapter.start_instances([machine])

    assert (refused.value.operation, refused.value.code) == ("StartInstances", "InsufficientInstanceCapacity")
    [still] = await ec2_adapter.list_instances(cluster)
    assert still.state == "stopped"
    layer.set_capacity("t3.medium", ZONE, available=True)
    await ec2_adapter.start_instances([machine])


async def test_one_unknown_instance_type_leaves_the_known_ones_described_and_is_named(
    client: Ec2Client, ec2_adapter: AiobotocoreEc2
) -> None:
    names = ["t3.medium", "t3.mediun", "m5.large"]
    # AWS refuses the whole call for one name it does not know.
    with pytest.raises(ClientError) as whole:
        await client.describe_instance_types(InstanceTypes=names)
    with pytest.raises(UnknownInstanceTypes):
        await ec2_adapter.describe_instance_types(names)
    catalogue = InstanceCatalogue(ec2_adapter, names, ttl_s=3600.0)

    types = await catalogue.get(time.time())

    assert whole.value.response["Error"]["Code"] == "InvalidInstanceType"
    assert whole.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert set(types) == {"t3.medium", "m5.large"}
    assert types["m5.large"].resources.cpus == 2
    assert catalogue.unknown == ("t3.mediun",)


async def test_a_volume_token_first_used_with_another_size_is_spent_and_the_next_generations_succeeds(
    ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    # The janitor deleted the owner's volume; the owner's groups now ask for another size.
    token = volume_token(cluster, ALICE, frozenset())
    first = await ec2_adapter.create_volume(volume_request(cluster, token))
    await ec2_adapter.delete_volume(first)

    with pytest.raises(TokenSpent) as spent:
        await ec2_adapter.create_volume(replace(volume_request(cluster, token), size_gib=16))
    again = await ec2_adapter.create_volume(
        replace(volume_request(cluster, volume_token(cluster, ALICE, {token})), size_gib=16)
    )

    assert (spent.value.token, spent.value.code) == (token, "IdempotentParameterMismatch")
    assert ec2_adapter.call_counts[("CreateVolume", "IdempotentParameterMismatch")] == 1
    [volume] = await ec2_adapter.list_volumes(cluster)
    assert (volume.id, volume.size_gib) == (again, 16)
    assert again != first


async def test_a_launch_token_first_used_with_another_type_is_spent_and_the_next_generations_succeeds(
    ec2_adapter: AiobotocoreEc2, cluster: str
) -> None:
    token = launch_token(cluster, ALICE, "task-1", frozenset())
    first = await ec2_adapter.run_instance(launch_request(cluster, token))

    with pytest.raises(TokenSpent) as spent:
        await ec2_adapter.run_instance(replace(launch_request(cluster, token), instance_type="m5.large"))
    again = await ec2_adapter.run_instance(
        replace(launch_request(cluster, launch_token(cluster, ALICE, "task-1", {token})), instance_type="m5.large")
    )

    assert (spent.value.token, spent.value.code) == (token, "IdempotentParameterMismatch")
    listed = {i.id: i.instance_type for i in await ec2_adapter.list_instances(cluster)}
    assert listed == {first: "t3.medium", again: "m5.large"}
