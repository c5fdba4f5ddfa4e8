"""AWS's refusals as the EC2 adapter reads them (adapters/ec2_refusals.py): each code of each call becomes the port
exception its caller acts on, or an Ec2Error that says what to do next."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from warmswarm_autoscaling.adapters.ec2_refusals import ec2_error
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, TokenSpent, UnknownInstanceTypes, VolumeRequest
from warmswarm_autoscaling.refusals import UNDERSTOOD

from .factories import ALICE_N1, ZONE_A
from .fakes import refusing_adapter

ENDPOINT = "https://ec2.eu-west-1.amazonaws.com"
TOKEN = "a" * 64
AWS_MESSAGE = "as AWS words it"
CALLS = sorted(UNDERSTOOD)
# Codes any call can meet: throttling, permissions, credentials, AWS's own failures.
ANY_CALLS_CODES = ("RequestLimitExceeded", "UnauthorizedOperation", "AuthFailure", "InternalError", "Unavailable")
CAPACITY_CODES = ("InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported")


def refused(operation: str, code: str, *, client_token: str | None = None) -> Ec2Error:
    error = ClientError({"Error": {"Code": code, "Message": AWS_MESSAGE}}, operation)
    return ec2_error(operation, error, ENDPOINT, client_token=client_token)


@pytest.mark.parametrize(
    ("operation", "code"),
    [(operation, code) for operation in CALLS for code in sorted(UNDERSTOOD[operation])]
    + [(operation, code) for operation in CALLS for code in ANY_CALLS_CODES],
)
def test_every_code_understood_is_acted_on_or_says_what_to_do_next(operation: str, code: str) -> None:
    error = refused(operation, code, client_token=TOKEN)

    assert (error.operation, error.code) == (operation, code)
    assert AWS_MESSAGE in str(error)
    # More than AWS's own words: a port exception's next step, or the hint.
    assert str(error) != f"EC2 {operation} failed with {code}: {AWS_MESSAGE}"


@pytest.mark.parametrize("operation", ["RunInstances", "StartInstances"])
@pytest.mark.parametrize("code", CAPACITY_CODES)
def test_no_capacity_for_a_launch_or_a_start_is_insufficient_capacity(operation: str, code: str) -> None:
    assert isinstance(refused(operation, code), InsufficientCapacity)


@pytest.mark.parametrize("operation", ["CreateVolume", "AttachVolume", "StopInstances", "CreateTags"])
def test_unsupported_from_any_other_call_is_no_instance_offering(operation: str) -> None:
    error = refused(operation, "Unsupported")

    assert type(error) is Ec2Error


def test_a_volume_type_the_zone_lacks_says_so() -> None:
    assert "volume type is not offered in this availability zone" in str(refused("CreateVolume", "Unsupported"))


@pytest.mark.parametrize("operation", ["RunInstances", "CreateVolume"])
def test_a_token_first_used_with_other_arguments_is_spent(operation: str) -> None:
    error = refused(operation, "IdempotentParameterMismatch", client_token=TOKEN)

    assert isinstance(error, TokenSpent)
    assert (error.token, error.code) == (TOKEN, "IdempotentParameterMismatch")


def test_an_unknown_instance_type_is_unknown_instance_types() -> None:
    error = refused("DescribeInstanceTypes", "InvalidInstanceType")

    assert isinstance(error, UnknownInstanceTypes)
    assert "AUTOSCALING_ALLOWED_INSTANCE_TYPES" in str(error)


@pytest.mark.parametrize("code", ANY_CALLS_CODES)
@pytest.mark.parametrize("operation", CALLS)
def test_what_any_call_can_meet_is_a_plain_error_for_the_next_cycle(operation: str, code: str) -> None:
    assert type(refused(operation, code, client_token=TOKEN)) is Ec2Error


async def test_the_adapter_gives_the_calls_own_token_to_the_mismatch() -> None:
    ec2 = refusing_adapter("create_volume", "IdempotentParameterMismatch")
    request_token = "b" * 64
    with pytest.raises(TokenSpent) as spent:
        await ec2.create_volume(VolumeRequest(ZONE_A, 20, "gp3", ALICE_N1.labels(), request_token))

    assert spent.value.token == request_token
    assert ec2.call_counts[("CreateVolume", "IdempotentParameterMismatch")] == 1


def test_unsupported_operation_says_the_instance_cannot_be_stopped_only_for_a_stop() -> None:
    assert "cannot be stopped" in str(refused("StopInstances", "UnsupportedOperation"))
    deleted = str(refused("DeleteVolume", "UnsupportedOperation"))
    assert "cannot be stopped" not in deleted
    assert "does not offer this operation" in deleted
