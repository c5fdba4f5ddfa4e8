"""Reading the Engine's answers from their bytes, at 10,000 machines: split at the elements, each element decoded only
when its version is new, an unchanged answer not decoded at all, and always the readings a whole decode gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from warmswarm_autoscaling.adapters.swarm_answers import SwarmAnswers
from warmswarm_autoscaling.adapters.swarm_listings import Unsplittable, elements
from warmswarm_models import SERVICE_LABEL_CACHE_ENABLED

# The benchmark's stand-in answers (benchmarks/ is no package: a script's folder).
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import cycle_docker_answers as docker_answers
from cycle_world import Fleet, fleet

MACHINES = 10_000
NOW_S = 1_790_000_000.0


@pytest.fixture(scope="module")
def made() -> Fleet:
    return fleet(MACHINES, seed=1, now_s=NOW_S)


def listing(parts: list[bytes]) -> bytes:
    return b"[" + b",".join(parts) + b"]\n"  # as the Engine writes it, newline and all


@pytest.fixture(scope="module")
def answers_bytes(made: Fleet) -> dict[str, bytes]:
    return {
        "nodes": listing([docker_answers.node(m) for m in made.machines]),
        "services": listing([docker_answers.service(m) for m in made.machines]),
        "tasks": listing([docker_answers.task(m) for m in made.machines]),
    }


def whole(answers_bytes: dict[str, bytes]) -> tuple[list[Any], list[Any]]:
    """The readings a whole decode gives: what the reading from bytes must equal."""
    reference = SwarmAnswers()
    nodes = reference.nodes(json.loads(answers_bytes["nodes"]))
    tasks = reference.tasks(json.loads(answers_bytes["tasks"]), json.loads(answers_bytes["services"]))
    return nodes, tasks


def test_reading_from_bytes_gives_what_a_whole_decode_gives(answers_bytes: dict[str, bytes]) -> None:
    answers = SwarmAnswers()

    nodes = answers.nodes_json(answers_bytes["nodes"])
    answers.services_json(answers_bytes["services"])
    tasks, unknown = answers.tasks_json(answers_bytes["tasks"])

    assert (nodes, tasks) == whole(answers_bytes)
    assert len(tasks) == MACHINES
    assert unknown == frozenset()


def test_the_same_answer_gives_the_same_readings_and_one_changed_task_alone_is_read_afresh(
    made: Fleet, answers_bytes: dict[str, bytes]
) -> None:
    answers = SwarmAnswers()
    answers.services_json(answers_bytes["services"])
    first, _ = answers.tasks_json(answers_bytes["tasks"])
    same, _ = answers.tasks_json(bytes(answers_bytes["tasks"]))  # equal bytes, another object
    touched = 4_321
    parts = [docker_answers.task(m, touches=1 if m.index == touched else 0) for m in made.machines]
    changed, _ = answers.tasks_json(listing(parts))

    assert all(a is b for a, b in zip(same, first, strict=True))
    assert [i for i, (a, b) in enumerate(zip(changed, first, strict=True)) if a is not b] == [touched]
    reference = SwarmAnswers().tasks(json.loads(listing(parts)), json.loads(answers_bytes["services"]))
    assert changed == reference


def test_a_changed_service_has_its_tasks_read_again_though_their_answer_is_the_same() -> None:
    answers = SwarmAnswers()
    answers.services_json(_json([_service(1, {})]))
    [before], _ = answers.tasks_json(_json([_task(7)]))
    answers.services_json(_json([_service(2, {SERVICE_LABEL_CACHE_ENABLED: "true"})]))
    [after], _ = answers.tasks_json(_json([_task(7)]))

    assert not before.wants_cache
    assert after.wants_cache


def test_a_task_of_a_service_not_listed_yet_is_told_and_read_again_once_it_is() -> None:
    answers = SwarmAnswers()
    answers.services_json(b"[]")
    [orphan], unknown = answers.tasks_json(_json([_task(7)]))
    _, still = answers.tasks_json(_json([_task(7)]))  # the same answer: told again, not taken as read
    answers.services_json(_json([_service(1, {})]))
    [task], known = answers.tasks_json(_json([_task(7)]))

    assert (unknown, still, orphan.service_name) == (frozenset({"s1"}), frozenset({"s1"}), "")
    assert (known, task.service_name) == (frozenset(), "web")


def test_an_answer_not_written_as_the_engine_writes_it_is_decoded_whole(answers_bytes: dict[str, bytes]) -> None:
    pretty = json.dumps(json.loads(answers_bytes["nodes"])[:50], indent=1).encode()
    with pytest.raises(Unsplittable):
        list(elements(pretty))  # refused as its entries are taken

    nodes = SwarmAnswers().nodes_json(pretty)

    assert nodes == SwarmAnswers().nodes(json.loads(pretty))


def test_a_list_of_objects_with_ids_inside_an_element_does_not_fool_the_split() -> None:
    # No node, service or task holds such a list; were one to, the split's pieces fail to decode as objects.
    inner = [{"ID": "x", "Version": {"Index": 1}}, {"ID": "y", "Version": {"Index": 1}}]
    body = _json([{**_node("n1", 3), "Extra": inner}, _node("n2", 4)])
    answers = SwarmAnswers()

    first = answers.nodes_json(body)
    again = answers.nodes_json(body)

    assert [n.id for n in first] == [n.id for n in again] == ["n1", "n2"]


def test_a_garbled_answer_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        SwarmAnswers().nodes_json(b'[{"ID":"n1","Version":{"Index":1}},{"ID":')


def _json(values: list[dict[str, Any]]) -> bytes:
    return json.dumps(values, separators=(",", ":")).encode()


def _node(node_id: str, version: int) -> dict[str, Any]:
    return {
        "ID": node_id,
        "Version": {"Index": version},
        "Spec": {"Labels": {}, "Role": "worker", "Availability": "active"},
        "Description": {"Hostname": node_id, "Resources": {"NanoCPUs": 10**9, "MemoryBytes": 2**30}},
        "Status": {"State": "ready", "Addr": "10.0.0.1"},
    }


def _service(version: int, labels: dict[str, str]) -> dict[str, Any]:
    return {"ID": "s1", "Version": {"Index": version}, "Spec": {"Name": "web", "Labels": labels, "Mode": {}}}


def _task(version: int) -> dict[str, Any]:
    return {
        "ID": "t1",
        "Version": {"Index": version},
        "ServiceID": "s1",
        "DesiredState": "running",
        "Status": {"State": "pending"},
        "Spec": {},
    }
