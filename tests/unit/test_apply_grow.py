"""apply() of a GrowVolume: ModifyVolume, then the grown-at tag by AWS's clock; a refusal because a growth is under way
or within AWS's six hours tags grown-at now; any other refusal AWS answered is tagged too (asked again in six hours at
the earliest, never each cycle); no answer or a throttle leaves the tag alone; a closed gate sends nothing."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.actions import GrowVolume
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.ports import Ec2Error
from warmswarm_models import VOLUME_GROWN_AT_TAG, format_timestamp

from .factories import NOW
from .fakes import Recorder, one

GROW = GrowVolume("vol-0a", 20, 40, "85% full while alice works")
TAGGED_NOW = ("tag_volume", "vol-0a", {VOLUME_GROWN_AT_TAG: format_timestamp(NOW)}, ())


class AwsClockRecorder(Recorder):
    """A Recorder whose AWS answers carry a Date (the grown-at tag is AWS's clock, not this replica's)."""

    def aws_clock(self) -> float | None:
        return NOW - 30.0


async def test_a_growth_modifies_then_tags_grown_at() -> None:
    ports = Recorder()

    outcome = await one(GROW, ports)

    assert ports.calls == [("modify_volume", "vol-0a", 40), TAGGED_NOW]
    assert outcome.ok


async def test_the_grown_at_tag_is_awss_clock_where_an_answer_gave_it() -> None:
    ports = AwsClockRecorder()

    await one(GROW, ports)

    assert ports.calls[-1] == ("tag_volume", "vol-0a", {VOLUME_GROWN_AT_TAG: format_timestamp(NOW - 30.0)}, ())


async def grown_with_refusal(code: str, message: str) -> tuple[Recorder, Outcome]:
    """GROW applied while EC2 answers ModifyVolume with `code`: the calls made, and the outcome."""
    ports = Recorder()
    ports.fail["modify_volume"] = Ec2Error("ModifyVolume", code, message)
    return ports, await one(GROW, ports)


@pytest.mark.parametrize("code", ["IncorrectModificationState", "VolumeModificationRateExceeded"])
async def test_a_growth_under_way_or_within_six_hours_tags_grown_at_now_and_says_why(code: str) -> None:
    ports, outcome = await grown_with_refusal(code, "refused by the test")

    assert ports.calls == [("modify_volume", "vol-0a", 40), TAGGED_NOW]
    assert outcome.error is not None
    assert code in outcome.error
    assert "grown-at tag was lost" in outcome.error
    assert "six hours" in outcome.error


@pytest.mark.parametrize("code", ["InvalidParameterValue", "UnauthorizedOperation", "IncorrectState"])
async def test_any_other_refusal_is_tagged_so_it_is_not_asked_each_cycle(code: str) -> None:
    ports, outcome = await grown_with_refusal(code, "refused by the test")

    assert ports.calls == [("modify_volume", "vol-0a", 40), TAGGED_NOW]
    assert outcome.error is not None
    assert code in outcome.error
    assert "refused" in outcome.error


@pytest.mark.parametrize("code", ["ConnectionError", "RequestLimitExceeded", "InternalError"])
async def test_no_answer_or_a_throttle_writes_no_tag(code: str) -> None:
    ports, outcome = await grown_with_refusal(code, "no answer")

    assert ports.calls == [("modify_volume", "vol-0a", 40)]
    assert outcome.error is not None
    assert "next cycle decides again" in outcome.error


async def test_a_growth_whose_tag_fails_is_reported_grown_with_the_tags_error() -> None:
    ports = Recorder()
    ports.fail["tag_volume"] = Ec2Error("CreateTags", "RequestLimitExceeded", "throttled")

    outcome = await one(GROW, ports)

    assert ports.calls == [("modify_volume", "vol-0a", 40), TAGGED_NOW]
    assert outcome.error is not None
    assert outcome.error.startswith("grown to 40 GiB, but its grown-at tag failed")


async def test_a_closed_gate_sends_no_growth() -> None:
    ports = Recorder()

    outcome = await one(GROW, ports, gate=lambda: "the lease ran out")

    assert ports.calls == []
    assert outcome.skipped == "not applied: the lease ran out"
