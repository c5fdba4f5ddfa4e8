"""AWS's EC2 rules, written once (warmswarm_ec2rules): each refusal with its code and HTTP status, each call that
changes nothing, ClientTokens, capacity per offering, the token buckets, billing's minimum, and ModifyVolume's
states and limits."""

from __future__ import annotations

import pytest
from warmswarm_ec2rules import instances
from warmswarm_ec2rules.billing import billed_s, ebs_usd, gb_months, gib_s, instance_usd
from warmswarm_ec2rules.capacity import capacity_refusal, lacks_capacity
from warmswarm_ec2rules.modifications import (
    COMPLETED,
    MODIFICATION_COOLDOWN_S,
    MODIFYING,
    OPTIMIZING,
    Modification,
    Timing,
    modify_refusal,
    progress_percent,
    state_of,
)
from warmswarm_ec2rules.refusals import Refusal, instance_not_found, volume_not_found
from warmswarm_ec2rules.throttling import (
    DEFAULT_REQUEST_SIZES,
    DEFAULT_RESOURCE_SIZES,
    BucketSize,
    Throttle,
    TokenBucket,
    request_category,
)
from warmswarm_ec2rules.tokens import ClientTokens, Replay
from warmswarm_ec2rules.volumes import EbsVolume, Ec2Instance, attach_refusal, delete_refusal, detach_refusal

ZONE, OTHER_ZONE = "us-east-1a", "us-east-1b"
AVAILABLE = EbsVolume("vol-1", ZONE, "available")
RUNNING = Ec2Instance("i-1", ZONE, "running")


def code_and_status(outcome: object) -> tuple[str, int] | None:
    """A refusal's code and HTTP status; None for anything else (no refusal, or a state an instance moves to)."""
    return (outcome.code, outcome.status) if isinstance(outcome, Refusal) else None


# -- zones and attachments -------------------------------------------------------------------------------------


def test_a_volume_attaches_only_to_an_instance_in_its_own_zone() -> None:
    elsewhere = Ec2Instance("i-2", OTHER_ZONE, "running")
    assert code_and_status(attach_refusal(AVAILABLE, elsewhere)) == ("InvalidVolume.ZoneMismatch", 400)
    assert attach_refusal(AVAILABLE, RUNNING) is None


@pytest.mark.parametrize("attachment_state", ["attaching", "attached"])
def test_a_volume_has_one_attachment_at_most(attachment_state: str) -> None:
    in_use = EbsVolume("vol-1", ZONE, "in-use", attachment_state, "i-9")
    assert code_and_status(attach_refusal(in_use, RUNNING)) == ("VolumeInUse", 400)


@pytest.mark.parametrize(
    "volume",
    [EbsVolume("vol-1", ZONE, "creating"), EbsVolume("vol-1", ZONE, "in-use", "detaching", "i-9")],
    ids=["creating", "detaching"],
)
def test_only_an_available_volume_attaches(volume: EbsVolume) -> None:
    assert code_and_status(attach_refusal(volume, RUNNING)) == ("IncorrectState", 400)


@pytest.mark.parametrize("state", ["pending", "stopping", "shutting-down", "terminated"])
def test_a_volume_attaches_only_to_a_running_or_stopped_instance(state: str) -> None:
    assert code_and_status(attach_refusal(AVAILABLE, Ec2Instance("i-1", ZONE, state))) == (
        "IncorrectInstanceState",
        400,
    )
    assert attach_refusal(AVAILABLE, Ec2Instance("i-1", ZONE, "stopped")) is None


def test_the_zone_is_checked_before_what_time_may_change() -> None:
    busy_elsewhere = EbsVolume("vol-1", ZONE, "in-use", "attaching", "i-9")
    pending_elsewhere = Ec2Instance("i-2", OTHER_ZONE, "pending")
    assert code_and_status(attach_refusal(busy_elsewhere, pending_elsewhere)) == ("InvalidVolume.ZoneMismatch", 400)
    assert code_and_status(attach_refusal(busy_elsewhere, Ec2Instance("i-2", ZONE, "pending"))) == ("VolumeInUse", 400)


def test_only_an_attached_volume_detaches() -> None:
    attached = EbsVolume("vol-1", ZONE, "in-use", "attached", "i-1")
    assert detach_refusal(attached, "i-1") is None
    assert detach_refusal(attached, None) is None  # AWS finds the attachment itself
    assert detach_refusal(EbsVolume("vol-1", ZONE, "in-use", "attaching", "i-1"), "i-1") is None
    assert code_and_status(detach_refusal(AVAILABLE, None)) == ("IncorrectState", 400)
    detaching = EbsVolume("vol-1", ZONE, "in-use", "detaching", "i-1")
    assert code_and_status(detach_refusal(detaching, "i-1")) == ("IncorrectState", 400)
    assert code_and_status(detach_refusal(attached, "i-2")) == ("InvalidAttachment.NotFound", 400)


