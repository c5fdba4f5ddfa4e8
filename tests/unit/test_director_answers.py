"""The director's rules, called directly on fakes of its ports: what each refusal says (people read it), when the
autoscaler is asked, which waiting entry speaks for a task, and what a repeat does not do again."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from warmswarm_director.director import Director
from warmswarm_director.errors import BadRequest, Conflict, NotFound
from warmswarm_director.placement import (
    MANAGED_BY_DIRECTOR,
    MANAGED_BY_LABEL,
    legacy_service_name,
    service_name,
    service_spec,
)
from warmswarm_director.ports import NodeView, ServiceView
from warmswarm_director.schemas import ServiceRequest
from warmswarm_director.status import AutoscalerView, TaskView, Waiting, waiting_status
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, CachePolicy, GroupProperties

from .director_fakes import ALICE, PLACEMENT, FakeAutoscaler, FakeGroups, FakeSwarm


class StrictSwarm(FakeSwarm):
    """Docker's name lookups take a name; it also counts the creates it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.create_calls = 0

    async def find_service(self, name: str) -> ServiceView | None:
        assert isinstance(name, str), name
        return await super().find_service(name)

    async def create_service(self, spec: Mapping[str, Any]) -> str:
        self.create_calls += 1
        return await super().create_service(spec)


def request(**changes: Any) -> ServiceRequest:
    body = {**ALICE, "image": "busybox", "resources": {"cpus": 1, "memory_bytes": 2**30}, "groups": ["lab"], **changes}
    return ServiceRequest.model_validate(body)


@pytest.fixture
def parts() -> tuple[Director, StrictSwarm, FakeGroups, FakeAutoscaler]:
    swarm, groups, autoscaler = StrictSwarm(), FakeGroups(), FakeAutoscaler()
    groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600, warm_ttl_s=1800)
    return Director(swarm, groups, autoscaler, PLACEMENT), swarm, groups, autoscaler


Parts = tuple[Director, StrictSwarm, FakeGroups, FakeAutoscaler]


async def test_a_repeat_answers_the_terms_it_was_created_with_and_creates_nothing_again(parts: Parts) -> None:
    director, swarm, _, _ = parts
    created, was_created = await director.create_service(request())

    again, again_created = await director.create_service(request())

    assert (was_created, again_created) == (True, False)
    assert swarm.create_calls == 1
    assert again == created
    assert again.cache.warm_ttl_s == 1800
    assert (again.cache.enabled, again.cache.ttl_s) == (True, 600)


async def test_in_strict_mode_every_group_without_properties_is_named(parts: Parts) -> None:
    _, swarm, groups, autoscaler = parts
    director = Director(swarm, groups, autoscaler, PLACEMENT, strict_groups=True)

    with pytest.raises(BadRequest) as refused:
        await director.group_terms(["lab", "x", "y"])

    assert refused.value.message == (
        "group 'x' has no properties; ops set them with PUT /v1/groups/x/properties; "
        "group 'y' has no properties; ops set them with PUT /v1/groups/y/properties"
    )


async def test_a_group_without_properties_says_how_ops_set_them(parts: Parts) -> None:
    director, _, _, _ = parts

    with pytest.raises(NotFound) as missing:
        await director.group_properties("nobody-set-this")

    assert missing.value.message == (
        "group 'nobody-set-this' has no properties stored; ops set them with PUT /v1/groups/nobody-set-this/properties"
    )


async def test_an_unknown_node_id_says_how_to_create_its_service(parts: Parts) -> None:
    director, _, _, _ = parts

    for call in (director.status, director.delete_service):
        with pytest.raises(NotFound) as missing:
            await call("n9")
        assert missing.value.message == "no service for node_id 'n9'; create one with POST /v1/services"


async def test_a_service_gone_before_its_delete_is_unknown(parts: Parts) -> None:
    director, swarm, _, _ = parts
    await director.create_service(request())
    original = swarm.delete_service

    async def removed_meanwhile(service_id: str) -> None:
        swarm.services.clear()
        await original(service_id)

    swarm.delete_service = removed_meanwhile  # type: ignore[method-assign]
    with pytest.raises(NotFound) as missing:
        await director.delete_service("n1")

    assert missing.value.message == "no service for node_id 'n1'; create one with POST /v1/services"


@pytest.mark.parametrize("node_id", ["N1", "-n1", "n 1", ""])
async def test_a_malformed_node_id_is_refused_before_docker_is_asked(parts: Parts, node_id: str) -> None:
    director, swarm, _, _ = parts
    swarm.down = True  # any question to Docker would fail otherwise

    with pytest.raises(BadRequest) as refused:
        await director.status(node_id)

    assert "node_id" in refused.value.message


