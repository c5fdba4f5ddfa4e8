"""Settings at start-up: read once from the environment, or refused with one line per bad variable, naming it."""

from __future__ import annotations

import sys
from typing import TypeVar

from pydantic import AliasChoices, SecretStr, ValidationError
from pydantic_settings import BaseSettings

# A shorter bearer token can be guessed; both services refuse to start with one.
MIN_TOKEN_CHARS = 16

S = TypeVar("S", bound=BaseSettings)


def load_settings(settings: type[S], env_prefix: str) -> S:
    """The settings from the environment, or exit 2 after one line per invalid setting, naming its variable."""
    try:
        return settings()
    except ValidationError as error:
        for problem in error.errors():
            message = str(problem["msg"]).removeprefix("Value error, ")
            if problem["loc"]:
                # The first element is the setting; the rest points inside it (a key of a JSON value).
                name = setting_name(settings, env_prefix, str(problem["loc"][0]))
                print(f"invalid setting {name}: {message}", file=sys.stderr)
            else:  # a check across settings: its message names them
                print(f"invalid settings: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def setting_name(settings: type[BaseSettings], env_prefix: str, loc: str) -> str:
    """The variable(s) an operator sets, for error lines: 'DIRECTOR_OPS_TOKEN (or OPS_TOKEN)'.

    `loc` is what pydantic reports: the field's name, or its first alias when it has aliases.
    """
    for name, info in settings.model_fields.items():
        alias = info.validation_alias
        choices = [str(c) for c in alias.choices] if isinstance(alias, AliasChoices) else []
        if loc == name or loc in choices:
            if len(choices) > 1:
                return f"{choices[0]} (or {' or '.join(choices[1:])})"
            if choices:
                return choices[0]
            return f"{env_prefix}{name.upper()}"
    return loc or "settings"


def long_enough(value: SecretStr | None) -> SecretStr | None:
    """A field validator for bearer tokens; the message never repeats the value."""
    if value is not None and len(value.get_secret_value()) < MIN_TOKEN_CHARS:
        raise ValueError(f"must be at least {MIN_TOKEN_CHARS} characters long")
    return value
