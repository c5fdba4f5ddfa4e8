"""The metric series are a contract (dashboards and alerts name them): families, types, help texts, label names.

metrics_contract.json was written from the hand-made exposition before /metrics moved to prometheus-client;
this test holds every later version of /metrics to it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
from warmswarm_autoscaling.api import create_app
from warmswarm_models import Owner

from .factories import ALICE, NOW, foreign_node, instance, node_of, pending_task, volume
from .fakes import FakeEc2, FakeSwarm, autoscaler
from .test_autoscaling_metrics import parse

CONTRACT = Path(__file__).with_name("metrics_contract.json")


def contract_of(text: str) -> dict[str, Any]:
    """Each family's type, help text and series (sample name and label names) in an exposition."""
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.M))
    parsed = parse(text)
    found: dict[str, Any] = {}
    for name, kind in parsed.types.items():
        series = sorted(
            {
                (sample, tuple(sorted(key for key, _ in labels)))
                for sample, labels in parsed.samples
                if sample == name or (kind == "histogram" and sample.startswith(name + "_"))
            }
        )
        found[name] = {
            "type": kind,
            "help": helps[name],
            "series": [f"{sample}{{{','.join(keys)}}}" for sample, keys in series],
        }
    return found


async def test_metrics_keep_their_names_types_help_and_labels() -> None:
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    swarm = FakeSwarm(
        nodes=[foreign_node("mgr", role="manager"), node_of(idle)],
        tasks=[pending_task("t-carol", Owner(user_id="carol"))],
    )
    scaler = autoscaler(swarm, FakeEc2(instances=[idle], volumes=[volume("vol-1")]))
    await scaler.cycle()
    app = create_app(scaler, ready_within_s=60.0, clock=lambda: NOW, ops_token=None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://autoscaler") as http:
        body = (await http.get("/metrics")).text

    assert contract_of(body) == json.loads(CONTRACT.read_text())
