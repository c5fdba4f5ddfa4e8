"""The metric series are a contract (dashboards and alerts name them): families, types, help texts, label names.

metrics_contract.json was written from the hand-made exposition before /metrics moved to prometheus-client;
this test holds every later version of /metrics to it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .metrics_scrape import metrics_after_a_cycle, parse

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
    body = await metrics_after_a_cycle()

    assert contract_of(body) == json.loads(CONTRACT.read_text())
