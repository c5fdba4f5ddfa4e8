"""Background processes the sandbox starts: spawn them detached, record who they are, stop them by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

# What a boot script or a daemon finds on a plain Linux machine; the caller's PATH (a venv, pyenv
# shims) is no business of a "machine".
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ProcRecord:
    """A process we started. The start time (clock ticks since boot) tells it apart from a later
    process that happens to get the same pid, so we never signal a stranger."""

    pid: int
    start_ticks: int

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ProcRecord:
        data = json.loads(text)
        return cls(pid=int(data["pid"]), start_ticks=int(data["start_ticks"]))


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def start_ticks_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    # Field 22 of /proc/PID/stat is `starttime`; fields[0] here is field 3.
    return None if fields is None else int(fields[19])


def is_alive(record: ProcRecord) -> bool:
    fields = _stat_fields(record.pid)
    if fields is None:
        return False
    state = fields[0]
    return state not in ("Z", "X") and int(fields[19]) == record.start_ticks


def record_of(pid: int) -> ProcRecord:
    ticks = start_ticks_of(pid)
    if ticks is None:
        raise ProcessLookupError(f"process {pid} exited right after it was started")
    return ProcRecord(pid=pid, start_ticks=ticks)


def spawn_detached(argv: Sequence[str], *, env: Mapping[str, str], log_path: Path) -> ProcRecord:
    """Start argv in its own session (so it outlives the caller and a terminal's Ctrl-C), with
    stdout and stderr appended to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    return record_of(proc.pid)


def _reap(pid: int) -> None:
    # Only our own children become zombies here; anyone else's are reaped by their parent or init.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def wait_gone(record: ProcRecord, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(record.pid)
        if not is_alive(record):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _signal(record: ProcRecord, signum: signal.Signals) -> None:
    if not is_alive(record):
        return
    with contextlib.suppress(ProcessLookupError):
        # We started every recorded process as a session leader: its group is ours to signal too,
        # which also reaches helpers it forked (a shell's children, werkzeug's reloader).
        if os.getpgid(record.pid) == record.pid:
            os.killpg(record.pid, signum)
        else:
            os.kill(record.pid, signum)


def terminate(record: ProcRecord, grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after grace_s; returns once the process is gone."""
    _signal(record, signal.SIGTERM)
    if not wait_gone(record, grace_s):
        kill(record)


def kill(record: ProcRecord, timeout_s: float = 10.0) -> None:
    _signal(record, signal.SIGKILL)
    if not wait_gone(record, timeout_s):
        raise TimeoutError(f"process {record.pid} survived SIGKILL for {timeout_s} s")


def pids_mentioning(fragment: str) -> Iterator[int]:
    """Processes whose command line contains fragment. Used with paths unique to one sandbox
    (its /run/wsbx-K/ dir), so it finds only processes that sandbox started."""
    own = os.getpid()
    needle = fragment.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in cmdline:
            yield int(entry.name)


def kill_mentioning(fragment: str, timeout_s: float = 10.0) -> list[int]:
    """SIGKILL every process whose command line contains fragment; returns their pids."""
    records = []
    for pid in pids_mentioning(fragment):
        ticks = start_ticks_of(pid)
        if ticks is not None:
            records.append(ProcRecord(pid=pid, start_ticks=ticks))
    for record in records:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
    for record in records:
        wait_gone(record, timeout_s)
    return [r.pid for r in records]


def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the kernel's pick); the caller binds it soon after."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def can_bind(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True
