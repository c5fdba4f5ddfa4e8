"""The director's pure placement: the service spec a request becomes, and the service name a node id becomes."""

from __future__ import annotations

import hashlib
import re
import signal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from warmswarm_director.placement import MANAGED_BY_LABEL, PlacementConfig, is_managed, service_name, service_spec
from warmswarm_director.schemas import ServiceRequest
from warmswarm_models import (
    SERVICE_LABEL_ACCEPT_RECYCLED,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    SERVICE_LABEL_GROUPS_APPLIED,
    SERVICE_LABEL_RECYCLE_MACHINES,
    SERVICE_LABEL_WARM_TTL_S,
    CachePolicy,
)

GIB = 2**30
CONFIG = PlacementConfig(cache_mount_path="/cache", node_cache_path="/var/lib/warmswarm/cache", stop_grace_s=10.0)
CACHE_ON = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3")
CACHE_OFF = CachePolicy()
# swarmkit's rule for service names, written out again here so the test does not trust the code's copy.
SWARM_NAME = re.compile(r"^[a-zA-Z0-9](?:[-_]*[A-Za-z0-9]+)*$")


def request(**overrides: Any) -> ServiceRequest:
    body: dict[str, Any] = {
        "user_id": "42",
        "project_id": "p-7",
        "node_id": "n1",
        "image": "busybox:1.36",
        "resources": {"cpus": 1.5, "memory_bytes": 2 * GIB},
        "groups": ["staff"],
    }
    body.update(overrides)
    return ServiceRequest.model_validate(body)


def test_name_and_labels_carry_the_owner_the_cache_policy_and_the_director_mark() -> None:
    spec = service_spec(request(), CACHE_ON, CONFIG, groups_applied=["everyone", "lab"])

    assert spec["Name"] == "ws-n1"
    assert spec["Labels"] == {
        "user_id": "42",
        "project_id": "p-7",
        "node_id": "n1",
        SERVICE_LABEL_CACHE_ENABLED: "true",
        SERVICE_LABEL_CACHE_TTL_S: "3600",
        SERVICE_LABEL_CACHE_SIZE_GIB: "20",
        SERVICE_LABEL_CACHE_VOLUME_TYPE: "gp3",
        SERVICE_LABEL_WARM_TTL_S: "0",
        SERVICE_LABEL_RECYCLE_MACHINES: "false",
        SERVICE_LABEL_ACCEPT_RECYCLED: "false",
        SERVICE_LABEL_GROUPS_APPLIED: "everyone,lab",
        MANAGED_BY_LABEL: "director",
    }
    assert is_managed(spec["Labels"])


def test_constraints_pin_the_service_to_exactly_its_owners_node() -> None:
    spec = service_spec(request(), CACHE_OFF, CONFIG)

    assert spec["TaskTemplate"]["Placement"]["Constraints"] == [
        "node.labels.user_id==42",
        "node.labels.project_id==p-7",
        "node.labels.node_id==n1",
    ]


def test_reservations_and_limits_are_what_was_asked_for() -> None:
    resources = service_spec(request(), CACHE_OFF, CONFIG)["TaskTemplate"]["Resources"]

    assert resources == {
        "Reservations": {"NanoCPUs": 1_500_000_000, "MemoryBytes": 2 * GIB},
        "Limits": {"NanoCPUs": 1_500_000_000, "MemoryBytes": 2 * GIB},
    }


