"""The stack's two images, built here with no registry: a Debian base from mmdebstrap, the Dockerfiles, cached.

No registry serves base images on these machines, and the sandbox's daemons have no route out, so:

1. base: `mmdebstrap` makes a minimal Debian root with Python 3.11 (what the official python:3.11-slim-bookworm
   is built from), imported with `docker import` (cached as a tar, keyed by the recipe);
2. wheels: `pip wheel` on this machine fetches every pinned dependency (the install step's registry), and a
   build image (the base + the wheels + PIP_NO_INDEX/PIP_FIND_LINKS) lets the Dockerfiles' `pip install` run
   with no network (cached as a folder, keyed by constraints.txt and the packages' pyproject.toml);
3. the services: `docker build` of the unchanged Dockerfiles with BASE_IMAGE and BUILD_IMAGE pointing at the
   two, then `docker save` of both into one tar keyed by everything that goes into them. A later run with the
   same key only `docker load`s it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# The base: what python:3.11-slim-bookworm has that the services use (Python 3.11 with venv and pip, useradd,
# CA certificates for AWS), no documentation. The essential variant leaves out apt itself.
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "passwd", "ca-certificates")
BASE_OPTIONS = (
    "--variant=essential",
    "--mode=root",
    "--format=tar",
    # bookworm's merged /usr set up by a hook, instead of the usrmerge package (and the perl it needs).
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
)
# Wheels pip needs in the image beyond what this machine's pip resolves: the packages' build backend
# (pyproject.toml: setuptools>=68), and what redis requires on bookworm's Python 3.11.2 only (below 3.11.3),
# which constraints.txt, frozen on a newer 3.11, does not list.
EXTRA_WHEELS = ("setuptools==80.9.0", "async-timeout==5.0.1")
# What the Dockerfiles copy into the image, besides constraints.txt (they say so at their top).
SOURCES = ("packages/models", "packages/runtime", "services/autoscaling", "services/director")
DOCKERFILES = {"autoscaling": "services/autoscaling/Dockerfile", "director": "services/director/Dockerfile"}
IMAGE_PREFIX = "warmswarm"
# Left out of the key as .dockerignore leaves them out of the context.
_IGNORED_PARTS = ("__pycache__", ".mypy_cache", ".pytest_cache")
_IGNORED_SUFFIXES = (".pyc", ".egg-info")
# A test session's background preparation: the folder of its log and exit status, for the stack's test to join.
PREPARE_DIR_ENV = "WARMSWARM_STACK_PREPARE_DIR"
PREPARE_LOG = "prepare.log"
PREPARE_STATUS = "prepare.rc"
PREPARE_TIMEOUT_S = 1800.0
_BUILD_DOCKERFILE = """\
FROM {base}
COPY wheels /wheels
# The Dockerfiles' pip install then takes every package from here and asks no index.
ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels
"""


class ImageBuildError(RuntimeError):
    """A step of the build failed; the message holds its command and output."""


@dataclass
class StackImages:
    """The images of one build, loaded into a daemon: the tag of each service, and what it took."""

    version: str  # the tag of both images (WARMSWARM_VERSION of the stack)
    tags: dict[str, str]  # service -> image reference
    from_cache: bool  # True: loaded from the cache tar, nothing was built
    steps_s: dict[str, float] = field(default_factory=dict)  # seconds each step took
    sizes_bytes: dict[str, int] = field(default_factory=dict)  # the image sizes the daemon reports


def cache_dir() -> Path:
    """WARMSWARM_CACHE_DIR, else ~/.cache/warmswarm: outside the checkout, so a fresh clone finds it too."""
    configured = os.environ.get("WARMSWARM_CACHE_DIR")
    root = Path(configured) if configured else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (root if configured else root / "warmswarm") / "stack-images"


def _digest(parts: Iterator[bytes]) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.hexdigest()


def base_key() -> str:
    return _digest(iter([BASE_SUITE.encode(), *(p.encode() for p in BASE_PACKAGES + BASE_OPTIONS)]))


def wheels_key(repo: Path) -> str:
    inputs = [repo / "constraints.txt", *(repo / source / "pyproject.toml" for source in SOURCES)]
    return _digest(
        iter([*(w.encode() for w in EXTRA_WHEELS), sys.version.split()[0].encode(), *(p.read_bytes() for p in inputs)])
    )


def _source_files(repo: Path) -> list[Path]:
    found = []
    for source in SOURCES:
        for path in sorted((repo / source).rglob("*")):
            relative = path.relative_to(repo)
            ignored = any(part in _IGNORED_PARTS or part.endswith(_IGNORED_SUFFIXES) for part in relative.parts)
            if path.is_file() and not ignored:
                found.append(relative)
    return found


def images_key(repo: Path) -> str:
    """Everything that goes into the two images: the base, the wheels, the Dockerfiles, the sources."""
    files = [Path(p) for p in (*DOCKERFILES.values(), ".dockerignore", "constraints.txt")] + _source_files(repo)

    def parts() -> Iterator[bytes]:
        yield base_key().encode()
        yield wheels_key(repo).encode()
        for relative in files:
            yield str(relative).encode()
            yield (repo / relative).read_bytes()

    return _digest(parts())


def ensure_images(
    docker_host: str, repo: Path, *, cache: Path | None = None, say: Callable[[str], None] = lambda _: None
) -> StackImages:
    """The two service images in the daemon at `docker_host`: loaded from the cache, or built there and cached."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = images_key(repo)
    version = f"sandbox-{key[:12]}"
    images = StackImages(version, {name: f"{IMAGE_PREFIX}/{name}:{version}" for name in DOCKERFILES}, True)
    docker = _Docker(docker_host)
    # Another test run may build the same key at the same time: one builds, the other then loads.
    with _locked(cache / ".lock"):
        saved = cache / f"images-{key}.tar"
        if not saved.exists():
            images.from_cache = False
            _build(docker, repo, cache, images, saved, say)
            _prune(cache, keep={saved.name, f"base-{base_key()}.tar", f"wheels-{wheels_key(repo)}"})
        else:
            say(f"loading the stack's images from {saved}")
            with _timed(images.steps_s, "load"):
                docker.run("load", "-q", "-i", str(saved))
    images.sizes_bytes = {
        name: int(docker.run("image", "inspect", "-f", "{{.Size}}", tag)) for name, tag in images.tags.items()
    }
    return images


