"""Ids as the platform sends them: JSON integers or strings, normalised to the text that labels and tags carry."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr
from warmswarm_director.main import build_app
from warmswarm_director.placement import service_name
from warmswarm_director.schemas import GROUP_ID_PATTERN, MAX_INTEGER_ID, OWNER_ID_PATTERN, check_group_id
from warmswarm_director.settings import DirectorSettings
from warmswarm_models import GroupProperties, InvalidOwner, Owner

from .director_fakes import FakeAutoscaler, FakeGroups, FakeSwarm

OPS_TOKEN = "ops-token-for-the-id-tests"
API_TOKEN = "api-token-of-the-platform-for-ids"
REQUEST = {"image": "busybox", "resources": {"cpus": 1, "memory_bytes": 2**30}}


@pytest.fixture
async def platform() -> AsyncIterator[tuple[httpx.AsyncClient, FakeSwarm]]:
    swarm, groups = FakeSwarm(), FakeGroups()
    groups.stored["7"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600)
    settings = DirectorSettings(ops_token=SecretStr(OPS_TOKEN), api_token=SecretStr(API_TOKEN))
    app = build_app(settings, swarm=swarm, groups=groups, autoscaler=FakeAutoscaler())
    headers = {"Authorization": f"Bearer {API_TOKEN}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://d", headers=headers) as http:
        yield http, swarm


async def test_integer_ids_get_their_service_labelled_with_their_text(
    platform: tuple[httpx.AsyncClient, FakeSwarm],
) -> None:
    http, swarm = platform
    answer = await http.post(
        "/v1/services", json={"user_id": 42, "project_id": 3, "node_id": 9, "groups": [7], **REQUEST}
    )

    assert answer.status_code == 201, answer.text
    assert answer.json()["node_id"] == "9"
    assert answer.json()["cache"]["enabled"] is True  # group 7's properties were found under "7"
    spec = swarm.specs[service_name("9")]
    assert spec["TaskTemplate"]["Placement"]["Constraints"] == [
        "node.labels.user_id==42",
        "node.labels.project_id==3",
        "node.labels.node_id==9",
    ]
    assert {spec["Labels"][key] for key in ("user_id", "project_id", "node_id")} == {"42", "3", "9"}
    # The same owner as strings is the same request: it finds the service.
    again = await http.post(
        "/v1/services", json={"user_id": "42", "project_id": "3", "node_id": "9", "groups": ["7"], **REQUEST}
    )
    assert again.status_code == 200, again.text
    assert (await http.get("/v1/services/9")).status_code == 200


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("user_id", True, "valid string"),  # a bool is not an id, though Python calls it an int
        ("user_id", -1, "an integer id is 0 to"),
        ("node_id", MAX_INTEGER_ID + 1, "an integer id is 0 to"),
        ("project_id", 2.5, "valid string"),
        ("user_id", "Alice", "is not a valid id"),
        ("groups", [False], "valid string"),
        ("groups", [-7], "an integer id is 0 to"),
    ],
)
async def test_ids_that_are_not_ids_are_a_422_naming_the_field(
    platform: tuple[httpx.AsyncClient, FakeSwarm], field: str, value: Any, says: str
) -> None:
    http, swarm = platform
    body = {"user_id": 42, "project_id": 3, "node_id": 9, "groups": [7], **REQUEST, field: value}
    answer = await http.post("/v1/services", json=body)

    assert answer.status_code == 422, answer.text
    assert field in answer.json()["message"]
    assert says in answer.json()["message"]
    assert swarm.specs == {}


async def test_a_whole_number_written_with_a_fraction_is_that_integer(
    platform: tuple[httpx.AsyncClient, FakeSwarm],
) -> None:
    # JSON Schema calls 9.0 an integer, and some JSON encoders write integers that way.
    http, _ = platform
    answer = await http.post(
        "/v1/services", json={"user_id": 42.0, "project_id": 3, "node_id": 9.0, "groups": [7.0], **REQUEST}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["node_id"] == "9"


def _accepted_by_owner(text: str) -> bool:
    try:
        Owner(user_id=text)
    except InvalidOwner:
        return False
    return True


def _accepted_as_group(text: str) -> bool:
    try:
        check_group_id(text)
    except ValueError:
        return False
    return True


def _whole(pattern: str) -> str:
    # The document's ^…$ (JSON Schema: the whole string); Python's $ would also match before a final newline.
    return pattern.removeprefix("^").removesuffix("$")


@given(st.one_of(st.from_regex(_whole(OWNER_ID_PATTERN), fullmatch=True), st.text(max_size=140)))
def test_the_documented_owner_id_pattern_is_the_contracts_rule(text: str) -> None:
    assert bool(re.fullmatch(_whole(OWNER_ID_PATTERN), text)) == _accepted_by_owner(text)


@given(st.one_of(st.from_regex(_whole(GROUP_ID_PATTERN), fullmatch=True), st.text(max_size=80)))
def test_the_documented_group_id_pattern_is_the_directors_rule(text: str) -> None:
    assert bool(re.fullmatch(_whole(GROUP_ID_PATTERN), text)) == _accepted_as_group(text)


def test_the_autoscaler_documents_the_same_owner_id_pattern() -> None:
    from warmswarm_autoscaling.api import OWNER_ID_PATTERN as AUTOSCALER_OWNER_ID_PATTERN

    assert AUTOSCALER_OWNER_ID_PATTERN == OWNER_ID_PATTERN
