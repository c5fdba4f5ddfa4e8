"""`make lint`'s test-tree rules (scripts/lint_tests.py) on a planted tree: each one refuses what it is for."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "lint_tests.py"
PLANNER = Path("services/autoscaling/src/warmswarm_autoscaling/plan")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)], capture_output=True, text=True, check=False
    )


def plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_clean_tree_passes_and_the_project_tree_passes(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            f"{PLANNER}/__init__.py": "",
            f"{PLANNER}/room.py": "",
            "tests/unit/test_plan_room.py": "from .factories import NOW\n",
            "tests/unit/factories.py": "NOW = 1\n",
        },
    )

    assert lint(tmp_path).returncode == 0
    project = lint(SCRIPT.parents[1])
    assert project.returncode == 0, project.stderr


def test_a_test_module_importing_another_is_refused_in_every_form(tmp_path: Path) -> None:
    plant(
        tmp_path,
        {
            "tests/unit/test_a.py": "from .test_b import helper\n",
            "tests/unit/test_b.py": "helper = 1\n",
            "tests/integration/test_c.py": "import tests.unit.test_b\n",
            "tests/e2e/test_d.py": "from . import test_b\n",
        },
    )

    found = lint(tmp_path)

    assert found.returncode == 1
    assert found.stderr.count("imports the test module") == 3
    for name in ("test_a.py:1", "test_c.py:1", "test_d.py:1"):
        assert name in found.stderr


def test_a_planner_module_without_its_test_file_is_refused(tmp_path: Path) -> None:
    plant(tmp_path, {f"{PLANNER}/__init__.py": "", f"{PLANNER}/slots.py": ""})

    found = lint(tmp_path)

    assert found.returncode == 1
    assert "plan/slots.py: has no test file tests/unit/test_plan_slots.py" in found.stderr
