"""The instance-type catalogue (observe.py): one allowed type EC2 does not know is dropped and named, the others are
described and cached for the ttl; any other failure still fails the look."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.observe import InstanceCatalogue
from warmswarm_autoscaling.ports import Ec2Error
from warmswarm_autoscaling.snapshot import InstanceType

from .factories import NOW, T3_MEDIUM
from .fakes import AwsTypesEc2, FakeEc2

TTL_S = 3600.0


async def test_an_unknown_type_is_dropped_and_named_and_the_others_are_described() -> None:
    ec2 = AwsTypesEc2()
    catalogue = InstanceCatalogue(ec2, ["t3.medium", "t3.mediun", "m5.large", "x9.huge"], TTL_S)

    types = await catalogue.get(NOW)

    assert set(types) == {"t3.medium", "m5.large"}
    assert catalogue.unknown == ("t3.mediun", "x9.huge")
    # The whole call refused, then each type asked on its own.
    assert ec2.call_counts[("DescribeInstanceTypes", "InvalidInstanceType")] == 3
    assert ec2.call_counts[("DescribeInstanceTypes", "ok")] == 2


async def test_what_was_found_is_kept_for_the_ttl_then_asked_again() -> None:
    ec2 = AwsTypesEc2()
    catalogue = InstanceCatalogue(ec2, ["t3.medium", "t3.mediun"], TTL_S)

    await catalogue.get(NOW)
    calls = sum(ec2.call_counts.values())
    await catalogue.get(NOW + TTL_S - 1)
    assert sum(ec2.call_counts.values()) == calls
    ec2.types["t3.mediun"] = InstanceType("t3.mediun", T3_MEDIUM.resources)  # the region has it now (a new type)
    types = await catalogue.get(NOW + TTL_S)

    assert sum(ec2.call_counts.values()) == calls + 1
    assert set(types) == {"t3.medium", "t3.mediun"}
    assert catalogue.unknown == ()


async def test_every_allowed_type_unknown_is_an_empty_catalogue_asked_again_only_after_the_ttl() -> None:
    ec2 = AwsTypesEc2()
    catalogue = InstanceCatalogue(ec2, ["t3.mediun"], TTL_S)

    assert await catalogue.get(NOW) == {}
    calls = sum(ec2.call_counts.values())
    assert await catalogue.get(NOW + 1) == {}

    assert sum(ec2.call_counts.values()) == calls
    assert catalogue.unknown == ("t3.mediun",)


async def test_a_port_that_leaves_unknown_types_out_of_its_answer_names_them_too() -> None:
    catalogue = InstanceCatalogue(FakeEc2(), ["m5.large", "z9.huge"], TTL_S)

    assert set(await catalogue.get(NOW)) == {"m5.large"}
    assert catalogue.unknown == ("z9.huge",)


async def test_any_other_failure_still_fails_the_look() -> None:
    ec2 = AwsTypesEc2()
    ec2.failing["DescribeInstanceTypes"] = "RequestLimitExceeded"
    catalogue = InstanceCatalogue(ec2, ["t3.medium"], TTL_S)

    with pytest.raises(Ec2Error) as error:
        await catalogue.get(NOW)

    assert error.value.code == "RequestLimitExceeded"
    assert catalogue.unknown == ()
