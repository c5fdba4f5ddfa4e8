"""docs/prometheus-rules.yml: promtool accepts it, its unit tests pass, and every alert is tested both ways."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus-rules.yml"
RULES_TEST = ROOT / "tests" / "prometheus" / "rules-test.yml"


def promtool(*args: str) -> None:
    # scripts/install-system-deps.sh installs it (Debian's prometheus package): missing is a failure, not a skip.
    tool = shutil.which("promtool")
    assert tool, "promtool is not installed: run scripts/install-system-deps.sh"
    done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, f"promtool {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"


def alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert [g["name"] for g in groups] == ["warmswarm"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_checks_the_rules() -> None:
    promtool("check", "rules", str(RULES))


def test_promtool_runs_the_rules_unit_tests() -> None:
    promtool("test", "rules", str(RULES_TEST))


def test_every_alert_says_how_long_how_bad_and_what_to_do() -> None:
    found = alerts()
    assert found
    for rule in found:
        assert rule.get("for"), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert len(rule["annotations"]["description"]) > 80, f"{rule['alert']}: say what to do"


def test_every_alert_has_a_case_that_fires_and_one_that_does_not() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())
    assert tests["rule_files"] == ["../../docs/prometheus-rules.yml"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert len(names) == len(alerts()), "an alert name twice"
    assert not names - fires, f"no firing case for {sorted(names - fires)}"
    assert not names - quiet, f"no case where it stays quiet for {sorted(names - quiet)}"
    assert not (fires | quiet) - names, f"cases of alerts that do not exist: {sorted((fires | quiet) - names)}"
