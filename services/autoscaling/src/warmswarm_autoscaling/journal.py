"""The record of what the autoscaler did: each outcome written once, as a log line, a metric and a decision.

Like Karpenter's `Results.Record`: the reconciler hands over outcomes, the journal decides how each is
told. A stuck task's reason and a dry run's plan are told once, not every cycle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from typing import Final

from warmswarm_models.answers import DecisionOut

from warmswarm_autoscaling.actions import Action, ExpireVolume, Launch, LaunchBatch, Terminate, identity
from warmswarm_autoscaling.metrics import Metrics
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.plan import Waiting

log = logging.getLogger(__name__)

DECISIONS_KEPT: Final = 100


class Journal:
    def __init__(self, metrics: Metrics, *, kept: int = DECISIONS_KEPT) -> None:
        self.metrics = metrics
        self.decisions: deque[DecisionOut] = deque(maxlen=kept)
        self._told_waits: dict[str, str] = {}  # task id -> the reason last logged for it
        self._told_notices: set[str] = set()
        # What the last cycles decided without applying (dry run): told once, not every cycle.
        self._not_applied: set[tuple[str, str, str]] = set()

    def applied(self, outcomes: Iterable[Outcome], at: float) -> None:
        self._not_applied.clear()
        for outcome in outcomes:
            self._applied(outcome, at)

    def _applied(self, outcome: Outcome, at: float) -> None:
        action = outcome.action
        created = ",".join(outcome.instance_ids) or outcome.instance_id or outcome.volume_id
        fields = {**action.log_fields(), "dry_run": False}
        if outcome.skipped is not None:
            # Nothing was sent: not an action's outcome for the metrics, but a decision people must see.
            log.warning(
                "%s %s (reason was: %s)",
                action.title,
                outcome.skipped,
                action.reason,
                extra={**fields, "outcome": "skipped", "error": outcome.skipped},
            )
            self._decide(at, action, error=outcome.skipped)
            return
        if outcome.ok:
            suffix = f" -> {created}" if created else ""
            log.info(
                "%s%s: %s",
                action.title,
                suffix,
                action.reason,
                extra={**fields, "outcome": "ok", "created_id": created},
            )
        else:
            log.error(
                "%s failed: %s (reason was: %s)",
                action.title,
                outcome.error,
                action.reason,
                extra={**fields, "outcome": "error", "error": outcome.error},
            )
        self.metrics.record_action(action.kind, ok=outcome.ok)
        if outcome.ok and isinstance(action, Launch):
            self.metrics.record_launch(action.purpose)
        if outcome.ok and isinstance(action, LaunchBatch):
            self.metrics.record_launch("pending_work", machines=len(outcome.instance_ids))
        if outcome.ok and isinstance(action, Terminate):
            self.metrics.record_termination(action.cause)
        self._decide(at, action, error=outcome.error, created=created)

    def not_applied(self, actions: Iterable[Action], at: float) -> None:
        """A dry run's plan: logged and recorded as 'would …'; an action planned cycle after cycle is told once."""
        planned: set[tuple[str, str, str]] = set()
        for action in actions:
            key = identity(action)
            planned.add(key)
            if key in self._not_applied:
                continue
            log.info(
                "dry run, would %s: %s", action.title, action.reason, extra={**action.log_fields(), "dry_run": True}
            )
            self._decide(at, action, dry_run=True)
        self._not_applied = planned

    def waiting(self, waiting: Iterable[Waiting]) -> None:
        # Each reason is logged once per task, not every cycle: a stuck task does not flood the log.
        current: dict[str, str] = {}
        for w in waiting:
            current[w.task_id] = w.reason
            if self._told_waits.get(w.task_id) == w.reason:
                continue
            log.log(
                logging.WARNING if w.unschedulable else logging.INFO,
                "task %s of %s (%s) waits: %s",
                w.task_id,
                w.service_name,
                w.owner,
                w.reason,
                extra={
                    "kind": "wait",
                    "target": w.task_id,
                    "service": w.service_name,
                    "reason": w.reason,
                    "unschedulable": w.unschedulable,
                },
            )
        self._told_waits = current

    def notices(self, notices: Iterable[str]) -> None:
        """What ops should know (a node claiming another's instance, a clock ahead): logged once while it lasts."""
        current = set(notices)
        for notice in sorted(current - self._told_notices):
            log.warning("%s", notice, extra={"kind": "notice", "reason": notice})
        self._told_notices = current

    def operator(self, action: ExpireVolume, at: float, *, error: str | None = None) -> None:
        """An operator's act (an early expiry), not a planned action: told at once, whatever its outcome."""
        fields = {**action.log_fields(), "dry_run": False}
        self.metrics.record_action(action.kind, ok=error is None)
        if error is None:
            log.info("%s: %s", action.title, action.reason, extra={**fields, "outcome": "ok"})
        else:
            log.error("%s failed: %s", action.title, error, extra={**fields, "outcome": "error", "error": error})
        self._decide(at, action, error=error)

    def _decide(
        self, at: float, action: Action, *, dry_run: bool = False, error: str | None = None, created: str | None = None
    ) -> None:
        self.decisions.append(
            DecisionOut(
                at=at,
                kind=action.kind,
                target=action.target,
                action=action.title,
                reason=action.reason,
                dry_run=dry_run,
                error=error,
                created=created,
            )
        )
