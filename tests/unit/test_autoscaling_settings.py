"""The autoscaler's settings: an invalid one stops start-up with one line naming the variable and the problem."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from warmswarm_autoscaling.settings import AutoscalingSettings


def start(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOSCALING_", "WARMSWARM_", "OPS_TOKEN"))}
    return subprocess.run(
        [sys.executable, "-m", "warmswarm_autoscaling"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_invalid_settings_stop_start_up_naming_each_variable() -> None:
    done = start({"AUTOSCALING_MAX_INSTANCES": "-1", "AUTOSCALING_IDLE_GRACE_S": "soon"})

    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert any(line.startswith("invalid setting AUTOSCALING_IMAGE_ID:") for line in lines)
    assert any(line.startswith("invalid setting AUTOSCALING_MAX_INSTANCES:") for line in lines)
    assert any(line.startswith("invalid setting AUTOSCALING_IDLE_GRACE_S:") for line in lines)
    assert "Traceback" not in done.stderr


def test_an_aliased_setting_is_named_as_the_operator_sets_it() -> None:
    done = start(
        {
            "AUTOSCALING_IMAGE_ID": "ami-1",
            "WARMSWARM_CLUSTER": "",
            "OPS_TOKEN": "short",
            "AUTOSCALING_PRICE_PER_HOUR": '{"t3.medium": "cheap"}',
        }
    )

    assert done.returncode == 2
    assert sorted(done.stderr.strip().splitlines()) == [
        "invalid setting AUTOSCALING_OPS_TOKEN (or OPS_TOKEN): must be at least 16 characters long",
        "invalid setting AUTOSCALING_PRICE_PER_HOUR: Input should be a valid number,"
        " unable to parse string as a number",
        "invalid setting WARMSWARM_CLUSTER (or AUTOSCALING_CLUSTER): String should have at least 1 character",
    ]
    assert "short" not in done.stderr, "a token, even a bad one, is never printed"


def test_allowed_type_without_a_price_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-1")
    monkeypatch.setenv("AUTOSCALING_ALLOWED_INSTANCE_TYPES", "t3.medium,x9.huge")
    with pytest.raises(ValueError, match=r"no price for allowed type\(s\) \['x9.huge'\]"):
        AutoscalingSettings()  # type: ignore[call-arg]


def test_zones_outside_the_region_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-1")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AUTOSCALING_AVAILABILITY_ZONES", "us-east-1a")
    with pytest.raises(ValueError, match="not in AWS_REGION eu-west-1"):
        AutoscalingSettings()  # type: ignore[call-arg]


def test_the_launch_settings_digest_changes_with_what_a_machine_boots_with_and_only_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-11111111")
    today = AutoscalingSettings()  # type: ignore[call-arg]
    assert today.policy().launch_settings == today.launch_settings_digest()
    assert len(today.launch_settings_digest()) == 16
    monkeypatch.setenv("AUTOSCALING_IDLE_GRACE_S", "17")  # a planner knob: machines boot the same
    assert AutoscalingSettings().launch_settings_digest() == today.launch_settings_digest()  # type: ignore[call-arg]
    for name, value in [
        ("AUTOSCALING_IMAGE_ID", "ami-22222222"),
        ("AUTOSCALING_SECURITY_GROUP_IDS", "sg-1"),
        ("AUTOSCALING_BUFFER_IMAGES", "busybox:1"),
        ("NODE_CACHE_PATH", "/srv/cache"),
    ]:
        with monkeypatch.context() as changed:
            changed.setenv(name, value)
            assert AutoscalingSettings().launch_settings_digest() != today.launch_settings_digest(), name  # type: ignore[call-arg]


def test_the_full_listing_interval_is_read_from_its_variable_and_must_be_positive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AUTOSCALING_IMAGE_ID", "ami-1")
    assert AutoscalingSettings().ec2_full_listing_interval_s == 120.0  # type: ignore[call-arg]
    monkeypatch.setenv("AUTOSCALING_EC2_FULL_LISTING_INTERVAL_S", "300")
    assert AutoscalingSettings().ec2_full_listing_interval_s == 300.0  # type: ignore[call-arg]
    monkeypatch.setenv("AUTOSCALING_EC2_FULL_LISTING_INTERVAL_S", "0")
    with pytest.raises(ValueError, match="ec2_full_listing_interval_s"):
        AutoscalingSettings()  # type: ignore[call-arg]