@pytest.mark.parametrize("attachment_state", ["attaching", "attached", "detaching"])
def test_a_volume_in_use_is_not_deleted(attachment_state: str) -> None:
    refused = delete_refusal(EbsVolume("vol-1", ZONE, "in-use", attachment_state, "i-7"))
    assert code_and_status(refused) == ("VolumeInUse", 400)
    assert refused is not None
    assert "i-7" in refused.message


def test_only_an_available_volume_is_deleted() -> None:
    assert delete_refusal(AVAILABLE) is None
    assert code_and_status(delete_refusal(EbsVolume("vol-1", ZONE, "creating"))) == ("IncorrectState", 400)


def test_not_found_refusals_are_client_errors_naming_the_id() -> None:
    for refusal, code, named in (
        (instance_not_found("i-0dead"), "InvalidInstanceID.NotFound", "i-0dead"),
        (volume_not_found("vol-0dead"), "InvalidVolume.NotFound", "vol-0dead"),
    ):
        assert code_and_status(refusal) == (code, 400)
        assert named in refusal.message


# -- instance states -------------------------------------------------------------------------------------------


def test_a_stopped_instance_starts_pending() -> None:
    assert instances.start("i-1", "stopped") == "pending"


@pytest.mark.parametrize("state", ["pending", "running"])
def test_starting_a_pending_or_running_instance_changes_nothing(state: str) -> None:
    assert instances.start("i-1", state) is None


@pytest.mark.parametrize("state", ["stopping", "shutting-down", "terminated"])
def test_only_a_stopped_instance_starts(state: str) -> None:
    assert code_and_status(instances.start("i-1", state)) == ("IncorrectInstanceState", 400)


def test_a_start_is_refused_for_capacity_only_when_it_would_start() -> None:
    no_room = capacity_refusal({("t3.medium", ZONE)}, "t3.medium", ZONE)
    assert code_and_status(instances.start("i-1", "stopped", capacity_refusal=no_room)) == (
        "InsufficientInstanceCapacity",
        500,
    )
    assert instances.start("i-1", "running", capacity_refusal=no_room) is None
    assert code_and_status(instances.start("i-1", "terminated", capacity_refusal=no_room)) == (
        "IncorrectInstanceState",
        400,
    )


def test_a_running_instance_stops_and_a_stopping_or_stopped_one_is_left_as_it_is() -> None:
    assert instances.stop("i-1", "running") == "stopping"
    assert instances.stop("i-1", "stopping") is None
    assert instances.stop("i-1", "stopped") is None


@pytest.mark.parametrize("state", ["pending", "shutting-down", "terminated"])
def test_only_a_running_instance_stops(state: str) -> None:
    assert code_and_status(instances.stop("i-1", state)) == ("IncorrectInstanceState", 400)


@pytest.mark.parametrize("state", ["pending", "running", "stopping", "stopped"])
def test_any_instance_not_shutting_down_terminates(state: str) -> None:
    assert instances.terminate(state) == "shutting-down"


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_terminating_an_instance_shutting_down_or_terminated_changes_nothing(state: str) -> None:
    assert instances.terminate(state) is None


# -- capacity --------------------------------------------------------------------------------------------------


def test_capacity_is_per_instance_type_and_zone() -> None:
    unavailable = {("t3.medium", ZONE)}
    assert lacks_capacity(unavailable, "t3.medium", ZONE)
    assert not lacks_capacity(unavailable, "t3.medium", OTHER_ZONE)
    assert not lacks_capacity(unavailable, "t3.large", ZONE)
    assert not lacks_capacity(unavailable, "t3.medium", None)  # a launch naming no zone may go elsewhere
    assert code_and_status(capacity_refusal(unavailable, "t3.medium", ZONE)) == ("InsufficientInstanceCapacity", 500)
    assert capacity_refusal(unavailable, "t3.medium", OTHER_ZONE) is None


def test_an_offering_without_a_zone_has_no_capacity_in_any_zone() -> None:
    unavailable = {("g4dn.xlarge", None)}
    for zone in (ZONE, OTHER_ZONE, None):
        assert lacks_capacity(unavailable, "g4dn.xlarge", zone)
    assert not lacks_capacity(unavailable, "t3.medium", ZONE)


# -- ClientTokens ----------------------------------------------------------------------------------------------


def test_the_same_token_and_arguments_replay_the_first_success() -> None:
    tokens: ClientTokens[list[str]] = ClientTokens()
    assert tokens.recall("RunInstances", "tok", ("t3.medium", 1)) is None
    tokens.remember("RunInstances", "tok", ("t3.medium", 1), ["i-1"], succeeded=True)
    tokens.remember("RunInstances", "tok", ("t3.medium", 1), ["i-2"], succeeded=True)  # the first one stays
    assert tokens.recall("RunInstances", "tok", ("t3.medium", 1)) == Replay(["i-1"])


