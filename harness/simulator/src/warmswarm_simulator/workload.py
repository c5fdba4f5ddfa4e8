"""The trace format: one CSV row per session (who, what it needs, how long, its groups and its data), read and written.

Columns: arrival_s (seconds since the day's midnight), user, project, node (the owner: one service and, with the
cache on, one volume), cpus, memory_gib, gpus, duration_s (how long the user works once the session runs), group
(one group name, or several separated by ';'), data_gb (the project data the session needs before it runs).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from pathlib import Path

COLUMNS = ("arrival_s", "user", "project", "node", "cpus", "memory_gib", "gpus", "duration_s", "group", "data_gb")


class TraceError(ValueError):
    """A trace row that cannot be read; the message names the line and the column."""


@dataclass(frozen=True, slots=True)
class Session:
    arrival_s: float
    user: str
    project: str
    node: str
    cpus: float
    memory_gib: float
    gpus: int
    duration_s: float
    group: str
    data_gb: float

    @property
    def owner(self) -> tuple[str, str, str]:
        return (self.user, self.project, self.node)

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(g for g in self.group.split(";") if g)

    @property
    def data_key(self) -> str:
        """What identifies the data it needs: its project on its node (the cache volume's owner)."""
        return "/".join(self.owner)


def ordered(sessions: Iterable[Session]) -> list[Session]:
    """Arrival order, ties broken by owner: the order the platform starts them in, the same on every run."""
    return sorted(sessions, key=lambda s: (s.arrival_s, s.owner))


def write_trace(path: Path, sessions: Iterable[Session]) -> None:
    path.write_text(trace_text(sessions))


def trace_text(sessions: Iterable[Session]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for s in ordered(sessions):
        writer.writerow(
            [
                f"{s.arrival_s:.1f}",
                s.user,
                s.project,
                s.node,
                f"{s.cpus:g}",
                f"{s.memory_gib:g}",
                s.gpus,
                f"{s.duration_s:.0f}",
                s.group,
                f"{s.data_gb:.2f}",
            ]
        )
    return out.getvalue()


def read_trace(path: Path) -> list[Session]:
    return parse_trace(path.read_text())


def parse_trace(text: str) -> list[Session]:
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise TraceError(f"the trace has no column(s) {missing}; expected {','.join(COLUMNS)}")
    sessions = []
    for line, row in enumerate(reader, start=2):
        try:
            session = Session(
                arrival_s=float(row["arrival_s"]),
                user=row["user"].strip(),
                project=row["project"].strip(),
                node=row["node"].strip(),
                cpus=float(row["cpus"]),
                memory_gib=float(row["memory_gib"]),
                gpus=int(row["gpus"] or 0),
                duration_s=float(row["duration_s"]),
                group=row["group"].strip(),
                data_gb=float(row["data_gb"]),
            )
        except (TypeError, ValueError) as error:
            raise TraceError(f"line {line}: {error}") from error
        if min(session.arrival_s, session.cpus, session.memory_gib, session.duration_s, session.data_gb) < 0:
            raise TraceError(f"line {line}: negative values in {astuple(session)}")
        if not all((session.user, session.project, session.node)):
            raise TraceError(f"line {line}: user, project and node must all be set")
        sessions.append(session)
    return ordered(sessions)
