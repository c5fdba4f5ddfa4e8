"""Reading the Engine's answers once per version: unchanged objects are reused, changed ones read afresh."""

from __future__ import annotations

from typing import Any

from warmswarm_autoscaling.adapters.swarm_answers import SwarmAnswers
from warmswarm_models import SERVICE_LABEL_CACHE_ENABLED, Owner, Resources


def raw_node(version: int | None, labels: dict[str, str] | None = None, node_id: str = "n1") -> dict[str, Any]:
    node: dict[str, Any] = {
        "ID": node_id,
        "Description": {"Hostname": f"host-{node_id}", "Resources": {"NanoCPUs": 2_000_000_000, "MemoryBytes": 2**30}},
        "Spec": {"Labels": labels or {}, "Role": "worker", "Availability": "active"},
        "Status": {"State": "ready", "Addr": "10.0.0.1"},
    }
    if version is not None:
        node["Version"] = {"Index": version}
    return node


def raw_service(version: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"ID": "s1", "Version": {"Index": version}, "Spec": {"Name": "web", "Labels": labels or {}, "Mode": {}}}


def raw_task(version: int) -> dict[str, Any]:
    return {
        "ID": "t1",
        "Version": {"Index": version},
        "ServiceID": "s1",
        "DesiredState": "running",
        "Status": {"State": "pending"},
        "Spec": {"Placement": {"Constraints": ["node.labels.user_id==alice"]}},
    }


def test_an_unchanged_node_is_the_same_reading_and_a_new_version_is_read_again() -> None:
    answers = SwarmAnswers()
    [first] = answers.nodes([raw_node(5)])
    [again] = answers.nodes([raw_node(5, labels={"user_id": "edited-without-a-new-version"})])
    [changed] = answers.nodes([raw_node(6, labels={"user_id": "alice"})])

    assert again is first  # the version says nothing changed: nothing is parsed
    assert first.owner == Owner()
    assert changed.owner == Owner(user_id="alice")


def test_an_answer_without_a_version_is_always_read_afresh() -> None:
    answers = SwarmAnswers()
    [first] = answers.nodes([raw_node(None)])
    [second] = answers.nodes([raw_node(None, labels={"user_id": "alice"})])

    assert second is not first
    assert second.owner == Owner(user_id="alice")


def test_a_node_missing_from_a_listing_is_forgotten() -> None:
    answers = SwarmAnswers()
    [first] = answers.nodes([raw_node(5)])
    answers.nodes([raw_node(3, node_id="n2")])
    [back] = answers.nodes([raw_node(5)])

    assert back is not first
    assert back == first


def test_a_task_is_read_again_when_its_service_changes() -> None:
    # Ops turn the cache on: the service's labels change, its task's own version does not.
    answers = SwarmAnswers()
    [before] = answers.tasks([raw_task(7)], [raw_service(1)])
    [same] = answers.tasks([raw_task(7)], [raw_service(1)])
    [after] = answers.tasks([raw_task(7)], [raw_service(2, labels={SERVICE_LABEL_CACHE_ENABLED: "true"})])

    assert same is before
    assert not before.wants_cache
    assert after.wants_cache
    assert (after.owner, after.service_name) == (Owner(user_id="alice"), "web")


def test_a_task_whose_service_went_is_read_again_without_it() -> None:
    answers = SwarmAnswers()
    [before] = answers.tasks([raw_task(7)], [raw_service(1)])
    [after] = answers.tasks([raw_task(7)], [])  # removed between the two listings; its task lingers

    assert (before.service_name, after.service_name) == ("web", "")


def test_a_task_carries_when_swarm_created_it_and_none_when_unreadable() -> None:
    answers = SwarmAnswers()
    created = {**raw_task(7), "CreatedAt": "2026-12-01T10:00:00.500000001Z"}
    [read] = answers.tasks([created], [raw_service(1)])
    [unreadable] = answers.tasks([{**raw_task(8), "CreatedAt": "yesterday"}], [raw_service(1)])

    assert read.created_at == 1_796_119_200.5  # 2026-12-01T10:00:00.5Z: nanoseconds cut to microseconds
    assert unreadable.created_at is None


def test_nodes_offering_the_same_share_one_resources_value_and_gpus_are_read_apart() -> None:
    answers = SwarmAnswers()
    gpu_node = raw_node(1, node_id="n3")
    gpu_node["Description"]["Resources"]["GenericResources"] = [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": 2}}]
    first, second, gpu = answers.nodes([raw_node(1, node_id="n1"), raw_node(1, node_id="n2"), gpu_node])

    assert first.resources is second.resources  # immutable, so one value serves both
    assert first.resources == Resources(cpus=2.0, memory_bytes=2**30)
    assert gpu.resources == Resources(cpus=2.0, memory_bytes=2**30, generic={"gpu": 2})
