"""docs/grafana-dashboard.json: importable as is, and every query names series the autoscaler or director exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .metrics_scrape import director_metrics_after_a_session, metrics_after_a_cycle, parse

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# PromQL words that are not metric names: operators and modifiers (functions are told by the "(" after them).
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_IDENTIFIER = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?")
_MATCHER = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*")


def exported() -> dict[str, set[str]]:
    """Sample name -> its label names, from the real expositions of an autoscaler after a cycle and of a director
    after a session ran."""
    import asyncio

    series: dict[str, set[str]] = {}
    director_text, _ = asyncio.run(director_metrics_after_a_session())
    for name, labels in [*parse(asyncio.run(metrics_after_a_cycle())).samples, *parse(director_text).samples]:
        series.setdefault(name, set()).update(key for key, _ in labels)
    return series


def names_in(expr: str) -> tuple[set[str], dict[str, set[str]]]:
    """The metric names a PromQL expression reads, and the label names it matches on each."""
    text = _STRINGS.sub('""', expr)
    matched: dict[str, set[str]] = {}
    for metric, matchers in _SELECTOR.findall(text):
        labels = {m.group(1) for part in matchers.split(",") if (m := _MATCHER.match(part))}
        matched.setdefault(metric, set()).update(labels)
    bare = _GROUPING.sub(" ", _SELECTOR.sub(lambda m: m.group(1), text))
    bare = re.sub(r"\[[^\]]*\]", " ", bare)  # range selectors: [5m]
    metrics = {name for name, call in _IDENTIFIER.findall(bare) if not call and name not in _KEYWORDS}
    return metrics, matched


def panels() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(DASHBOARD.read_text())["panels"]
    return found


def test_the_parser_finds_names_and_matched_labels() -> None:
    metrics, labels = names_in('sum by (code) (rate(x_total{code!="ok", op=~"a|b"}[5m])) / on (instance) y == 1')
    assert metrics == {"x_total", "y"}
    assert labels == {"x_total": {"code", "op"}}


def test_the_dashboard_is_importable_as_is() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"]
    assert dashboard["uid"]
    assert dashboard["schemaVersion"] >= 36
    # Import asks for the Prometheus data source once and fills it in everywhere.
    (source,) = dashboard["__inputs"]
    assert (source["type"], source["pluginId"]) == ("datasource", "prometheus")
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    for panel in panels():
        assert panel["type"] in {"timeseries", "stat"}
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["datasource"] == {"type": "prometheus", "uid": f"${{{source['name']}}}"}
        assert panel["targets"], panel["title"]
        assert panel["description"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_every_query_names_series_the_services_export_with_their_labels() -> None:
    series = exported()
    read: set[str] = set()
    for panel in panels():
        for target in panel["targets"]:
            metrics, labels = names_in(target["expr"])
            assert metrics, f"{panel['title']}: {target['expr']} reads no series"
            unknown = sorted(metrics - set(series))
            assert not unknown, f"{panel['title']}: {unknown} are not exported (see both metrics.py)"
            for metric, names in labels.items():
                assert names <= series[metric], (
                    f"{panel['title']}: {metric} has no label {sorted(names - series[metric])}"
                )
            read |= metrics
    # And the other way round: every family the service exports has a panel.
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in series}
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in read}
    assert families <= shown, f"no panel shows {sorted(families - shown)}"
