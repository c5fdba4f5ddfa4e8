"""The director's settings and request rules: plain aliases, and errors that name the variable or the field."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError
from warmswarm_director.schemas import ServiceRequest, check_group_id
from warmswarm_director.settings import DirectorSettings
from warmswarm_models import DEFAULT_NODE_CACHE_PATH

TOKEN = "0123456789abcdef"
API_TOKEN = "the-platforms-token-0123"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test run itself may have any of these set; each test says what it wants.
    for name in ("DOCKER_HOST", "REDIS_URL", "OPS_TOKEN", "CACHE_MOUNT_PATH", "NODE_CACHE_PATH", "AUTOSCALING_URL"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"DIRECTOR_{name}", raising=False)
    monkeypatch.delenv("DIRECTOR_API_TOKEN", raising=False)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", TOKEN)
    monkeypatch.setenv("DIRECTOR_API_TOKEN", API_TOKEN)
    settings = DirectorSettings()  # type: ignore[call-arg]

    assert settings.ops_token.get_secret_value() == TOKEN
    assert settings.cache_mount_path == "/cache"
    assert settings.node_cache_path == DEFAULT_NODE_CACHE_PATH
    assert settings.autoscaling_url is None
    assert (settings.stop_grace_s, settings.http_host, settings.http_port) == (10.0, "0.0.0.0", 8001)


def test_plain_names_are_read_and_prefixed_ones_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", TOKEN)
    monkeypatch.setenv("DIRECTOR_API_TOKEN", API_TOKEN)
    monkeypatch.setenv("DOCKER_HOST", "unix:///plain.sock")
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("AUTOSCALING_URL", "http://127.0.0.1:8000/")
    monkeypatch.setenv("NODE_CACHE_PATH", "/mnt/cache")
    monkeypatch.setenv("DIRECTOR_DOCKER_HOST", "unix:///prefixed.sock")

    settings = DirectorSettings()  # type: ignore[call-arg]

    assert settings.docker_host == "unix:///prefixed.sock"
    assert settings.redis_url == "redis://127.0.0.1:1/0"
    assert settings.autoscaling_url == "http://127.0.0.1:8000"
    assert settings.node_cache_path == "/mnt/cache"


def test_a_short_ops_token_is_refused_without_repeating_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", "s3cret")
    monkeypatch.setenv("DIRECTOR_API_TOKEN", API_TOKEN)

    with pytest.raises(ValidationError) as raised:
        DirectorSettings()  # type: ignore[call-arg]

    assert "16 characters" in str(raised.value)
    assert "s3cret" not in raised.value.errors()[0]["msg"]


def test_start_up_with_a_bad_setting_stops_with_one_line_naming_the_variable() -> None:
    environment = {
        "PATH": "/usr/bin:/bin",
        "OPS_TOKEN": TOKEN,
        "DIRECTOR_API_TOKEN": API_TOKEN,
        "DIRECTOR_HTTP_PORT": "eighty",
    }

    done = subprocess.run(
        [sys.executable, "-m", "warmswarm_director"], env=environment, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("invalid setting DIRECTOR_HTTP_PORT:")


def test_a_missing_token_is_named_by_both_its_names() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "warmswarm_director"],
        env={"PATH": "/usr/bin:/bin", "DIRECTOR_API_TOKEN": API_TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.strip() == "invalid setting DIRECTOR_OPS_TOKEN (or OPS_TOKEN): Field required"


def test_the_api_token_is_required_and_named() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "warmswarm_director"],
        env={"PATH": "/usr/bin:/bin", "OPS_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert done.stderr.strip() == "invalid setting DIRECTOR_API_TOKEN: Field required"


def test_a_short_api_token_is_refused_without_repeating_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", TOKEN)
    monkeypatch.setenv("DIRECTOR_API_TOKEN", "s3cret")

    with pytest.raises(ValidationError) as raised:
        DirectorSettings()  # type: ignore[call-arg]

    [problem] = raised.value.errors()
    assert problem["loc"] == ("api_token",)
    assert "16 characters" in problem["msg"]
    assert "s3cret" not in problem["msg"]


def test_the_api_token_must_not_be_the_ops_token(monkeypatch: pytest.MonkeyPatch) -> None:
    # The platform holding the ops token could change every group's cache and expire volumes.
    monkeypatch.setenv("OPS_TOKEN", TOKEN)
    monkeypatch.setenv("DIRECTOR_API_TOKEN", TOKEN)

    with pytest.raises(ValidationError) as raised:
        DirectorSettings()  # type: ignore[call-arg]

    message = raised.value.errors()[0]["msg"]
    assert "DIRECTOR_API_TOKEN" in message
    assert "OPS_TOKEN" in message
    assert TOKEN not in message


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "user_id": "42",
        "project_id": "7",
        "node_id": "n1",
        "image": "busybox",
        "resources": {"cpus": 1, "memory_bytes": 2**30},
        "groups": ["staff"],
    }
    return base | overrides


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"user_id": "a b"}, "user_id"),
        ({"project_id": ""}, "project_id"),
        ({"node_id": "-x"}, "node_id"),
        ({"resources": {"cpus": -1, "memory_bytes": 2**30}}, "cpus"),
        ({"resources": {"cpus": 0, "memory_bytes": 2**30}}, "cpus"),
        ({"resources": {"cpus": 1, "memory_bytes": 0}}, "memory_bytes"),
        ({"resources": {"cpus": 1e300, "memory_bytes": 2**30}}, "cpus"),
        ({"resources": {"cpus": "NaN", "memory_bytes": 2**30}}, "cpus"),
        ({"resources": {"cpus": 1, "memory_bytes": 2**63}}, "memory_bytes"),
        ({"resources": {"cpus": 1, "memory_bytes": 2**30, "gpus": -1}}, "gpus"),
        ({"groups": []}, "groups"),
        ({"groups": ["has space"]}, "groups"),
        ({"image": ""}, "image"),
    ],
)
def test_a_bad_request_names_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as raised:
        ServiceRequest.model_validate(body(**overrides))

    [problem] = raised.value.errors()
    assert field in problem["loc"]


def test_an_owner_id_error_says_which_id_and_why() -> None:
    with pytest.raises(ValidationError) as raised:
        ServiceRequest.model_validate(body(user_id="a b"))

    assert "user_id='a b' is not a valid id" in raised.value.errors()[0]["msg"]


@pytest.mark.parametrize("group_id", ["a", "A.b_c-9", "x" * 64])
def test_valid_group_ids(group_id: str) -> None:
    assert check_group_id(group_id) == group_id


@pytest.mark.parametrize("group_id", ["", "x" * 65, "a b", "a/b", "a:b", "ä"])
def test_invalid_group_ids(group_id: str) -> None:
    with pytest.raises(ValueError, match="group id"):
        check_group_id(group_id)