def test_the_same_token_with_other_arguments_is_idempotent_parameter_mismatch() -> None:
    tokens: ClientTokens[str] = ClientTokens()
    tokens.remember("CreateVolume", "tok", ("us-east-1a", 20), "vol-1", succeeded=True)
    refused = tokens.recall("CreateVolume", "tok", ("us-east-1a", 30))
    assert isinstance(refused, Refusal)
    assert code_and_status(refused) == ("IdempotentParameterMismatch", 400)


def test_a_failure_is_not_remembered() -> None:
    tokens: ClientTokens[str] = ClientTokens()
    tokens.remember("RunInstances", "tok", ("t3.medium",), "refused", succeeded=False)
    assert tokens.recall("RunInstances", "tok", ("t3.large",)) is None  # free to try again, with any arguments


def test_tokens_are_per_action_and_an_empty_token_asks_for_none() -> None:
    tokens: ClientTokens[str] = ClientTokens()
    tokens.remember("RunInstances", "tok", (), "i-1", succeeded=True)
    assert tokens.recall("CreateVolume", "tok", ()) is None
    tokens.remember("RunInstances", "", (), "i-2", succeeded=True)
    assert tokens.recall("RunInstances", "", ()) is None
    tokens.clear()
    assert tokens.recall("RunInstances", "tok", ()) is None


# -- throttling ------------------------------------------------------------------------------------------------