def prepare_inputs(
    repo: Path, *, cache: Path | None = None, say: Callable[[str], None] = lambda _: None
) -> StackImages:
    """The build's inputs that need no daemon (the base tar, the wheels) in the cache, unless the images are there.

    A test session runs this in the background from its start (tests/conftest.py), so a fresh machine's
    mmdebstrap and pip overlap the other tests instead of adding to the stack's; `ensure_images` then finds them.
    """
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    key = images_key(repo)
    images = StackImages(f"sandbox-{key[:12]}", {}, True)
    with _locked(cache / ".lock"):
        if (cache / f"images-{key}.tar").exists():
            say("the stack's images are cached: nothing to prepare")
        else:
            images.from_cache = False
            _make_inputs(repo, cache, images, say)
    return images


def _make_inputs(repo: Path, cache: Path, images: StackImages, say: Callable[[str], None]) -> tuple[Path, Path]:
    base_tar = cache / f"base-{base_key()}.tar"
    wheels = cache / f"wheels-{wheels_key(repo)}"
    # The base and the wheels come from two registries and need nothing of each other: made side by side.
    with ThreadPoolExecutor(max_workers=2) as pool:
        made = [pool.submit(_make_base, base_tar, images, say), pool.submit(_make_wheels, repo, wheels, images, say)]
        for future in made:
            future.result()
    return base_tar, wheels


def _build(
    docker: _Docker, repo: Path, cache: Path, images: StackImages, saved: Path, say: Callable[[str], None]
) -> None:
    base_tar, wheels = _make_inputs(repo, cache, images, say)
    base = f"{IMAGE_PREFIX}/base:{base_key()[:12]}"
    with _timed(images.steps_s, "import"):
        docker.run("import", str(base_tar), base)
    build = f"{IMAGE_PREFIX}/build:{images.version}"
    with tempfile.TemporaryDirectory(prefix="wsbx-build-") as context, _timed(images.steps_s, "build"):
        shutil.copytree(wheels, Path(context) / "wheels")
        (Path(context) / "Dockerfile").write_text(_BUILD_DOCKERFILE.format(base=base))
        docker.build(context, build)
        say(f"building {' and '.join(images.tags.values())}")
        args = ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"BUILD_IMAGE={build}"]
        # Both at once: each is mostly one pip install, and the daemon builds them side by side.
        with ThreadPoolExecutor(max_workers=len(DOCKERFILES)) as pool:
            builds = [
                pool.submit(docker.build, str(repo), images.tags[name], "-f", str(repo / dockerfile), *args)
                for name, dockerfile in DOCKERFILES.items()
            ]
            for future in builds:
                future.result()
    with _timed(images.steps_s, "save"):
        _atomic(saved, lambda tmp: docker.run("save", "-o", str(tmp), *images.tags.values()))
    docker.run("rmi", build)


def _make_base(base_tar: Path, images: StackImages, say: Callable[[str], None]) -> None:
    if base_tar.exists():
        return
    say(f"making a Debian {BASE_SUITE} root with Python 3.11 (mmdebstrap)")
    command = ["mmdebstrap", *BASE_OPTIONS, f"--include={','.join(BASE_PACKAGES)}", BASE_SUITE]
    with _timed(images.steps_s, "base"):
        _atomic(base_tar, lambda tmp: _run([*command, str(tmp)]))


def _make_wheels(repo: Path, wheels: Path, images: StackImages, say: Callable[[str], None]) -> None:
    if wheels.exists():
        return
    say("fetching the pinned dependencies as wheels (pip wheel)")
    with _timed(images.steps_s, "wheels"):
        _atomic(wheels, lambda tmp: _fetch_wheels(repo, tmp))


