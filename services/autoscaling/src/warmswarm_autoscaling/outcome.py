"""What became of an action apply carried out: done, refused by the world (and what that teaches), or not sent."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_autoscaling.actions import Action


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    error: str | None = None
    instance_id: str | None = None
    volume_id: str | None = None
    # Set when AWS said it has no capacity for this (type, zone): the planner avoids it for a while.
    unavailable_offering: tuple[str, str] | None = None
    # Set when the call was not made, and why (the gate closed, a re-read changed the decision).
    skipped: str | None = None
    # The client token whose first use is over (what it made is gone): the decision takes the next one.
    spent_token: str | None = None
    # Every instance a LaunchBatch started (instance_id is the first of them).
    instance_ids: tuple[str, ...] = ()
    # A warm machine that could not be started (no capacity): the planner terminates it and launches anew.
    failed_start: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None
