"""Loopback ports for the sandbox's services, never handed to two callers within a while, across processes."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# How long a port handed out stays reserved for its caller: long enough for the service it was meant for to bind
# it (a service that starts under load takes seconds), short enough that the record stays small.
HELD_S = 600.0
# Where the ports handed out are recorded: one file for every process of this user on this machine (the suite's
# workers and a demo beside them).
RECORD = Path(tempfile.gettempdir()) / f"warmswarm-ports-{os.getuid()}.json"


def _any_free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port(
    *,
    record: Path = RECORD,
    candidate: Callable[[], int] = _any_free_port,
    now: Callable[[], float] = time.time,
) -> int:
    """A loopback port nobody listens on now, and that no caller was given within HELD_S.

    The kernel's answer alone (a port free at this moment) can be given to two processes in turn before either
    service binds it: the suite's workers did so, and one test's autoscaler failed to bind while the other's answered
    its readiness probe. The record, under a file lock, makes the hand-out exclusive."""
    record.touch(exist_ok=True)
    with record.open("r+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            given: dict[str, float] = json.loads(file.read() or "{}")
        except ValueError:
            given = {}  # a record cut short by a crash: forgotten, as if every hold had run out
        at = now()
        given = {port: since for port, since in given.items() if at - since < HELD_S}
        for _ in range(1000):
            port = candidate()
            if str(port) not in given:
                break
        else:
            raise RuntimeError(f"no loopback port free that {record} has not handed out within {HELD_S:g} s")
        given[str(port)] = at
        file.seek(0)
        file.truncate()
        file.write(json.dumps(given))
        return port
