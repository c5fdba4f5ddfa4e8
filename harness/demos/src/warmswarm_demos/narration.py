"""The demo's voice: timestamped lines, each act's timing table, and the checks whose failure it must say plainly."""

from __future__ import annotations

import time
from collections.abc import Sequence

from warmswarm_models import parse_timestamp


class DemoFailure(Exception):
    """Something the demo saw is not what it narrates (a start path, an early delete): it says so and exits 1."""


class Narrator:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.marks: dict[str, float] = {}

    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f} s] {text}", flush=True)

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    def between(self, first: str, second: str) -> float:
        return self.marks[second] - self.marks[first]

    def since(self, mark: str) -> float:
        return time.monotonic() - self.marks[mark]

    def steps(self, steps: Sequence[tuple[str, str, str]]) -> list[tuple[str, float]]:
        """Each step (label, first mark, second mark) as a table row: its label and the seconds between the marks."""
        return [(label, self.between(first, second)) for label, first, second in steps]

    def table(self, title: str, rows: Sequence[tuple[str, float]]) -> None:
        """End the act with its table of steps and seconds."""
        print()
        print(render_table(title, rows), flush=True)


def render_table(title: str, rows: Sequence[tuple[str, float]]) -> str:
    """A title, then one line per step: its label, then its seconds right-aligned to one decimal."""
    width = max([len(title), *(len(label) for label, _ in rows)])
    lines = [f"{title:<{width}}  seconds"]
    lines += [f"{label:<{width}}  {seconds:7.1f}" for label, seconds in rows]
    return "\n".join(lines)


def seconds_after_release(released_at_tag: str, deleted_at_s: float) -> float:
    """Seconds from the volume's `warmswarm:released-at` tag to its deletion (epoch s); the tag is in whole seconds
    (truncated), so the figure may be up to 1 s more than the true one, never less."""
    released_at_s = parse_timestamp(released_at_tag)
    if released_at_s is None:
        raise DemoFailure(f"the volume's released-at tag {released_at_tag!r} is not a timestamp")
    return deleted_at_s - released_at_s


def expiry_line(volume_id: str, after_release_s: float, ttl_s: float) -> str:
    """What the demo says of a deleted volume; a DemoFailure if it went before its TTL (that would be a bug)."""
    if after_release_s < ttl_s:
        raise DemoFailure(
            f"volume {volume_id} was deleted {after_release_s:.1f} s after its release (released-at tag), before its"
            f" TTL of {ttl_s:g} s"
        )
    return (
        f"volume {volume_id} deleted {after_release_s:.1f} s after its release (released-at tag), TTL {ttl_s:g} s"
        " (the tag is in whole seconds: the figure may be up to 1 s high)"
    )


def check_start_path(act: str, expected: str, told: str | None) -> str:
    """The start path the director told, if it is the one the act narrates; a DemoFailure naming both otherwise."""
    if told != expected:
        raise DemoFailure(f"{act}: the director says the session's start path is {told}, not {expected}")
    return told
