"""What both services run on: one JSON log line format, the settings errors, the bearer-token check."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi import HTTPException
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from warmswarm_runtime.auth import BearerToken, bearer_guard
from warmswarm_runtime.logs import configure_logging
from warmswarm_runtime.settings import load_settings, long_enough


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


def test_a_json_line_has_the_four_fields_then_the_extra_ones(
    restore_logging: object, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(json_lines=True, quiet=["noisy.lib"])

    logging.getLogger("warmswarm_test").info(
        "Launch %s: %s", "t3.medium in a", "cheapest fit", extra={"kind": "launch", "dry_run": False}
    )
    logging.getLogger("noisy.lib").info("said nothing an operator acts on")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("warmswarm_test").exception("a cycle crashed")

    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(lines) == 2, "the quiet logger's info line is not written"
    first, crash = lines
    assert list(first)[:4] == ["at", "level", "logger", "message"]
    assert first["level"] == "info"
    assert first["logger"] == "warmswarm_test"
    assert first["message"] == "Launch t3.medium in a: cheapest fit"
    assert (first["kind"], first["dry_run"]) == ("launch", False)
    assert crash["level"] == "error"
    assert "ValueError: boom" in crash["exception"]


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RUNTIME_TEST_")

    port: int = Field(default=1, ge=0)
    token: SecretStr | None = None

    _token_long_enough = field_validator("token")(long_enough)


def test_bad_settings_exit_2_with_one_line_per_variable_and_no_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RUNTIME_TEST_PORT", "-5")
    monkeypatch.setenv("RUNTIME_TEST_TOKEN", "short-secret")

    with pytest.raises(SystemExit) as exited:
        load_settings(_Settings, "RUNTIME_TEST_")

    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "invalid setting RUNTIME_TEST_PORT: Input should be greater than or equal to 0",
        "invalid setting RUNTIME_TEST_TOKEN: must be at least 16 characters long",
    ]


def test_the_bearer_token_is_checked_exactly() -> None:
    token = BearerToken("a-token-of-enough-length")

    assert token.admits("Bearer a-token-of-enough-length")
    assert token.admits("bearer  a-token-of-enough-length ")
    for wrong in (None, "", "a-token-of-enough-length", "Basic a-token-of-enough-length", "Bearer a-token"):
        assert not token.admits(wrong)


def test_the_guard_answers_401_without_the_token_and_403_when_none_is_set() -> None:
    guarded = bearer_guard("a-token-of-enough-length", refused="needs the token")
    off = bearer_guard(None, refused="needs the token", off="set TOKEN first")

    guarded("Bearer a-token-of-enough-length")
    with pytest.raises(HTTPException) as refused:
        guarded("Bearer wrong")
    with pytest.raises(HTTPException) as switched_off:
        off("Bearer a-token-of-enough-length")

    assert (refused.value.status_code, refused.value.detail) == (401, "needs the token")
    assert refused.value.headers == {"WWW-Authenticate": "Bearer"}
    assert (switched_off.value.status_code, switched_off.value.detail) == (403, "set TOKEN first")


def test_a_guard_of_two_tokens_admits_either_and_nothing_else() -> None:
    either = bearer_guard("the-platforms-token-0123", "the-ops-token-0123456", refused="needs a token")
    one_set = bearer_guard(None, "the-ops-token-0123456", refused="needs a token", off="set a token first")
    none_set = bearer_guard(None, None, refused="needs a token", off="set a token first")

    either("Bearer the-platforms-token-0123")
    either("Bearer the-ops-token-0123456")
    one_set("Bearer the-ops-token-0123456")
    cases = [
        (either, "Bearer the-platforms-token-0123the-ops-token-0123456"),
        (either, None),
        (one_set, "Bearer the-platforms-token-0123"),
        (none_set, "Bearer the-ops-token-0123456"),
    ]
    refusals = []
    for guard, presented in cases:
        with pytest.raises(HTTPException) as refused:
            guard(presented)
        refusals.append((refused.value.status_code, refused.value.detail))

    assert refusals == [
        (401, "needs a token"),
        (401, "needs a token"),
        (401, "needs a token"),
        (403, "set a token first"),
    ]
