"""The demo's pure pieces: its timing tables, the expiry figure from the released-at tag, and its start-path checks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_demos.act_cold import derived_start_path
from warmswarm_demos.narration import (
    DemoFailure,
    Narrator,
    check_start_path,
    expiry_line,
    render_table,
    seconds_after_release,
)
from warmswarm_models import BUFFER_KIND_HOT, INSTANCE_BUFFER_KIND_TAG, INSTANCE_BUFFER_TAG, format_timestamp

RELEASED_AT_S = 1_800_000_000.0  # a whole second, as the tag is


def test_a_table_aligns_its_labels_and_gives_seconds_to_one_decimal() -> None:
    table = render_table("act 9: a title", [("a step", 1.04), ("a much longer step", 12.25)])
    assert table.splitlines() == [
        "act 9: a title      seconds",
        "a step                  1.0",
        "a much longer step     12.2",
    ]


def test_a_table_as_wide_as_its_title_when_the_labels_are_short() -> None:
    assert render_table("a long title of an act", [("x", 3.0)]).splitlines() == [
        "a long title of an act  seconds",
        "x                           3.0",
    ]


def test_the_narrator_turns_steps_between_marks_into_rows() -> None:
    say = Narrator()
    say.marks = {"asked": 100.0, "running": 104.5, "gone": 110.0}
    assert say.steps([("asked → running", "asked", "running"), ("running → gone", "running", "gone")]) == [
        ("asked → running", 4.5),
        ("running → gone", 5.5),
    ]


def test_the_expiry_is_timed_from_the_released_at_tag_not_from_when_the_demo_noticed() -> None:
    tag = format_timestamp(RELEASED_AT_S + 0.9)  # released 0.9 s into a second: the tag says the second's start
    assert tag == format_timestamp(RELEASED_AT_S)
    assert seconds_after_release(tag, RELEASED_AT_S + 10.9) == pytest.approx(10.9)


def test_a_released_at_tag_that_is_no_timestamp_is_said_plainly() -> None:
    with pytest.raises(DemoFailure, match="not a timestamp"):
        seconds_after_release("yesterday", RELEASED_AT_S)


def test_the_expiry_line_names_the_tag_the_ttl_and_the_whole_seconds() -> None:
    line = expiry_line("vol-1", 10.4, 10)
    assert line.startswith("volume vol-1 deleted 10.4 s after its release (released-at tag), TTL 10 s")
    assert "whole seconds" in line


def test_a_volume_deleted_before_its_ttl_fails_the_demo() -> None:
    with pytest.raises(DemoFailure, match="before its TTL of 10 s"):
        expiry_line("vol-1", 9.9, 10)


def test_a_start_path_other_than_the_narrated_one_fails_the_demo_naming_both() -> None:
    assert check_start_path("act 3", "warm_resume", "warm_resume") == "warm_resume"
    with pytest.raises(DemoFailure, match=r"act 3: .* is cache_return, not warm_resume"):
        check_start_path("act 3", "warm_resume", "cache_return")
    with pytest.raises(DemoFailure, match="is None, not hot_claim"):
        check_start_path("act 4", "hot_claim", None)


def _machine(launched_at_s: float, tags: dict[str, str]) -> dict[str, object]:
    return {
        "LaunchTime": datetime.fromtimestamp(launched_at_s, tz=UTC),
        "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],
    }


def test_act_one_derives_a_cold_launch_from_a_machine_launched_after_the_request() -> None:
    assert derived_start_path(RELEASED_AT_S, _machine(RELEASED_AT_S + 1, {})) == "cold_launch"


def test_act_one_does_not_call_a_machine_that_ran_already_a_cold_launch() -> None:
    hot = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}
    assert derived_start_path(RELEASED_AT_S, _machine(RELEASED_AT_S - 600, hot)) == "running_return"


def test_act_four_gives_the_autoscaler_settings_it_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    from warmswarm_demos.act_buffer import hot_buffer_settings

    class Endpoints:
        sandbox_image = "busybox:demo"

    class Cloud:
        region = "us-east-1"
        endpoints = Endpoints()

    for key, value in hot_buffer_settings(Cloud()).items():  # type: ignore[arg-type]
        monkeypatch.setenv(key, value)
    settings = AutoscalingSettings(image_id="ami-12345678")
    assert settings.hot_buffer == {"t3.medium": 1}
    assert settings.availability_zones == ["us-east-1a"]
    assert settings.buffer_images == ["busybox:demo"]
