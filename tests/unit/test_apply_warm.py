"""apply() for the warm tier: a stop tags how long the machine is kept before it stops it, a start that finds no
capacity (as the adapter reads AWS's refusal) names the machine for the planner, and a launch carries its owner's warm
tier (or the buffer's images)."""

from __future__ import annotations

import dataclasses

import pytest
from warmswarm_autoscaling.actions import Start, Stop
from warmswarm_autoscaling.apply import apply
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity
from warmswarm_models import INSTANCE_BUFFER_TAG, INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, format_timestamp

from .factories import NOW, TEMPLATE, launch
from .fakes import Recorder, one, refusing_adapter

BUFFERED = dataclasses.replace(TEMPLATE, buffer_images=("registry.local:5000/lab/notebook:3.1", "busybox:1.36"))


async def test_a_stop_tags_how_long_the_machine_is_kept_then_stops_it() -> None:
    ports = Recorder()

    outcome = await one(Stop("i-0aa", NOW + 3600, "idle: kept warm for an hour"), ports)

    assert outcome.ok
    assert ports.calls == [
        ("tag_instance", "i-0aa", {INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 3600)}),
        ("stop_instances", ["i-0aa"]),
    ]


async def test_a_stop_whose_tag_fails_does_not_stop_the_machine() -> None:
    # Stopped without its tag, the machine would be taken for a stray: better running a cycle longer.
    ports = Recorder()
    ports.fail["tag_instance"] = Ec2Error("CreateTags", "RequestLimitExceeded", "slow down")

    outcome = await one(Stop("i-0aa", NOW + 3600, "idle"), ports)

    assert outcome.error == "EC2 CreateTags failed with RequestLimitExceeded: slow down"
    assert [call[0] for call in ports.calls] == ["tag_instance"]


async def test_a_buffer_machine_is_stopped_without_a_warm_until() -> None:
    ports = Recorder()

    outcome = await one(Stop("i-0bb", None, "buffer: images pulled"), ports)

    assert outcome.ok
    assert ports.calls == [("stop_instances", ["i-0bb"])]


async def test_a_start_is_one_call() -> None:
    ports = Recorder()

    outcome = await one(Start("i-0aa", "its owner is back"), ports)

    assert outcome.ok
    assert outcome.failed_start is None
    assert ports.calls == [("start_instances", ["i-0aa"])]


async def test_a_start_without_capacity_names_the_machine_that_could_not_start() -> None:
    ports = Recorder()
    ports.fail["start_instances"] = InsufficientCapacity("StartInstances", "InsufficientInstanceCapacity", "none")

    outcome = await one(Start("i-0aa", "its owner is back"), ports)

    assert outcome.failed_start == "i-0aa"
    assert outcome.error == "EC2 StartInstances failed with InsufficientInstanceCapacity: none"
    assert outcome.unavailable_offering is None


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported"])
async def test_a_start_aws_refuses_for_capacity_through_the_adapter_names_the_machine_that_could_not_start(
    code: str,
) -> None:
    # The real adapter's reading of AWS's refusal, not our own exception raised by a fake: a start refused for
    # capacity must come out as one, or the same warm machine is started again every cycle.
    ec2 = refusing_adapter("start_instances", code)

    [outcome] = await apply((Start("i-0aa", "its owner is back"),), Recorder(), ec2, TEMPLATE, clock=lambda: NOW)

    assert outcome.failed_start == "i-0aa"
    assert outcome.error is not None
    assert code in outcome.error
    assert ec2.call_counts[("StartInstances", code)] == 1


async def test_a_launch_tags_its_owners_warm_tier_only_when_it_has_one() -> None:
    warm, cold = Recorder(), Recorder()

    shortest = Recorder()
    await one(dataclasses.replace(launch(), warm_ttl_s=7200), warm)
    await one(dataclasses.replace(launch(), warm_ttl_s=1), shortest)
    await one(launch(), cold)

    assert warm.launches[0].tags[INSTANCE_WARM_TTL_TAG] == "7200"
    assert shortest.launches[0].tags[INSTANCE_WARM_TTL_TAG] == "1"
    assert INSTANCE_WARM_TTL_TAG not in cold.launches[0].tags


async def test_a_buffer_launch_is_named_as_one_and_pulls_the_buffers_images() -> None:
    ports = Recorder()

    await one(dataclasses.replace(launch(), purpose="buffer"), ports, template=BUFFERED)

    [request] = ports.launches
    assert request.tags[INSTANCE_BUFFER_TAG] == "true"
    assert request.tags["Name"] == "warmswarm-prod-buffer"
    assert "'registry.local:5000/lab/notebook:3.1' 'busybox:1.36'" in request.user_data


async def test_an_owners_launch_pulls_no_buffer_images() -> None:
    ports = Recorder()

    await one(launch(), ports, template=BUFFERED)

    [request] = ports.launches
    assert INSTANCE_BUFFER_TAG not in request.tags
    assert "busybox:1.36" not in request.user_data
