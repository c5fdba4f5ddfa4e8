"""A reader's walk through plan(): the planner files met reading plan() and, depth first, each planner function it
calls (each read once), coming back to the caller after each; counts distinct files and returns to a file left.

Run: `.venv/bin/python scripts/plan_walk_static.py [PLAN_DIR]` (default: the planner of this checkout). Any commit's
planner can be read the same way (`git archive REV services/autoscaling/src/warmswarm_autoscaling/plan | tar -x -C
DIR`), which makes two commits comparable: the dynamic walk (plan_walk.py) needs a world that older commits lack.
Calls are resolved statically: a name defined in the module or imported from another planner module, and
`Class.method` on a planner class. A method called on a value (`cluster.machine_room(...)`) is not followed: it is
the value's own small rule, read where the value is defined.
"""

from __future__ import annotations

import ast
import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLANNER = ROOT / "services/autoscaling/src/warmswarm_autoscaling/plan"
PACKAGE = "warmswarm_autoscaling.plan"


@dataclass
class Module:
    name: str
    functions: dict[str, ast.FunctionDef] = field(default_factory=dict)  # qualname -> def (Class.method too)
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)  # local name -> (module, name)


def load(plan_dir: Path) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for path in sorted(plan_dir.glob("*.py")):
        name = path.stem
        module = Module(name)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                module.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        module.functions[f"{node.name}.{item.name}"] = item
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
                source = (node.module or "").removeprefix(PACKAGE + ".")
                for alias in node.names:
                    module.imported[alias.asname or alias.name] = (source, alias.name)
        modules[name] = module
    return modules


def calls_in_order(function: ast.FunctionDef) -> list[ast.Call]:
    found = [n for n in ast.walk(function) if isinstance(n, ast.Call)]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def resolve(call: ast.Call, module: Module, modules: dict[str, Module]) -> tuple[str, str] | None:
    func = call.func
    if isinstance(func, ast.Name):
        if func.id in module.functions:
            return module.name, func.id
        if func.id in module.imported:
            return module.imported[func.id]
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = func.value.id
        where, cls = module.imported.get(owner, (module.name, owner))
        if where in modules and f"{cls}.{func.attr}" in modules[where].functions:
            return where, f"{cls}.{func.attr}"
    return None


def walk(plan_dir: Path) -> list[str]:
    modules = load(plan_dir)
    steps: list[str] = []
    seen: set[tuple[str, str]] = set()

    def read(where: str, qualname: str) -> None:
        seen.add((where, qualname))
        steps.append(where)
        for call in calls_in_order(modules[where].functions[qualname]):
            target = resolve(call, modules[where], modules)
            if target is None or target in seen or target[0] not in modules:
                continue
            if target[1] not in modules[target[0]].functions:
                continue
            read(*target)
            steps.append(where)  # back to reading the caller

    read("__init__", "plan")
    return [step for step, _ in itertools.groupby(steps)]


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    steps = walk(Path(args[0]) if args else PLANNER)
    left: set[str] = set()
    returns = 0
    for before, step in itertools.pairwise(steps):
        left.add(before)
        returns += step in left
    if "-v" in sys.argv:
        print(" -> ".join(steps))
    print(f"files: {len(set(steps))}  returns: {returns}  steps: {len(steps)}")


if __name__ == "__main__":
    main()
