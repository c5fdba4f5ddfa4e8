"""The Dockerfiles as text: their base (the official image unless told otherwise), user, install, entry point.

tests/e2e/test_stack_e2e.py builds and runs them (on a Debian base made here, as no registry is reachable).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .stack_files import DOCKERFILES, ROOT, compose


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def build_args(steps: list[tuple[str, str]]) -> dict[str, str]:
    """The ARGs before the first FROM (the ones FROM may use), with their defaults."""
    found = {}
    for keyword, args in steps:
        if keyword == "FROM":
            break
        if keyword == "ARG":
            name, _, default = args.partition("=")
            found[name] = default
    return found


@pytest.mark.parametrize("service", sorted(DOCKERFILES))
def test_the_dockerfile_runs_the_service_from_a_slim_python_3_11_as_a_non_root_user(service: str) -> None:
    path, module, source = DOCKERFILES[service]
    steps = instructions(path)
    # The official image unless told otherwise; the build stage on the same base unless told otherwise.
    args = build_args(steps)
    assert re.fullmatch(r"python:3\.11-slim(-[a-z]+)?", args["BASE_IMAGE"]), args
    assert args["BUILD_IMAGE"] == "${BASE_IMAGE}"
    bases = [args.split()[0] for keyword, args in steps if keyword == "FROM"]
    assert bases == ["${BUILD_IMAGE}", "${BASE_IMAGE}"]
    final = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    users = [args for keyword, args in final if keyword == "USER"]
    assert users, "the final stage must set USER"
    assert users[-1].split(":")[0] not in ("root", "0"), users[-1]
    copied = " ".join(args for keyword, args in steps if keyword == "COPY")
    assert "packages/models" in copied
    assert source in copied
    installs = " ".join(args for keyword, args in steps if keyword == "RUN" and "pip install" in args)
    # python3: a Debian base has no `python`; the official image has both.
    assert installs.startswith("python3 -m venv /opt/warmswarm")
    assert "./packages/models" in installs
    assert f"./{source}" in installs
    assert "-c constraints.txt" in installs, "install the pinned versions"
    entry = [args for keyword, args in final if keyword in ("ENTRYPOINT", "CMD")]
    assert json.loads(entry[-1]) == ["python", "-m", module]
    health = [args for keyword, args in final if keyword == "HEALTHCHECK"]
    assert health
    assert "/health" in health[-1]


def test_the_compose_file_builds_with_these_dockerfiles_and_runs_their_user() -> None:
    services = compose()["services"]
    for service, (path, _, _) in DOCKERFILES.items():
        assert (ROOT / services[service]["build"]["dockerfile"]) == path
        image_user = next(args for keyword, args in reversed(instructions(path)) if keyword == "USER")
        assert services[service]["user"].split(":")[0] == image_user.split(":")[0]


def test_dockerignore_keeps_secrets_and_local_state_out_of_the_build_context() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".git", ".venv", ".sandbox"} <= ignored
