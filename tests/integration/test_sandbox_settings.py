"""`make up` starts the autoscaler with the caller's AUTOSCALING_* settings; one it refuses fails the start at once."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from warmswarm_sandbox.cloud import Sandbox, SandboxError
from warmswarm_sandbox.services import caller_settings, new_ops_token, start_autoscaler

from tests.integration.sandbox_probes import wait_for


def test_the_callers_autoscaling_settings_are_taken_but_not_the_sandboxs_own() -> None:
    environ = {
        "AUTOSCALING_HOT_BUFFER": '{"t3.medium": 1}',
        "AUTOSCALING_MAX_INSTANCES": "0",
        "AUTOSCALING_IMAGE_ID": "ami-0fromproduction",
        "AUTOSCALING_HTTP_PORT": "80",
        "PATH": "/usr/bin",
    }
    settings, ignored = caller_settings(environ)
    assert settings == {"AUTOSCALING_HOT_BUFFER": '{"t3.medium": 1}', "AUTOSCALING_MAX_INSTANCES": "0"}
    assert ignored == ["AUTOSCALING_HTTP_PORT", "AUTOSCALING_IMAGE_ID"]


def test_a_callers_setting_reaches_the_sandboxs_autoscaler(sandbox: Sandbox) -> None:
    """Issue 33 part 6: it dropped every AUTOSCALING_* before. A cluster of its own and no room to launch, so that
    the hot buffer it is given shows in its status and nothing of the shared sandbox moves."""
    settings, _ = caller_settings({"AUTOSCALING_HOT_BUFFER": '{"t3.medium": 1}', "AUTOSCALING_MAX_INSTANCES": "0"})
    ops_token = new_ops_token()
    cluster = f"settings-{uuid.uuid4().hex[:8]}"
    url = start_autoscaler(
        sandbox, name="autoscaling-settings", settings={**settings, "WARMSWARM_CLUSTER": cluster}, ops_token=ops_token
    )
    try:
        with httpx.Client(base_url=url, timeout=10, headers={"Authorization": f"Bearer {ops_token}"}) as client:

            def hot_parts() -> list[dict[str, object]] | None:
                answer = client.get("/v1/status")
                if answer.status_code != 200:
                    return None
                return [b for b in answer.json().get("buffers", []) if b["kind"] == "hot"] or None

            parts = wait_for("the status shows the hot buffer's parts", hot_parts, timeout_s=30)
            assert {(p["instance_type"], p["target"]) for p in parts} == {("t3.medium", 1)}, json.dumps(parts)
    finally:
        sandbox.kill("autoscaling-settings")


def test_a_setting_the_autoscaler_refuses_fails_the_start_with_its_own_words(sandbox: Sandbox) -> None:
    """Not a minute's wait for a /ready that never comes: the process exited, and its log says why."""
    with pytest.raises(SandboxError) as refused:
        start_autoscaler(
            sandbox, name="autoscaling-refused", settings={"AUTOSCALING_WARM_BUFFER": "not json"}, ready_timeout_s=120
        )
    assert "exited before it was ready" in str(refused.value)
    assert "warm_buffer" in str(refused.value).lower()
