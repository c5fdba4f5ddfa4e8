"""What a campaign did, cycle by cycle: the faults injected, the calls that reached the world, what broke."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Fault:
    cycle: int
    kind: str
    key: str  # the fault's identity: a replay keeps exactly the faults whose keys it is given
    detail: str
    # Whose machines, volumes or work it strikes ("" nobody's in particular, "*" everyone's: a clock), for the
    # launch bound: each fault that strikes an owner may cost that owner one machine.
    owner: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """A call that changes the world, as it reached the modelled cloud or swarm (or was refused on the way)."""

    cycle: int
    replica: str  # "A", the leader; "B", the stale one
    at_s: float  # virtual seconds when it took effect (or was refused)
    operation: str
    target: str
    outcome: str  # "ok", "refused <code>" (no effect), "lost <code>" (took effect, the answer lost), "error <code>"

    @property
    def took_effect(self) -> bool:
        return self.outcome == "ok" or self.outcome.startswith("lost")


@dataclass(frozen=True, slots=True)
class Failure:
    """An invariant broken after a cycle, or liveness at the end; `check` names it (the same check: the same kind)."""

    cycle: int
    check: str
    message: str


@dataclass(slots=True)
class History:
    faults: list[Fault] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)  # what the world did of its own (a node back...)
    failures: list[Failure] = field(default_factory=list)
    # (virtual s, instance type, zone) of each capacity refusal AWS answered (injected or not): a cause to avoid it.
    refused_offerings: list[tuple[float, str, str]] = field(default_factory=list)
    # Machines a standing fault failed after it struck (the registry's outage fails every buffer boot until the calm,
    # a device that never appears every machine its volume goes to), by whose and which fault ("registry", "device
    # vol-…"): each may cost a launch, but only as many as a back-off that doubles lets come (invariants.py).
    strikes: Counter[tuple[str, str]] = field(default_factory=Counter)
    _told: set[tuple[str, str]] = field(default_factory=set)

    def fault_counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.faults)

    def fail(self, cycle: int, check: str, message: str, subject: str = "") -> None:
        """A broken check, told once per check and subject (the machine, volume or owner it is about; the message when
        none is given): what stays broken is told at its first cycle."""
        about = subject or message
        if (check, about) not in self._told:
            self._told.add((check, about))
            self.failures.append(Failure(cycle, check, message))

    def lines(self, *, calls: bool = True) -> list[str]:
        """The history as text, cycle by cycle; only cycles where something was injected, called or broken."""
        by_cycle: dict[int, list[str]] = {}
        for fault in self.faults:
            by_cycle.setdefault(fault.cycle, []).append(f"  ! {fault.kind}: {fault.detail}")
        for cycle, note in self.notes:
            by_cycle.setdefault(cycle, []).append(f"  ~ {note}")
        if calls:
            for call in self.calls:
                line = f"  {call.replica} {call.operation} {call.target}: {call.outcome} (t={call.at_s:.1f} s)"
                by_cycle.setdefault(call.cycle, []).append(line)
        for failure in self.failures:
            by_cycle.setdefault(failure.cycle, []).append(f"  X {failure.check}: {failure.message}")
        out: list[str] = []
        for cycle in sorted(by_cycle):
            out.append(f"cycle {cycle}:")
            out.extend(by_cycle[cycle])
        return out
