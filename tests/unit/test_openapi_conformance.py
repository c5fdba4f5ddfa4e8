"""Schemathesis against both apps, in process on in-memory fakes: no server error, and no answer their OpenAPI
documents do not describe (status codes, bodies, headers, ids they refuse or take against their patterns)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import schemathesis
from fastapi import FastAPI
from pydantic import SecretStr
from schemathesis.engine import Status, from_schema
from schemathesis.engine.events import FatalError, NonFatalError, ScenarioFinished
from warmswarm_autoscaling.api import create_app as autoscaling_app
from warmswarm_director.main import build_app
from warmswarm_director.settings import DirectorSettings
from warmswarm_models import GroupProperties

from .director_fakes import FakeAutoscaler, FakeGroups, FakeSwarm
from .factories import ALICE, NOW, instance, node_of, volume
from .fakes import FakeEc2, autoscaler
from .fakes import FakeSwarm as FakeAutoscalerSwarm

OPS_TOKEN = "ops-token-of-the-conformance-run"
API_TOKEN = "api-token-of-the-conformance-run"
# Bounded and deterministic: the same cases every run, a few seconds for both apps.
MAX_EXAMPLES = 20
SEED = 20261201


@dataclass
class Outcome:
    cases: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def run(app: FastAPI, headers: dict[str, str], operations: list[dict[str, Any]] | None = None) -> Outcome:
    """Every default check of schemathesis, over every operation and phase (examples, coverage, fuzzing, stateful)."""
    settings: dict[str, Any] = {
        "seed": SEED,
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
        "headers": headers,
        "workers": 1,
        "cache": {"enabled": False},
    }
    if operations:
        settings["operations"] = operations
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=schemathesis.Config.from_dict(settings))
    outcome = Outcome()
    for event in from_schema(schema).execute():
        if isinstance(event, ScenarioFinished):
            outcome.cases += len(event.recorder.cases)
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.status == Status.FAILURE:
                        outcome.failures[check.name] += 1
                        outcome.examples.append(f"{event.recorder.label}: {check.name}: {check.failure_info}")
        elif isinstance(event, FatalError | NonFatalError):
            outcome.errors.append(repr(event))
    return outcome


def test_the_director_answers_only_what_its_document_says() -> None:
    # Every group the platform names has properties, so a request the document calls valid can succeed.
    groups = FakeGroups(every_group=GroupProperties(ebs_cache_enabled=True))
    settings = DirectorSettings(ops_token=SecretStr(OPS_TOKEN), api_token=SecretStr(API_TOKEN))
    app = build_app(settings, swarm=FakeSwarm(), groups=groups, autoscaler=FakeAutoscaler())
    # The platform's token, but ops' where only ops may call.
    # A valid If-Match may name a version that is not the stored one: 412, which no schema can foresee.
    # One filter per entry: schemathesis takes the union of two (include-method and include-path-regex named every PUT
    # and every /v1/groups/ path).
    ops_only = [
        {
            "include-name-regex": "^(PUT|PATCH) /v1/groups/",
            "headers": {"Authorization": f"Bearer {OPS_TOKEN}"},
            "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "409", "412", "5xx"]}},
        }
    ]
    outcome = run(app, {"Authorization": f"Bearer {API_TOKEN}"}, ops_only)
    print(f"director: {outcome.cases} cases, failures {dict(outcome.failures)}")
    assert not outcome.errors
    assert outcome.cases >= 200, "schemathesis hardly generated anything"
    assert not outcome.failures, "\n".join(outcome.examples[:10])


async def test_the_autoscaler_answers_only_what_its_document_says() -> None:
    # A leader after a cycle (ready, volumes observed): a 503 of a replica that cannot answer yet is documented,
    # but schemathesis counts every 5xx as a server error.
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    scaler = autoscaler(
        FakeAutoscalerSwarm(nodes=[node_of(idle)]), FakeEc2(instances=[idle], volumes=[volume("vol-1")])
    )
    await scaler.cycle()
    app = autoscaling_app(scaler, ready_within_s=60.0, clock=lambda: NOW, ops_token=OPS_TOKEN)
    # A reservation the document calls valid may still be refused, 422, for what no schema can say: its moment is not
    # ahead or more than a year ahead, no allowed type fits its size. Its zone and sessions are in the document.
    refusable = [
        {
            "include-name": "POST /v1/reservations",
            "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "401", "403", "422", "5xx"]}},
        }
    ]
    outcome = run(app, {"Authorization": f"Bearer {OPS_TOKEN}"}, refusable)
    print(f"autoscaler: {outcome.cases} cases, failures {dict(outcome.failures)}")
    assert not outcome.errors
    assert outcome.cases >= 200, "schemathesis hardly generated anything"
    assert not outcome.failures, "\n".join(outcome.examples[:10])
