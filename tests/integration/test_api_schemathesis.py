"""Schemathesis against both services as processes (uvicorn on loopback, the sandbox's Redis, swarm and EC2): every
phase, the stateful one included, and every default check; no server error, no answer the documents do not describe.

tests/unit/test_openapi_conformance.py runs the same over in-memory fakes; this run reaches what they cannot: the
records as Redis really keeps them (a reservation main stored, then could not answer), Docker's answers, the
autoscaler's real plan. Which checks allow a 422 for a schema-valid request, and why, is in RefusedOnPurpose below
and in docs/operations.md (reservations).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiodocker
import pytest
import redis
import schemathesis
from schemathesis import Case
from schemathesis.engine import Status, from_schema
from schemathesis.engine.events import FatalError, NonFatalError, ScenarioFinished
from schemathesis.hooks import HookContext
from warmswarm_director.placement import MANAGED_BY_LABEL
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import new_api_token, new_ops_token, start_autoscaler, start_director

# Bounded and deterministic: the same cases every run (a fixed seed, derandomized), well under a minute for both.
MAX_EXAMPLES = 8
SEED = 20261206
CLUSTER = f"st-{uuid.uuid4().hex[:6]}"
GROUP_KEYS = "warmswarm:group:*"


@dataclass(frozen=True)
class Services:
    autoscaler_url: str
    director_url: str
    ops_token: str
    api_token: str


@dataclass
class Outcome:
    cases: int = 0
    by_phase: Counter[str] = field(default_factory=Counter)  # cases sent in each phase
    statuses: Counter[int] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def holdable_now(_context: HookContext, case: Case[Any]) -> Case[Any]:
    """Every other schema-valid reservation (by its sessions' parity) moved to what the autoscaler holds now: a day
    ahead, a size an allowed type fits. Neither bound can be in a document (the clock's, what EC2 offers), and a
    generator that draws `at` from 1970-3000 lands in the year ahead about once in a thousand: without this, no
    reservation is ever stored and the stateful phase never lists or deletes one. The other half stays as drawn
    (422 naming the field). Only positive cases: a negative one stays as invalid as it was drawn."""
    body = case.body
    sessions = body.get("sessions") if isinstance(body, dict) else None
    if (
        case.meta is not None
        and case.meta.generation.mode.is_positive
        and isinstance(body, dict)
        and isinstance(sessions, int)
        and sessions % 2 == 0
    ):
        case.body = {**body, "at": time.time() + 86_400, "resources": {"cpus": 0.5, "memory_bytes": 2**28}}
    return case


def run(url: str, headers: dict[str, str], operations: list[dict[str, Any]], *, reservations: bool = False) -> Outcome:
    """Every default check of schemathesis over every operation and phase (examples, coverage, fuzzing, stateful)."""
    settings: dict[str, Any] = {
        "seed": SEED,
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
        "headers": headers,
        "workers": 1,
        "cache": {"enabled": False},
        "request-timeout": 30,
        "operations": operations,
    }
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json", config=schemathesis.Config.from_dict(settings))
    if reservations:  # scoped to this schema: the hook never reaches another run in this process
        map_case: Any = schema.hook("map_case")  # typed as a bare Callable; its filters are attributes
        map_case.apply_to(method="POST", path="/v1/reservations")(holdable_now)
    outcome = Outcome()
    for event in from_schema(schema).execute():
        if isinstance(event, ScenarioFinished):
            outcome.cases += len(event.recorder.cases)
            outcome.by_phase[str(event.phase)] += len(event.recorder.cases)
            for interaction in event.recorder.interactions.values():
                if interaction.response is not None:
                    outcome.statuses[interaction.response.status_code] += 1
            for case_id, checks in event.recorder.checks.items():
                for check in checks:
                    if check.status == Status.FAILURE:
                        outcome.failures[check.name] += 1
                        answer = event.recorder.interactions.get(case_id)
                        said = answer.response.content[:300] if answer and answer.response else b""
                        outcome.examples.append(
                            f"{event.recorder.label}: {check.name}: {check.failure_info}; answered {said!r}"
                        )
        elif isinstance(event, FatalError | NonFatalError):
            outcome.errors.append(repr(event))
    return outcome


def assert_clean(name: str, outcome: Outcome) -> None:
    print(
        f"{name}: {outcome.cases} cases {dict(outcome.by_phase)}, statuses {dict(outcome.statuses)},"
        f" failures {dict(outcome.failures)}"
    )
    assert not outcome.errors
    assert outcome.cases >= 100, "schemathesis hardly generated anything"
    assert outcome.by_phase["stateful"] > 0, "the stateful phase sent nothing: no links between the operations?"
    assert not outcome.failures, "\n".join(outcome.examples[:10])
    assert not [status for status in outcome.statuses if status >= 500]


def accepting(name_regex: str, statuses: list[str], **more: Any) -> dict[str, Any]:
    """positive_data_acceptance for the operations named ("POST /v1/reservations"): which statuses a schema-valid
    request may get there. One filter: schemathesis takes the union of two (include-method, include-path would
    loosen the check for every POST)."""
    return {
        "include-name-regex": name_regex,
        "checks": {"positive_data_acceptance": {"expected-statuses": statuses}},
        **more,
    }


@pytest.fixture(scope="module")
def services(sandbox: Sandbox) -> Iterator[Services]:
    """An autoscaler (a dry run: whatever the run asks for, no machine is launched) and a director on it."""
    ops_token, api_token = new_ops_token(), new_api_token()
    autoscaler_url = start_autoscaler(
        sandbox,
        name="autoscaling-schemathesis",
        settings={"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_DRY_RUN": "true", "AUTOSCALING_MAX_INSTANCES": "4"},
        ops_token=ops_token,
    )
    groups = redis.Redis.from_url(sandbox.endpoints.redis_url)
    groups_before = set(groups.scan_iter(GROUP_KEYS))
    services_before = asyncio.run(director_services(sandbox.endpoints.docker_host))
    try:
        director = start_director(
            sandbox,
            name="director-schemathesis",
            autoscaling_url=autoscaler_url,
            ops_token=ops_token,
            api_token=api_token,
        )
        yield Services(autoscaler_url, director.url, ops_token, api_token)
    finally:
        sandbox.kill("director-schemathesis")
        sandbox.kill("autoscaling-schemathesis")
        # The run's services would be pending work for the next module's autoscaler: none is left behind.
        made = asyncio.run(director_services(sandbox.endpoints.docker_host)) - services_before
        asyncio.run(remove_services(sandbox.endpoints.docker_host, made))
        made_groups = set(groups.scan_iter(GROUP_KEYS)) - groups_before
        if made_groups:
            groups.delete(*made_groups)
        groups.close()


async def director_services(docker_host: str) -> set[str]:
    async with aiodocker.Docker(url=docker_host) as docker:
        listed = await docker.services.list(filters={"label": MANAGED_BY_LABEL})
    return {str(service["ID"]) for service in listed}


async def remove_services(docker_host: str, service_ids: set[str]) -> None:
    async with aiodocker.Docker(url=docker_host) as docker:
        for service_id in service_ids:
            try:
                await docker.services.delete(service_id)
            except aiodocker.DockerError as error:
                if error.status != 404:
                    raise


def test_the_autoscaler_answers_no_server_error_and_only_what_its_document_says(services: Services) -> None:
    # RefusedOnPurpose: a reservation the served document calls valid may still be refused, 422 naming the field, for
    # what no document can say: its moment is not ahead or more than a year ahead (bounds that move with the clock),
    # or no allowed instance type fits its size (what EC2 offers). Its zone and sessions are in the document.
    refusable = [accepting("^POST /v1/reservations$", ["2xx", "401", "403", "422"])]
    ops = {"Authorization": f"Bearer {services.ops_token}"}
    outcome = run(services.autoscaler_url, ops, refusable, reservations=True)
    assert_clean("autoscaler", outcome)
    assert outcome.statuses[201] > 0, "no reservation was ever stored: the stateful phase listed and deleted none"


def test_the_director_answers_no_server_error_and_only_what_its_document_says(services: Services) -> None:
    ops = {"Authorization": f"Bearer {services.ops_token}"}
    operations = [
        # Ops' token where only ops may call. RefusedOnPurpose: a valid If-Match may name a version that is not the
        # stored one (412), which no schema can foresee.
        accepting("^(PUT|PATCH) /v1/groups/", ["2xx", "401", "403", "404", "409", "412"], headers=ops)
    ]
    outcome = run(services.director_url, {"Authorization": f"Bearer {services.api_token}"}, operations)
    assert_clean("director", outcome)