def test_gpus_are_reserved_as_generic_resources_and_absent_from_limits() -> None:
    body = {"cpus": 4, "memory_bytes": 16 * GIB, "gpus": 2}
    resources = service_spec(request(resources=body), CACHE_OFF, CONFIG)["TaskTemplate"]["Resources"]

    assert resources["Reservations"]["GenericResources"] == [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": 2}}]
    assert "GenericResources" not in resources["Limits"]


def test_zero_gpus_reserve_no_generic_resources() -> None:
    body = {"cpus": 1, "memory_bytes": GIB, "gpus": 0}
    resources = service_spec(request(resources=body), CACHE_OFF, CONFIG)["TaskTemplate"]["Resources"]

    assert "GenericResources" not in resources["Reservations"]


def test_cache_on_binds_the_nodes_cache_path_at_the_mount_path() -> None:
    container = service_spec(request(), CACHE_ON, CONFIG)["TaskTemplate"]["ContainerSpec"]

    assert container["Mounts"] == [{"Type": "bind", "Source": "/var/lib/warmswarm/cache", "Target": "/cache"}]


def test_cache_off_mounts_nothing_and_says_so_in_the_labels() -> None:
    spec = service_spec(request(), CACHE_OFF, CONFIG)

    assert "Mounts" not in spec["TaskTemplate"]["ContainerSpec"]
    assert spec["Labels"][SERVICE_LABEL_CACHE_ENABLED] == "false"


def test_mount_paths_come_from_the_config() -> None:
    config = PlacementConfig(cache_mount_path="/data", node_cache_path="/mnt/ebs", stop_grace_s=1)
    [mount] = service_spec(request(), CACHE_ON, config)["TaskTemplate"]["ContainerSpec"]["Mounts"]

    assert (mount["Source"], mount["Target"]) == ("/mnt/ebs", "/data")


def test_container_spec_has_image_command_and_stop_grace_in_nanoseconds() -> None:
    spec = service_spec(request(command=["sh", "-c", "sleep 60"]), CACHE_OFF, CONFIG)
    container = spec["TaskTemplate"]["ContainerSpec"]

    assert container["Image"] == "busybox:1.36"
    assert container["Command"] == ["sh", "-c", "sleep 60"]
    assert container["StopGracePeriod"] == 10 * 1_000_000_000


def test_no_command_leaves_the_images_own() -> None:
    container = service_spec(request(), CACHE_OFF, CONFIG)["TaskTemplate"]["ContainerSpec"]

    assert "Command" not in container


def test_one_replica_restarted_only_on_failure() -> None:
    spec = service_spec(request(), CACHE_OFF, CONFIG)

    assert spec["Mode"] == {"Replicated": {"Replicas": 1}}
    assert spec["TaskTemplate"]["RestartPolicy"] == {"Condition": "on-failure"}


def test_spec_is_a_function_of_its_inputs() -> None:
    assert service_spec(request(), CACHE_ON, CONFIG) == service_spec(request(), CACHE_ON, CONFIG)


@pytest.mark.parametrize("node_id", ["n1", "node_7", "a-b-c", "x" * 60])
def test_a_node_id_swarm_accepts_in_a_name_is_used_as_is(node_id: str) -> None:
    assert service_name(node_id) == f"ws-{node_id}"


@pytest.mark.parametrize("node_id", ["n.1", "trailing-", "trailing_", "x" * 61, "a" + "." * 127, "v1.2.3-rc.4"])
def test_other_node_ids_get_a_valid_stable_name_of_their_own(node_id: str) -> None:
    name = service_name(node_id)

    assert SWARM_NAME.fullmatch(name), name
    assert len(name) <= 63
    assert name.startswith("ws-")
    assert name == service_name(node_id)


def test_node_ids_that_read_alike_get_different_names() -> None:
    names = {service_name(node_id) for node_id in ("a.b", "a_b.", "a.b.", "a-b-")}

    assert len(names) == 4


# -- names: two node ids never share a service name ---------------------------------------------------------

# The owner id rule (warmswarm_models.owner), written out again: any of these is a node id a caller may send.
NODE_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
NODE_IDS = st.from_regex(NODE_ID, fullmatch=True)


def old_hashed_name(node_id: str) -> str:
    """The name the director gave a node id it could not use as is, before names were made disjoint."""
    readable = re.sub(r"[^A-Za-z0-9_-]", "-", node_id)[:40].rstrip("-_")
    return f"ws-{readable}-{hashlib.sha256(node_id.encode()).hexdigest()[:12]}"


def test_a_node_id_chosen_as_another_ids_old_hashed_name_gets_a_name_of_its_own() -> None:
    victim = "bea.thesis"
    # Under the old scheme this plain id was named exactly as the victim's service: ws-bea-thesis-<12 hex>.
    squatter = old_hashed_name(victim).removeprefix("ws-")
    assert NODE_ID.fullmatch(squatter)

    assert service_name(squatter) != service_name(victim)


@settings(max_examples=500)
@given(st.lists(NODE_IDS, min_size=2, max_size=20, unique=True))
def test_distinct_node_ids_get_distinct_valid_swarm_names(node_ids: list[str]) -> None:
    names = [service_name(node_id) for node_id in node_ids]

    assert len(set(names)) == len(node_ids)
    for name in names:
        assert SWARM_NAME.fullmatch(name), name
        assert len(name) <= 63, name


@settings(max_examples=500)
@given(NODE_IDS)
def test_no_other_node_id_can_be_named_as_this_one(node_id: str) -> None:
    name = service_name(node_id)
    # A node id used as is is named "ws-" + itself, so this is the one id whose plain name could equal `name`;
    # any other id gets a hashed name, and sharing one would take a sha256 collision.
    squatter = name.removeprefix("ws-")

    if squatter != node_id and NODE_ID.fullmatch(squatter):
        assert service_name(squatter) != name


def test_an_id_swarm_cannot_take_is_told_apart_at_once() -> None:
    # The name check once nested two quantifiers and took exponential time to refuse "ws-aaa…a_": one such
    # request held the director's event loop, and every other request with it, for ever.
    def too_slow(_signum: int, _frame: object) -> None:
        raise TimeoutError("service_name took more than 2 s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        names = [service_name("a" * length + "_") for length in range(1, 128)]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    assert all(SWARM_NAME.fullmatch(name) for name in names)