def test_a_bucket_allows_its_burst_then_refills_at_its_rate_up_to_its_size() -> None:
    bucket = TokenBucket.full(BucketSize(burst=3, refill_per_s=2), now_s=10.0)
    assert [bucket.take(10.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(10.25)  # half a token
    assert bucket.take(10.5)  # one token after half a second
    assert bucket.level(1000.0) == 3  # never above its size
    assert bucket.level(5.0) == 3  # an earlier time refills nothing and takes nothing
    assert bucket.updated_s == 1000.0
    assert bucket.take(1000.0, count=3)
    assert not bucket.can_take(1000.0)


def test_each_api_has_its_own_request_bucket_sized_by_its_category() -> None:
    throttle = Throttle({"describe": BucketSize(1, 0.001), "mutating": BucketSize(2, 0.001)}, {})
    assert throttle.refusal("DescribeInstances", 0.0) is None
    refused = throttle.refusal("DescribeInstances", 0.0)
    assert code_and_status(refused) == ("RequestLimitExceeded", 503)
    assert throttle.refusal("DescribeVolumes", 0.0) is None  # another API: its own bucket
    assert throttle.refusal("CreateTags", 0.0) is None
    assert throttle.refusal("CreateTags", 0.0) is None  # mutating: burst 2
    assert throttle.refusal("CreateTags", 0.0) is not None
    assert throttle.refused == {"DescribeInstances": 1, "CreateTags": 1}


def test_non_mutating_apis_are_describe_get_list_and_search() -> None:
    for action in ("DescribeInstances", "GetConsoleOutput", "ListImagesInRecycleBin", "SearchTransitGatewayRoutes"):
        assert request_category(action) == "describe"
    for action in ("RunInstances", "CreateTags", "AttachVolume", "TerminateInstances"):
        assert request_category(action) == "mutating"


def test_the_resource_bucket_counts_instances_and_a_refused_call_takes_no_token() -> None:
    throttle = Throttle(
        {"describe": BucketSize(5, 1), "mutating": BucketSize(5, 1), "RunInstances": BucketSize(2, 0.001)},
        {"RunInstances": BucketSize(10, 0.001)},
    )
    assert throttle.refusal("RunInstances", 0.0, resources=8) is None
    assert code_and_status(throttle.refusal("RunInstances", 0.0, resources=3)) == (
        "RequestResourceCountExceeded",
        503,
    )
    # The refused call took no request token: the request bucket (burst 2) still has one.
    assert throttle.refusal("RunInstances", 0.0, resources=2) is None
    assert throttle.tokens() == {"request": {"RunInstances": 0}, "resource": {"RunInstances": 0}}
    assert code_and_status(throttle.refusal("RunInstances", 0.0)) == ("RequestLimitExceeded", 503)


def test_a_resized_bucket_is_full_again_and_refill_fills_them_all() -> None:
    throttle = Throttle({"describe": BucketSize(1, 0.001), "mutating": BucketSize(1, 0.001)}, {})
    assert throttle.refusal("DescribeVolumes", 0.0) is None
    assert throttle.refusal("CreateTags", 0.0) is None
    throttle.resize_request("describe", BucketSize(2, 0.001))
    assert throttle.refusal("DescribeVolumes", 0.0) is None
    assert throttle.refusal("DescribeVolumes", 0.0) is None
    assert throttle.refusal("CreateTags", 0.0) is not None  # mutating was not resized
    throttle.refill()
    assert throttle.refusal("CreateTags", 0.0) is None


def test_the_default_buckets_are_aws_documented_ones() -> None:
    assert {
        "describe": BucketSize(100, 20),
        "mutating": BucketSize(50, 5),
        "RunInstances": BucketSize(5, 2),
    } == DEFAULT_REQUEST_SIZES
    assert {
        "RunInstances": BucketSize(1000, 2),
        "TerminateInstances": BucketSize(1000, 20),
        "StartInstances": BucketSize(1000, 2),
        "StopInstances": BucketSize(1000, 20),
    } == DEFAULT_RESOURCE_SIZES


# -- billing ---------------------------------------------------------------------------------------------------


def test_a_running_period_is_billed_per_second_with_a_minimum() -> None:
    assert billed_s(10.0, minimum_s=60.0) == 60.0
    assert billed_s(60.0, minimum_s=60.0) == 60.0
    assert billed_s(3600.5, minimum_s=60.0) == 3600.5
    assert instance_usd(billed_s(10.0, minimum_s=60.0), 0.36) == pytest.approx(0.006)


def test_disks_are_billed_per_gb_month_prorated_by_the_second() -> None:
    month_gib_s = gib_s(100, since_s=0.0, until_s=730 * 3600.0)
    assert month_gib_s == 100 * 730 * 3600.0
    assert gb_months(month_gib_s, hours_per_month=730.0) == pytest.approx(100.0)
    assert ebs_usd(gb_months(gib_s(20, 50.0, 50.0 + 365 * 3600.0), hours_per_month=730.0), 0.08) == pytest.approx(0.8)


# -- ModifyVolume ------------------------------------------------------------------------------------------------

TIMING = Timing(modifying_s=10.0, optimizing_s=20.0, cooldown_s=MODIFICATION_COOLDOWN_S)
GROWN = Modification("vol-1", original_size_gib=8, target_size_gib=16, started_s=1000.0)


def test_a_modification_goes_modifying_optimizing_completed_and_its_progress_with_it() -> None:
    assert state_of(GROWN, 1000.0, TIMING) == MODIFYING
    assert state_of(GROWN, 1009.9, TIMING) == MODIFYING
    assert state_of(GROWN, 1010.0, TIMING) == OPTIMIZING
    assert state_of(GROWN, 1030.0, TIMING) == COMPLETED
    assert [progress_percent(GROWN, t, TIMING) for t in (990.0, 1000.0, 1015.0, 1030.0, 5000.0)] == [0, 0, 50, 100, 100]


def test_a_volume_only_grows() -> None:
    refused = modify_refusal("vol-1", "in-use", 16, 8, None, 0.0, TIMING)
    assert code_and_status(refused) == ("InvalidParameterValue", 400)
    assert refused is not None
    assert "smaller" in refused.message
    assert modify_refusal("vol-1", "in-use", 16, 32, None, 0.0, TIMING) is None
    assert modify_refusal("vol-1", "available", 16, 16, None, 0.0, TIMING) is None  # the same size: other changes
    assert code_and_status(modify_refusal("vol-1", "in-use", 16, 16_385, None, 0.0, TIMING)) == (
        "InvalidParameterValue",
        400,
    )


def test_a_volume_is_modified_only_in_use_or_available() -> None:
    for state in ("creating", "deleting", "error"):
        assert code_and_status(modify_refusal("vol-1", state, 8, 16, None, 0.0, TIMING)) == ("IncorrectState", 400)


def test_one_modification_at_a_time_then_six_hours_apart() -> None:
    during = modify_refusal("vol-1", "in-use", 16, 32, GROWN, 1015.0, TIMING)
    assert code_and_status(during) == ("IncorrectModificationState", 400)
    assert during is not None
    assert "OPTIMIZING" in during.message
    assert code_and_status(modify_refusal("vol-1", "in-use", 16, 32, GROWN, 1005.0, TIMING)) == (
        "IncorrectModificationState",
        400,
    )
    completed_but_early = modify_refusal("vol-1", "in-use", 16, 32, GROWN, 1000.0 + 6 * 3600 - 1, TIMING)
    assert code_and_status(completed_but_early) == ("VolumeModificationRateExceeded", 400)
    assert modify_refusal("vol-1", "in-use", 16, 32, GROWN, 1000.0 + 6 * 3600, TIMING) is None
    # A shrink is refused first, whatever the clock: no wait cures it.
    assert code_and_status(modify_refusal("vol-1", "in-use", 16, 8, GROWN, 1015.0, TIMING)) == (
        "InvalidParameterValue",
        400,
    )
