"""The stack images' background preparation: started as a process group, joined with its output, stopped whole."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from warmswarm_demos.stack_images import (
    ImageBuildError,
    images_key,
    join_prepare,
    prepare_inputs,
    start_prepare,
    stop_prepare,
)

REPO = Path(__file__).resolve().parents[2]


def test_a_failed_preparation_fails_the_join_with_its_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARMSWARM_CACHE_DIR", str(tmp_path / "cache"))
    missing_repo = tmp_path / "no-such-checkout"
    process = start_prepare(missing_repo, tmp_path / "prepare")

    with pytest.raises(ImageBuildError) as failed:
        join_prepare(tmp_path / "prepare", timeout_s=120)

    assert "exit status 1" in str(failed.value)
    # The child's own traceback, naming what it could not read: the test shows why, not only that.
    assert "FileNotFoundError" in str(failed.value)
    assert str(missing_repo) in str(failed.value)
    stop_prepare(process)


def test_a_warm_cache_prepares_nothing_and_the_join_returns_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARMSWARM_CACHE_DIR", str(tmp_path / "cache"))
    images = tmp_path / "cache" / "stack-images"
    images.mkdir(parents=True)
    (images / f"images-{images_key(REPO)}.tar").write_bytes(b"")
    process = start_prepare(REPO, tmp_path / "prepare")

    output = join_prepare(tmp_path / "prepare", timeout_s=120)

    assert "nothing to prepare" in output
    assert "prepared in" in output
    stop_prepare(process)
    assert process.returncode == 0
    assert not any(path.name.startswith(("base-", "wheels-")) for path in images.iterdir())


def test_the_join_waits_for_the_build_lock_holder_and_stop_ends_the_whole_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARMSWARM_CACHE_DIR", str(tmp_path / "cache"))
    images = tmp_path / "cache" / "stack-images"
    images.mkdir(parents=True)
    # Another run building the same key holds the lock: the preparation waits, and so does its join.
    with (images / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        process = start_prepare(REPO, tmp_path / "prepare")
        with pytest.raises(ImageBuildError, match="did not end in 2 s"):
            join_prepare(tmp_path / "prepare", timeout_s=2, poll_s=0.1)

        stop_prepare(process)

    assert process.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.killpg(process.pid, 0)


def test_prepare_inputs_leaves_a_cached_key_alone(tmp_path: Path) -> None:
    (tmp_path / f"images-{images_key(REPO)}.tar").write_bytes(b"")

    prepared = prepare_inputs(REPO, cache=tmp_path)

    assert prepared.from_cache is True
    assert prepared.steps_s == {}


def test_the_wheels_are_asked_for_by_the_sources_third_party_requirements_once_each() -> None:
    from warmswarm_demos.stack_images import third_party_requirements

    requirements = third_party_requirements(REPO)

    # The project's own packages are built in the image; pip must not build them here only to throw them away.
    assert not [r for r in requirements if r.startswith("warmswarm")]
    names = [r.split(">")[0].split("=")[0] for r in requirements]
    assert len(names) == len(set(names))
    assert {"pydantic>=2", "fastapi", "aiobotocore", "redis", "httpx", "python-json-logger"} <= set(requirements)