async def test_a_service_someone_else_made_under_the_name_is_a_conflict_saying_what_to_do(parts: Parts) -> None:
    director, swarm, _, _ = parts
    swarm.add(service_name("n1"), {})

    with pytest.raises(Conflict) as taken:
        await director.create_service(request())

    assert taken.value.message == (
        "a service named ws-n1 exists that the director did not create; remove it or use another node_id"
    )


async def test_another_owners_node_id_is_a_conflict_that_does_not_name_them(parts: Parts) -> None:
    director, swarm, _, _ = parts
    swarm.add(service_name("n1"), {**ALICE, "user_id": "bob", MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR})

    with pytest.raises(Conflict) as taken:
        await director.create_service(request())

    assert taken.value.message == "node_id 'n1' is already in use by another user or project"


# -- status: who is asked, and which reason speaks ------------------------------------------------------------


async def test_a_task_starting_on_a_node_is_told_without_asking_the_autoscaler(parts: Parts) -> None:
    director, swarm, _, autoscaler = parts
    service_id = (await director.create_service(request()))[0].service_id
    swarm.tasks_of[service_id] = [TaskView("t1", "preparing", "node-1", None, "pulling busybox", "2026-12-01")]

    status = await director.status("n1")

    assert (status.state, status.reason, status.node) == (
        "starting",
        "task is preparing on node node-1: pulling busybox",
        "node-1",
    )
    assert autoscaler.asked == 0


async def test_a_running_task_reads_the_instance_from_its_daemon_until_the_node_is_labelled(parts: Parts) -> None:
    director, swarm, _, _ = parts
    service_id = (await director.create_service(request()))[0].service_id
    swarm.tasks_of[service_id] = [TaskView("t1", "running", "node-1", None, None, "2026-12-01")]
    swarm.nodes["node-1"] = NodeView("node-1", {}, {ENGINE_LABEL_INSTANCE_ID: "i-0abc"})

    status = await director.status("n1")

    assert (status.state, status.node, status.instance_id) == ("running", "node-1", "i-0abc")
    assert status.volume_id is None


async def test_a_replaced_task_is_found_by_its_service_name(parts: Parts) -> None:
    director, swarm, _, autoscaler = parts
    service_id = (await director.create_service(request()))[0].service_id
    swarm.tasks_of[service_id] = [TaskView("t2", "pending", None, "no suitable node", None, "2026-12-01")]
    autoscaler.view_now = AutoscalerView(enabled=True, waiting=[Waiting("t1", service_name("n1"), "booting", True)])

    status = await director.status("n1")

    assert (status.state, status.reason) == ("starting", "booting")
    assert autoscaler.asked == 1


def test_the_entry_for_the_task_itself_speaks_before_one_for_its_service() -> None:
    task = TaskView("t2", "pending", None, "no suitable node", None, "2026-12-01")
    view = AutoscalerView(
        enabled=True,
        waiting=[Waiting("t1", "ws-n1", "the old task's reason", False), Waiting("t2", "other", "this task's", False)],
    )

    assert waiting_status(task, "ws-n1", view).reason == "this task's"


@pytest.mark.parametrize(
    ("task", "reason"),
    [
        (None, "the swarm has not created a task for the service yet"),
        (TaskView("t1", "pending", None, None, "waiting for a node", "x"), "task is pending: waiting for a node"),
        (TaskView("t1", "", None, None, None, "x"), "task is new"),
        (TaskView("t1", "pending", None, None, "", "x"), "task is pending"),
        (TaskView("t1", "preparing", "node-2", None, None, "x"), "task is preparing on node node-2"),
    ],
)
def test_the_swarms_own_reason_when_the_autoscaler_has_none(task: TaskView | None, reason: str) -> None:
    assert waiting_status(task, "ws-n1", AutoscalerView(enabled=False)).reason == reason


def test_a_legacy_name_keeps_forty_readable_characters() -> None:
    node_id = "a." + "b" * 60
    name = legacy_service_name(node_id)

    assert name is not None
    assert name.startswith("ws-a-" + "b" * 38 + "-")
    assert len(name) == len("ws-") + 40 + 1 + 12


def test_the_container_carries_its_owners_labels() -> None:
    spec = service_spec(request(), CachePolicy(), PLACEMENT)

    assert spec["TaskTemplate"]["ContainerSpec"]["Labels"] == {"user_id": "alice", "project_id": "p1", "node_id": "n1"}
