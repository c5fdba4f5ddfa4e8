"""The deploy files against the code: compose and .env.example vs the settings, the Dockerfiles, the IAM policy."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from pydantic_settings import BaseSettings
from warmswarm_autoscaling.settings import DEFAULT_PRICE_PER_HOUR

from .stack_files import (
    REFERENCE,
    ROOT,
    SETTINGS,
    MissingVariable,
    accepted_names,
    compose,
    docker_parse,
    interpolate,
    strings,
)

ENV_EXAMPLE = ROOT / ".env.example"
IAM_POLICY = ROOT / "docs" / "iam-policy.json"
# The EC2 adapter's modules: the calls that read and create, and those that change an instance's state.
EC2_ADAPTER = tuple(
    ROOT / f"services/autoscaling/src/warmswarm_autoscaling/adapters/{name}.py"
    for name in ("ec2_aiobotocore", "ec2_states")
)


def adapter_text() -> str:
    return "\n".join(path.read_text() for path in EC2_ADAPTER)


# Settings the stack leaves to the service on purpose, with the reason (a new setting must be added
# to the compose file, or here).
NOT_IN_STACK: dict[str, dict[str, str]] = {
    "autoscaling": {
        "ec2_endpoint_url": "only the sandbox points it at moto; unset means real AWS",
        "leader_lock_key": "its default derives from the cluster name, and an empty value is invalid",
    },
    "director": {},
}

# Where the stack's default deliberately differs from the code's (the code's suits a process on a laptop).
STACK_DEFAULTS: dict[str, dict[str, object]] = {
    "autoscaling": {"redis_url": "redis://redis:6379/0"},
    "director": {"redis_url": "redis://redis:6379/0", "autoscaling_url": "http://autoscaling:8000"},
}

# Values for the variables .env.example leaves empty (they are required and site-specific).
SAMPLE_REQUIRED = {
    "DOCKER_GID": "999",
    "WARMSWARM_CLUSTER": "prod",
    "AWS_REGION": "eu-central-1",
    "AUTOSCALING_AVAILABILITY_ZONES": "eu-central-1a,eu-central-1b",
    "AUTOSCALING_SUBNET_IDS": '{"eu-central-1a": "subnet-0aaa", "eu-central-1b": "subnet-0bbb"}',
    "AUTOSCALING_SECURITY_GROUP_IDS": "sg-0123",
    "AUTOSCALING_IMAGE_ID": "ami-0123456789abcdef0",
    "OPS_TOKEN": "an-ops-token-of-32-characters-ok",
    "DIRECTOR_API_TOKEN": "the-platforms-token-32-characters",
    # Required by the stack only because a compose default cannot hold JSON: the code's own default here.
    "AUTOSCALING_PRICE_PER_HOUR": json.dumps(DEFAULT_PRICE_PER_HOUR),
}

# Keys of a service and of its deploy section that compose file format 3.8 defines (docker stack's schema).
SERVICE_KEYS_3_8 = {
    "build", "cap_add", "cap_drop", "cgroup_parent", "command", "configs", "container_name", "credential_spec",
    "depends_on", "deploy", "devices", "dns", "dns_search", "domainname", "entrypoint", "env_file", "environment",
    "expose", "external_links", "extra_hosts", "healthcheck", "hostname", "image", "init", "ipc", "isolation",
    "labels", "links", "logging", "mac_address", "network_mode", "networks", "pid", "ports", "privileged",
    "read_only", "restart", "security_opt", "shm_size", "secrets", "sysctls", "stdin_open", "stop_grace_period",
    "stop_signal", "tmpfs", "tty", "ulimits", "user", "userns_mode", "volumes", "working_dir",
}  # fmt: skip
DEPLOY_KEYS_3_8 = {
    "mode", "endpoint_mode", "replicas", "labels", "rollback_config", "update_config", "resources",
    "restart_policy", "placement",
}  # fmt: skip
# Accepted by the schema but ignored by `docker stack deploy`: in a stack file they only mislead.
IGNORED_BY_STACK = {"container_name", "depends_on", "restart", "links", "network_mode", "devices", "env_file"}

ASSIGNMENT = re.compile(r"^(?P<commented>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def service_env(service: str, env: Mapping[str, str], stack: Mapping[str, Any] | None = None) -> dict[str, str]:
    environment = (stack or compose())["services"][service].get("environment") or {}
    assert isinstance(environment, dict), f"{service}: write environment as a mapping"
    return {name: interpolate(str(value), env) for name, value in environment.items()}


def unknown_variables(service: str, stack: Mapping[str, Any] | None = None) -> list[str]:
    accepted = accepted_names(SETTINGS[service])
    return sorted(name for name in service_env(service, SAMPLE_REQUIRED, stack) if name.upper() not in accepted)


def env_example() -> dict[str, tuple[str, bool]]:
    """Name -> (value, required); a commented `# NAME=value` line is an optional setting at its default."""
    found: dict[str, tuple[str, bool]] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = ASSIGNMENT.match(line.strip())
        if match:
            value = match["value"]
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
            found[match["name"]] = (value, not match["commented"])
    return found


def referenced() -> dict[str, set[str]]:
    """Variable name -> the operators it is referenced with in the compose file ("" for a plain ${NAME})."""
    found: dict[str, set[str]] = {}
    for value in strings(compose()):
        for match in REFERENCE.finditer(value.replace("$$", "")):
            found.setdefault(match["name"], set()).add(match["op"] or "")
    return found


def settings_from(service: str, env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> BaseSettings:
    settings_class = SETTINGS[service]
    # Nothing from the machine running the tests may leak into what is being checked.
    for name in accepted_names(settings_class):
        monkeypatch.delenv(name, raising=False)
    for name, value in service_env(service, env).items():
        monkeypatch.setenv(name, value)
    return settings_class()


def test_the_file_is_a_swarm_stack_of_the_three_services() -> None:
    stack = compose()
    assert stack["version"] == "3.8"
    assert set(stack["services"]) == {"autoscaling", "director", "redis"}
    for name, service in stack["services"].items():
        assert set(service) <= SERVICE_KEYS_3_8, f"{name}: not in compose file format 3.8"
        assert not set(service) & IGNORED_BY_STACK, f"{name}: docker stack deploy ignores these"
        assert service["image"], name
        assert isinstance(service.get("deploy"), dict), f"{name} needs a deploy section"
        assert set(service["deploy"]) <= DEPLOY_KEYS_3_8, name
        assert "restart_policy" in service["deploy"], name


def constraints(service: Mapping[str, Any]) -> set[str]:
    return {re.sub(r"\s+", "", c) for c in service["deploy"]["placement"]["constraints"]}


def bind_mounts(service: Mapping[str, Any]) -> set[tuple[str, str]]:
    mounts = set()
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume["source"], volume["target"]
        mounts.add((source, target))
    return mounts


def test_the_autoscaler_runs_on_managers_with_the_docker_socket_and_replicas_from_the_environment() -> None:
    autoscaling = compose()["services"]["autoscaling"]
    assert "node.role==manager" in constraints(autoscaling)
    assert ("/var/run/docker.sock", "/var/run/docker.sock") in bind_mounts(autoscaling)
    assert autoscaling["deploy"]["replicas"] == "${AUTOSCALING_REPLICAS:-2}"
    # Replicas publish a host port each: two on one node could not both bind it.
    assert autoscaling["deploy"]["placement"]["max_replicas_per_node"] == 1


def test_the_director_also_needs_a_manager_and_redis_keeps_its_data_on_one() -> None:
    services = compose()["services"]
    assert "node.role==manager" in constraints(services["director"])
    assert ("/var/run/docker.sock", "/var/run/docker.sock") in bind_mounts(services["director"])
    redis = services["redis"]
    assert redis["image"] == "redis:7-alpine"
    assert "node.role==manager" in constraints(redis)
    assert "ports" not in redis  # reached on the stack's network only
    volume = next(iter(bind_mounts(redis)))
    assert volume == ("redis-data", "/data")
    assert "redis-data" in compose()["volumes"]


def test_only_the_two_apis_are_published_and_in_host_mode() -> None:
    published = {}
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert isinstance(port, dict), f"{name}: use the long port syntax (it has mode)"
            assert port["mode"] == "host", f"{name}: the routing mesh is not assumed"
            published[name] = port["target"]
    assert published == {"autoscaling": 8000, "director": 8001}


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_every_variable_passed_to_a_service_is_one_of_its_settings(service: str) -> None:
    unknown = unknown_variables(service)
    assert not unknown, f"{service} has no setting {unknown}; it reads {sorted(accepted_names(SETTINGS[service]))}"


def test_an_unknown_variable_is_caught() -> None:
    # The guard itself: a typo, or a variable of the other service, must fail the check above.
    stack = compose()
    stack["services"]["autoscaling"]["environment"]["AUTOSCALING_IDLE_GRACE_SECONDS"] = "300"
    stack["services"]["director"]["environment"]["AUTOSCALING_IDLE_GRACE_S"] = "300"
    assert unknown_variables("autoscaling", stack) == ["AUTOSCALING_IDLE_GRACE_SECONDS"]
    assert unknown_variables("director", stack) == ["AUTOSCALING_IDLE_GRACE_S"]


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_every_setting_of_a_service_is_wired_in_the_stack(service: str) -> None:
    accepted = accepted_names(SETTINGS[service])
    passed = {accepted[name.upper()] for name in service_env(service, SAMPLE_REQUIRED) if name.upper() in accepted}
    forgotten = sorted(set(SETTINGS[service].model_fields) - passed - set(NOT_IN_STACK[service]))
    assert not forgotten, (
        f"{service}: settings {forgotten} are not in docker-compose.yml; add them (and to .env.example),"
        " or to NOT_IN_STACK with the reason"
    )
    assert not passed & set(NOT_IN_STACK[service]), "listed in NOT_IN_STACK but passed after all"


def test_no_variable_is_passed_twice_under_two_names() -> None:
    for service, settings_class in SETTINGS.items():
        accepted = accepted_names(settings_class)
        fields = [accepted[name.upper()] for name in service_env(service, SAMPLE_REQUIRED)]
        assert len(fields) == len(set(fields)), f"{service}: one setting under two names is ambiguous"


def test_env_example_and_the_compose_file_name_the_same_variables() -> None:
    example, used = env_example(), referenced()
    assert sorted(set(example) - set(used)) == [], ".env.example lists variables the stack does not use"
    assert sorted(set(used) - set(example)) == [], "the stack uses variables .env.example does not explain"


def test_every_variable_in_env_example_is_explained_by_a_comment_with_its_default_or_required() -> None:
    lines = ENV_EXAMPLE.read_text().splitlines()
    for index, line in enumerate(lines):
        match = ASSIGNMENT.match(line.strip())
        if not match:
            continue
        comment = []
        for above in reversed(lines[:index]):
            if not above.startswith("#") or ASSIGNMENT.match(above.strip()):
                break
            comment.append(above)
        text = " ".join(comment)
        assert text.strip("# "), f"{match['name']} has no comment above it"
        assert "Default:" in text or "Required" in text, f"{match['name']}: say its default, or that it is required"


def test_required_variables_are_set_in_env_example_and_optional_ones_show_the_stack_default() -> None:
    example = env_example()
    defaults = {
        m["name"]: m["arg"] for value in strings(compose()) for m in REFERENCE.finditer(value) if m["op"] == ":-"
    }
    for name, ops in referenced().items():
        value, required = example[name]
        if ":?" in ops:
            assert required, f"{name} is required by the stack: leave it uncommented in .env.example"
        else:
            assert not required, f"{name} has a default: show it commented out"
            assert value == defaults[name], f"{name}: .env.example says {value!r}, the stack uses {defaults[name]!r}"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_the_stack_defaults_are_the_services_own(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the required variables set: every other setting comes from the compose file's defaults.
    settings = settings_from(service, SAMPLE_REQUIRED, monkeypatch)
    required_fields = {accepted_names(SETTINGS[service]).get(name) for name in SAMPLE_REQUIRED}
    chosen = STACK_DEFAULTS[service]
    for field, info in SETTINGS[service].model_fields.items():
        if field in required_fields or info.is_required():
            continue
        value = getattr(settings, field)
        expected = chosen.get(field, info.get_default(call_default_factory=True))
        if expected is None and value == "":
            continue  # an empty optional string: the code treats it as unset
        assert value == expected, f"{service}.{field}: the stack's default {value!r} is not the code's {expected!r}"


@pytest.mark.parametrize("service", sorted(SETTINGS))
def test_env_example_filled_in_gives_valid_settings(service: str, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {name: value for name, (value, _) in env_example().items() if value}
    # Uncommenting every optional line must also be valid: their values are the defaults.
    settings_from(service, {**env, **SAMPLE_REQUIRED}, monkeypatch)


def test_a_missing_required_variable_stops_the_deploy() -> None:
    for name in SAMPLE_REQUIRED:
        partial = {key: value for key, value in SAMPLE_REQUIRED.items() if key != name}
        values = list(strings(compose()))
        with pytest.raises(MissingVariable, match=name):
            [interpolate(value, partial) for value in values]


def test_every_token_is_required_by_the_stack_and_never_has_a_default() -> None:
    # A default would be the same token on every deploy, known to anyone who has read this file.
    tokens = {name: ops for name, ops in referenced().items() if name.endswith("TOKEN")}
    assert set(tokens) == {"OPS_TOKEN", "DIRECTOR_API_TOKEN"}
    for name, ops in tokens.items():
        assert ops == {":?"}, f"{name}: write it ${{{name}:?...}}"
    director = compose()["services"]["director"]["environment"]
    assert "DIRECTOR_API_TOKEN" in director
    assert "DIRECTOR_API_TOKEN" not in compose()["services"]["autoscaling"]["environment"], "the platform's, not ops'"


def test_docker_reads_every_reference_as_these_checks_do() -> None:
    # docker/cli reads "-" before ":?": a message with a "-" would silently become a default.
    for value in strings(compose()):
        for match in REFERENCE.finditer(value.replace("$$", "")):
            assert docker_parse(match.group(0)[2:-1]) == (match["name"], match["op"] or "", match["arg"] or ""), value


def test_every_dollar_in_the_compose_file_is_a_braced_reference() -> None:
    # The checks above read ${...} only; a bare $NAME would escape them.
    for value in strings(compose()):
        assert "$" not in REFERENCE.sub("", value.replace("$$", "")), value


# ---- the IAM policy ---------------------------------------------------------------------------------

CLUSTER_CONDITION_KEYS = {"aws:RequestTag/warmswarm:cluster", "ec2:ResourceTag/warmswarm:cluster"}


def adapter_operations() -> set[str]:
    """The EC2 operations the adapter calls: the names it passes to its _call and _pages helpers."""
    return set(re.findall(r"_(?:call|pages)\(\s*\"([A-Za-z]+)\",\s*\"[a-z_]+\"", adapter_text()))


def statements() -> list[dict[str, Any]]:
    policy = json.loads(IAM_POLICY.read_text())
    assert policy["Version"] == "2012-10-17"
    found: list[dict[str, Any]] = policy["Statement"]
    return found


def as_list(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def condition_keys(statement: Mapping[str, Any]) -> set[str]:
    return {key for block in statement.get("Condition", {}).values() for key in block}


def test_the_grep_finds_every_ec2_call_of_the_adapter() -> None:
    botocore_methods = set(re.findall(r"\"([a-z]+(?:_[a-z]+)+)\"", adapter_text()))
    expected = {
        "run_instances", "terminate_instances", "create_volume", "attach_volume", "detach_volume", "create_tags",
        "delete_tags", "delete_volume", "describe_instances", "describe_instance_types", "describe_volumes",
        "stop_instances", "start_instances",
    }  # fmt: skip
    assert expected <= botocore_methods
    # CamelCase names found for each of them: the checks below see every call.
    assert len(adapter_operations()) >= len(expected)


def test_the_policy_allows_every_call_the_adapter_makes() -> None:
    allowed = {action for s in statements() if s["Effect"] == "Allow" for action in as_list(s["Action"])}
    missing = sorted(f"ec2:{op}" for op in adapter_operations() if f"ec2:{op}" not in allowed)
    assert not missing, f"docs/iam-policy.json does not allow {missing}, which the EC2 adapter calls"


def test_every_mutating_call_is_allowed_only_under_a_cluster_tag_condition() -> None:
    mutating = {op for op in adapter_operations() if not op.startswith("Describe")}
    assert mutating >= {
        "RunInstances", "TerminateInstances", "CreateVolume", "AttachVolume", "DetachVolume", "CreateTags",
        "DeleteTags", "DeleteVolume",
    }  # fmt: skip
    for op in sorted(mutating):
        granting = [s for s in statements() if s["Effect"] == "Allow" and f"ec2:{op}" in as_list(s["Action"])]
        assert granting, op
        tagged = [s for s in granting if condition_keys(s) & CLUSTER_CONDITION_KEYS]
        assert tagged, f"ec2:{op} is never tied to the warmswarm:cluster tag"
        for statement in granting:
            resources = as_list(statement["Resource"])
            assert "*" not in resources, f"{statement['Sid']}: ec2:{op} on every resource"
            if condition_keys(statement) & (CLUSTER_CONDITION_KEYS | {"ec2:CreateAction"}):
                continue
            # The only grant without a tag condition: the existing resources a launch uses, which are
            # not created by it and so carry no request tag. Never instances or volumes.
            assert op == "RunInstances", f"{statement['Sid']}: ec2:{op} without a tag condition"
            kinds = {resource.split(":")[-1].split("/")[0] for resource in resources}
            assert kinds <= {"image", "subnet", "security-group", "network-interface", "key-pair"}, kinds


def test_tags_are_created_only_by_create_actions_or_on_the_clusters_resources() -> None:
    for statement in statements():
        if "ec2:CreateTags" not in as_list(statement["Action"]):
            continue
        conditions = statement["Condition"]
        by_create = conditions.get("StringEquals", {}).get("ec2:CreateAction")
        by_tag = conditions.get("StringEquals", {}).get("ec2:ResourceTag/warmswarm:cluster")
        assert by_create or by_tag, statement["Sid"]
        if by_create:
            assert set(as_list(by_create)) == {"RunInstances", "CreateVolume"}


def test_the_cluster_is_a_placeholder_and_pass_role_is_limited_to_one_role() -> None:
    for statement in statements():
        for block in statement.get("Condition", {}).values():
            for key, value in block.items():
                if key in CLUSTER_CONDITION_KEYS:
                    assert value == "${CLUSTER}"
        if "iam:PassRole" in as_list(statement["Action"]):
            assert as_list(statement["Resource"]) == ["arn:aws:iam::${ACCOUNT_ID}:role/${NODE_ROLE}"]
            assert statement["Condition"]["StringEquals"]["iam:PassedToService"] == "ec2.amazonaws.com"