def _fetch_wheels(repo: Path, into: Path) -> None:
    into.mkdir()
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "-w", str(into)]
    command += ["-c", str(repo / "constraints.txt"), *EXTRA_WHEELS, *third_party_requirements(repo)]
    _run(command)


def third_party_requirements(repo: Path) -> list[str]:
    """What the sources' pyproject.toml require, less the project's own packages (built in the image from their
    sources): pip then only fetches wheels, where naming the sources made it build each of them in an isolated
    environment of its own (a minute of CPU on a loaded machine) for wheels that were thrown away."""
    projects = [tomllib.loads((repo / source / "pyproject.toml").read_text())["project"] for source in SOURCES]
    taken = {_canonical(project["name"]) for project in projects}
    found: list[str] = []
    for project in projects:
        for requirement in project.get("dependencies", []):
            name = _canonical(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])
            if name not in taken:
                taken.add(name)
                found.append(requirement)
    return found


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class _Docker:
    def __init__(self, docker_host: str) -> None:
        cli = shutil.which("docker")
        if cli is None:
            raise ImageBuildError("the docker command is not installed (apt-get install docker.io)")
        self._cli = cli
        # The legacy builder: it runs in the daemon and needs no buildx plugin; it never pulls an image it has.
        self._env = {**os.environ, "DOCKER_HOST": docker_host, "DOCKER_BUILDKIT": "0", "DOCKER_CLI_HINTS": "false"}

    def run(self, *args: str) -> str:
        return _run([self._cli, *args], env=self._env).strip()

    def build(self, context: str, tag: str, *args: str) -> None:
        # No network: everything comes from the images and the context.
        self.run("build", "-q", "--network", "none", "-t", tag, *args, context)


def _run(command: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
        raise ImageBuildError(f"{' '.join(command[:4])} … failed ({done.returncode}):\n{tail}")
    return done.stdout


def _atomic(target: Path, make: Callable[[Path], object]) -> None:
    """Make `target` under a temporary name and rename it: a half-made file or folder is never taken for done."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    _remove(tmp)
    try:
        make(tmp)
        tmp.rename(target)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _prune(cache: Path, keep: set[str]) -> None:
    """Only the current key's files stay: each build would otherwise leave a few hundred MB behind."""
    for entry in cache.iterdir():
        if entry.name.startswith(("images-", "base-", "wheels-")) and entry.name not in keep:
            _remove(entry)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _timed(steps: dict[str, float], name: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        steps[name] = steps.get(name, 0.0) + time.monotonic() - started


def start_prepare(repo: Path, into: Path) -> subprocess.Popen[bytes]:
    """`prepare_inputs` in a process group of its own: its output goes to `into`/prepare.log, and its exit status to
    prepare.rc once it ends, written by the shell around it (a Python that is killed still leaves a status)."""
    into.mkdir(parents=True, exist_ok=True)
    # Niced: it mostly waits on the two registries, and the tests it runs beside keep the CPU they time against.
    run = 'nice -n 10 "$0" -m warmswarm_demos.stack_images prepare "$1" >"$2" 2>&1'
    script = f'{run}; echo $? >"$3.tmp"; mv "$3.tmp" "$3"'
    paths = [str(repo), str(into / PREPARE_LOG), str(into / PREPARE_STATUS)]
    return subprocess.Popen(
        ["sh", "-c", script, sys.executable, *paths], stdin=subprocess.DEVNULL, start_new_session=True
    )


def join_prepare(into: Path, *, timeout_s: float = PREPARE_TIMEOUT_S, poll_s: float = 0.5) -> str:
    """Wait for the background preparation in `into` to end: its output, or ImageBuildError carrying it."""
    status, log = into / PREPARE_STATUS, into / PREPARE_LOG
    deadline = time.monotonic() + timeout_s
    while not status.exists():
        if time.monotonic() > deadline:
            raise ImageBuildError(
                f"the background preparation did not end in {timeout_s:.0f} s; its output:\n{_text(log)}"
            )
        time.sleep(poll_s)
    code = status.read_text().strip()
    if code != "0":
        raise ImageBuildError(f"the background preparation failed (exit status {code}); its output:\n{_text(log)}")
    return _text(log)


def stop_prepare(process: subprocess.Popen[bytes], *, grace_s: float = 10.0) -> None:
    """End a preparation still running when the session ends (the stack's test did not run): its whole group, the
    Python under the shell and its mmdebstrap and pip included, and return once none of them is left."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    process.wait()
    deadline = time.monotonic() + grace_s
    while _group_alive(process.pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else f"({path} is missing)"


def _say_line(line: str) -> None:
    # One write per line: the base and the wheels report from two threads.
    sys.stdout.write(f"{line}\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the stack images' inputs that need no daemon, into the cache")
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("repo", type=Path)
    args = parser.parse_args(argv)
    # Ended by stop_prepare: unwind, so the half-made file under its temporary name is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    images = prepare_inputs(args.repo, say=_say_line)
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in images.steps_s.items()) or "nothing to make"
    print(f"prepared in {time.monotonic() - started:.1f} s ({steps})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
