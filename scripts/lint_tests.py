"""`make lint`'s rules for the test tree: no test module imports another, and every planner module has its test file."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from pathlib import Path

PLANNER = Path("services/autoscaling/src/warmswarm_autoscaling/plan")
UNIT_TESTS = Path("tests/unit")


def imported_test_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of each import in `path` that names a test module (test_*), relative or absolute."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + ([alias.name for alias in node.names] if not node.module else [])
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if any(part.startswith("test_") for part in name.split(".")):
                yield node.lineno, name


def problems(root: Path) -> list[str]:
    found = []
    # A test module imported by another runs its tests' module-level code twice and ties two files' fixtures
    # together: what both need belongs in a helper module (or conftest.py), named for what it holds.
    for path in sorted((root / "tests").rglob("test_*.py")):
        for line, module in imported_test_modules(path):
            found.append(
                f"{path.relative_to(root)}:{line}: imports the test module {module}; move what it shares"
                " to a helper module"
            )
    for module in sorted((root / PLANNER).glob("*.py")):
        if module.name == "__init__.py":
            continue
        expected = UNIT_TESTS / f"test_plan_{module.stem}.py"
        if not (root / expected).exists():
            found.append(f"{PLANNER / module.name}: has no test file {expected}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, default=Path("."))
    found = problems(parser.parse_args().root)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
