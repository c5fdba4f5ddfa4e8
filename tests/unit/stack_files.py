"""The deploy files as docker stack reads them: the compose file and its `${...}` references (interpolated as
docker/cli's template does), the Dockerfiles, and the environment names each service's settings accept."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints
from pydantic import AliasChoices
from pydantic_settings import BaseSettings
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_director.settings import DirectorSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"

DOCKERFILES = {
    "autoscaling": (ROOT / "services/autoscaling/Dockerfile", "warmswarm_autoscaling", "services/autoscaling"),
    "director": (ROOT / "services/director/Dockerfile", "warmswarm_director", "services/director"),
}


SETTINGS: dict[str, type[BaseSettings]] = {"autoscaling": AutoscalingSettings, "director": DirectorSettings}


# docker/cli's interpolation: ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?error}, ${NAME?error};
# a default or a message ends at the first "}".
REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
_BRACED = re.compile(r"\$\{[^}]*\}")


class MissingVariable(Exception):
    pass


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return loaded


def strings(node: object) -> Iterator[str]:
    """Every string value in the parsed file (interpolation applies to values, not keys)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def docker_parse(inner: str) -> tuple[str, str, str]:
    """(name, operator, argument) of `${inner}` as docker/cli's template reads it: the first of ":-", "-", ":?", "?"
    that the text contains wins, split at its first occurrence. So a "-" anywhere in a `:?` message makes it a
    default (`${A:?a well-known name}` is A's... no: a variable named "A:?a well" with the default "known name")."""
    for op in (":-", "-", ":?", "?"):
        if op in inner:
            name, _, arg = inner.partition(op)
            return name, op, arg
    return inner, "", ""


def interpolate(value: str, env: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        name, op, arg = docker_parse(match.group(0)[2:-1])
        current = env.get(name)
        if op == ":-":
            return current if current else arg
        if op == "-":
            return arg if current is None else current
        if op in (":?", "?") and (current is None or (op == ":?" and not current)):
            raise MissingVariable(f"{name}: {arg}")
        return current or ""

    parts = value.split("$$")
    return "$".join(_BRACED.sub(substitute, part) for part in parts)


def accepted_names(settings_class: type[BaseSettings]) -> dict[str, str]:
    """Environment name -> field name, as pydantic-settings reads them.

    A field with a validation alias is read under its alias choices only (env_prefix does not apply to
    it); any other field under env_prefix + its name. Names are compared upper-cased (case-insensitive).
    """
    prefix = str(settings_class.model_config.get("env_prefix", ""))
    names: dict[str, str] = {}
    for field, info in settings_class.model_fields.items():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            choices = [choice for choice in alias.choices if isinstance(choice, str)]
        elif isinstance(alias, str):
            choices = [alias]
        else:
            choices = [f"{prefix}{field}"]
        for choice in choices:
            names[choice.upper()] = field
    return names
