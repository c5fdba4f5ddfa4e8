"""docker-compose.sandbox.yml against docker-compose.yml: it changes only what the sandbox needs, and with the
variables warmswarm_demos.stack sets, the two make settings both services accept."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints
from warmswarm_demos.stack import stack_env
from warmswarm_sandbox.cloud import Endpoints

from .stack_files import (
    REFERENCE,
    ROOT,
    SETTINGS,
    accepted_names,
    compose,
    interpolate,
    strings,
)

OVERRIDE = ROOT / "docker-compose.sandbox.yml"
# Where the override may differ from the stack, and why (docs/operations.md, "The stack in the sandbox").
ALLOWED = {
    ("autoscaling", "environment", "EC2_ENDPOINT_URL"),  # moto behind the strict layer, through the relay
    ("autoscaling", "environment", "AWS_ACCESS_KEY_ID"),  # moto's fixed credentials
    ("autoscaling", "environment", "AWS_SECRET_ACCESS_KEY"),
    ("autoscaling", "environment", "AWS_EC2_METADATA_DISABLED"),  # no metadata service may be asked
    ("autoscaling", "volumes"),  # the manager's socket is in the sandbox's run dir
    ("autoscaling", "ports"),  # one manager: the routing mesh instead of a host port
    ("autoscaling", "deploy", "placement", "max_replicas_per_node"),
    ("director", "volumes"),
    ("redis", "deploy", "replicas"),  # the sandbox's own Redis plays the stack's
}
ENDPOINTS = Endpoints(
    ec2_endpoint_url="http://127.0.0.1:41001",
    aws_region="us-east-1",
    docker_host="unix:///run/wsbx-7/manager/docker.sock",
    redis_url="redis://127.0.0.1:41002/0",
    sandbox_image="warmswarm/sandbox:latest",
    swarm_manager_addr="10.7.0.2:2377",
    node_cache_path="/run/wsbx-7/cache-root/cache",
)
NETWORK = {
    "AUTOSCALING_AVAILABILITY_ZONES": "us-east-1a,us-east-1b",
    "AUTOSCALING_SUBNET_IDS": json.dumps({"us-east-1a": "subnet-0aaa", "us-east-1b": "subnet-0bbb"}),
    "AUTOSCALING_SECURITY_GROUP_IDS": "sg-0123",
}


def override() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(OVERRIDE.read_text())
    return loaded


def leaves(node: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The paths the override sets; a list (volumes, ports) counts as one value, as docker merges it by key."""
    if isinstance(node, Mapping):
        return [leaf for key, value in node.items() for leaf in leaves(value, (*path, str(key)))]
    return [path]


def sandbox_env() -> dict[str, str]:
    return stack_env(
        ENDPOINTS,
        network=NETWORK,
        manager_addr="10.7.0.2",
        docker_socket="/run/wsbx-7/manager/docker.sock",
        docker_gid=106,
        tokens=("ops-token-of-the-sandbox-stack", "api-token-of-the-sandbox-stack"),
        version="sandbox-0123456789ab",
        cluster="stack",
        replicas=2,
    )


def merged_environment(service: str, env: Mapping[str, str]) -> dict[str, str]:
    """The service's environment after docker's merge (a mapping: the override's names win), interpolated."""
    base = compose()["services"][service].get("environment") or {}
    extra = override()["services"].get(service, {}).get("environment") or {}
    return {name: interpolate(str(value), env) for name, value in {**base, **extra}.items()}


def test_the_override_changes_only_what_the_sandbox_needs() -> None:
    changed = {leaf[1:] if leaf[0] == "services" else leaf for leaf in leaves(override()) if leaf != ("version",)}
    assert override()["version"] == compose()["version"]
    assert changed == ALLOWED


def test_its_lists_replace_the_stacks_own_entries() -> None:
    # docker merges volumes by target and ports by published port: these must be the stack's own keys, or the
    # stack's entry would stay next to the override's.
    stack, sandbox = compose()["services"], override()["services"]
    for service in ("autoscaling", "director"):
        targets = {volume["target"] for volume in stack[service]["volumes"]}
        assert {volume["target"] for volume in sandbox[service]["volumes"]} <= targets
    published = {port["published"] for port in stack["autoscaling"]["ports"]}
    assert {port["published"] for port in sandbox["autoscaling"]["ports"]} <= published


def test_its_own_variables_are_the_sandboxs_and_required() -> None:
    found = {m["name"]: m["op"] for value in strings(override()) for m in REFERENCE.finditer(value)}
    assert found == {"SANDBOX_EC2_ENDPOINT_URL": ":?", "SANDBOX_DOCKER_SOCKET": ":?"}
    assert set(found) <= set(sandbox_env())


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_sandboxs_values_make_settings_the_service_accepts(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = sandbox_env()
    for value in [*strings(compose()), *strings(override())]:
        interpolate(value, env)  # a required variable left out raises
    environment = merged_environment(service, env)
    settings_class = SETTINGS[service]
    for name in accepted_names(settings_class):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    settings = settings_class()
    if service == "autoscaling":
        assert settings.ec2_endpoint_url == "http://10.7.0.2:41001"  # type: ignore[attr-defined]
        assert settings.redis_url == "redis://10.7.0.2:41002/0"  # type: ignore[attr-defined]
        assert settings.node_cache_path == ENDPOINTS.node_cache_path  # type: ignore[attr-defined]
    else:
        assert settings.autoscaling_url == "http://tasks.autoscaling:8000"  # type: ignore[attr-defined]


def test_the_override_file_is_where_the_stack_module_reads_it() -> None:
    from warmswarm_demos.stack import OVERRIDE_FILE

    assert Path(ROOT / OVERRIDE_FILE) == OVERRIDE
