"""The journal: each outcome told once, as a decision people read, a metric and a log record; a dry run's plan and a
stuck task's reason told once while they last, and again when they change or come back."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from warmswarm_autoscaling.actions import (
    CreateVolume,
    Drain,
    ExpireVolume,
    Launch,
    LaunchBatch,
    ReleaseVolume,
    Terminate,
)
from warmswarm_autoscaling.journal import Journal
from warmswarm_autoscaling.metrics import Metrics
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.plan import Waiting
from warmswarm_models import Owner, Resources

from .factories import ALICE_N1, BOB, NOW, ZONE_A
from .metrics_scrape import parse

LOGGER = "warmswarm_autoscaling.journal"
LAUNCH = Launch("m5.large", ZONE_A, ALICE_N1, ("t1",), Resources(1.0, 2**30), "tok", "t1 of alice waits")
BATCH = LaunchBatch("m5.large", ZONE_A, (LAUNCH, LAUNCH), "tok-b", "2 tasks wait")
DRAIN = Drain("node-1", "idle for 5 min")


def metric(journal: Journal, name: str, **labels: str) -> float:
    return parse(journal.metrics.exposition().decode()).family(name).get(frozenset(labels.items()), 0.0)


def extra(record: logging.LogRecord, name: str) -> object:
    """A structured field of a log record (logging's `extra`)."""
    return record.__dict__[name]


def records(caplog: pytest.LogCaptureFixture, kind: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "kind", None) == kind]


def test_an_applied_launch_is_a_decision_a_metric_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.applied([Outcome(LAUNCH, instance_id="i-0aa")], NOW)

    (decision,) = journal.decisions
    assert (decision.at, decision.kind, decision.target) == (NOW, "launch", "m5.large in eu-west-1a")
    assert (decision.action, decision.reason) == ("Launch m5.large in eu-west-1a", "t1 of alice waits")
    assert (decision.created, decision.error, decision.dry_run) == ("i-0aa", None, False)
    assert metric(journal, "warmswarm_actions_total", action="launch", outcome="ok") == 1
    assert metric(journal, "warmswarm_launches_total", reason="pending_work") == 1
    (line,) = records(caplog, "launch")
    assert line.levelno == logging.INFO
    assert line.getMessage() == "Launch m5.large in eu-west-1a -> i-0aa: t1 of alice waits"
    assert (extra(line, "outcome"), extra(line, "created_id")) == ("ok", "i-0aa")
    assert (extra(line, "target"), extra(line, "reason"), extra(line, "dry_run")) == (
        "m5.large in eu-west-1a",
        "t1 of alice waits",
        False,
    )


def test_a_batch_counts_each_machine_it_started_and_names_them_all() -> None:
    journal = Journal(Metrics())

    journal.applied([Outcome(BATCH, instance_id="i-1", instance_ids=("i-1", "i-2"))], NOW)

    assert journal.decisions[0].created == "i-1,i-2"
    assert metric(journal, "warmswarm_launches_total", reason="pending_work") == 2
    assert metric(journal, "warmswarm_actions_total", action="launch_batch", outcome="ok") == 1


def test_a_new_volume_is_named_as_created() -> None:
    journal = Journal(Metrics())
    create = CreateVolume(ALICE_N1, ZONE_A, 20, "gp3", 3600, "tok-v", "alice's cache")

    journal.applied([Outcome(create, volume_id="vol-0a")], NOW)

    assert journal.decisions[0].created == "vol-0a"


def test_a_termination_is_counted_by_its_cause() -> None:
    journal = Journal(Metrics())

    journal.applied([Outcome(Terminate("i-0aa", "never joined", cause="start_timeout"))], NOW)

    assert metric(journal, "warmswarm_terminations_total", reason="start_timeout") == 1
    assert metric(journal, "warmswarm_terminations_total", reason="idle") == 0
    assert journal.decisions[0].created is None


def test_a_failed_action_is_an_error_everywhere_and_counts_nothing_done(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.applied(
            [
                Outcome(LAUNCH, error="EC2 RunInstances failed"),
                Outcome(Terminate("i-0aa", "idle", cause="idle"), error="denied"),
            ],
            NOW,
        )

    assert [d.error for d in journal.decisions] == ["EC2 RunInstances failed", "denied"]
    assert metric(journal, "warmswarm_actions_total", action="launch", outcome="error") == 1
    assert metric(journal, "warmswarm_actions_total", action="launch", outcome="ok") == 0
    assert metric(journal, "warmswarm_launches_total", reason="pending_work") == 0
    assert metric(journal, "warmswarm_terminations_total", reason="idle") == 0
    (line,) = records(caplog, "launch")
    assert line.levelno == logging.ERROR
    assert (
        line.getMessage()
        == "Launch m5.large in eu-west-1a failed: EC2 RunInstances failed (reason was: t1 of alice waits)"
    )


def test_a_skipped_action_is_a_decision_with_its_reason_but_no_metric(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.applied([Outcome(DRAIN, skipped="not applied: the lease ran out")], NOW)

    (decision,) = journal.decisions
    assert decision.error == "not applied: the lease ran out"
    assert decision.created is None
    assert metric(journal, "warmswarm_actions_total", action="drain", outcome="ok") == 0
    assert metric(journal, "warmswarm_actions_total", action="drain", outcome="error") == 0
    (line,) = records(caplog, "drain")
    assert line.levelno == logging.WARNING
    assert extra(line, "outcome") == "skipped"


def test_a_dry_run_tells_each_planned_action_once_while_it_stays_planned() -> None:
    journal = Journal(Metrics())

    journal.not_applied([DRAIN, LAUNCH], NOW)
    journal.not_applied([DRAIN, LAUNCH], NOW + 30)
    journal.not_applied([LAUNCH], NOW + 60)  # the drain is no longer planned...
    journal.not_applied([DRAIN, LAUNCH], NOW + 90)  # ...and when it is again, it is told again

    told = [(d.kind, d.at, d.dry_run, d.error) for d in journal.decisions]
    assert told == [
        ("drain", NOW, True, None),
        ("launch", NOW, True, None),
        ("drain", NOW + 90, True, None),
    ]
    assert metric(journal, "warmswarm_actions_total", action="drain", outcome="ok") == 0


def test_applying_forgets_what_a_dry_run_had_told() -> None:
    journal = Journal(Metrics())
    journal.not_applied([DRAIN], NOW)

    journal.applied([], NOW + 30)
    journal.not_applied([DRAIN], NOW + 60)

    assert [d.at for d in journal.decisions] == [NOW, NOW + 60]


def test_only_the_latest_decisions_are_kept() -> None:
    journal = Journal(Metrics(), kept=2)

    journal.applied([Outcome(Drain(f"node-{n}", "idle")) for n in range(3)], NOW)

    assert [d.target for d in journal.decisions] == ["node-1", "node-2"]


def test_a_waiting_tasks_reason_is_logged_once_until_it_changes(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())
    stuck = Waiting("t1", "ws-n1", ALICE_N1, "no instance type fits 64 CPUs", unschedulable=True)
    pending = Waiting("t2", "ws-n2", BOB, "a machine is booting for it", unschedulable=False)
    moved = Waiting("t2", "ws-n2", BOB, "its machine joined; waiting for its labels", unschedulable=False)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.waiting([stuck, pending])
        journal.waiting([stuck, pending])
        journal.waiting([stuck, moved])
        journal.waiting([moved])
        journal.waiting([stuck, moved])  # t1 waits again after it was gone: told again

    told = [(r.levelno, extra(r, "target"), extra(r, "reason")) for r in records(caplog, "wait")]
    assert told == [
        (logging.WARNING, "t1", "no instance type fits 64 CPUs"),
        (logging.INFO, "t2", "a machine is booting for it"),
        (logging.INFO, "t2", "its machine joined; waiting for its labels"),
        (logging.WARNING, "t1", "no instance type fits 64 CPUs"),
    ]
    assert (
        records(caplog, "wait")[0].getMessage() == f"task t1 of ws-n1 ({ALICE_N1}) waits: no instance type fits 64 CPUs"
    )


def test_a_notice_is_logged_once_while_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.notices(["AWS's clock is 40 s ahead"])
        journal.notices(["AWS's clock is 40 s ahead", "node n9 claims i-0aa"])
        journal.notices([])
        journal.notices(["AWS's clock is 40 s ahead"])

    told = [r.getMessage() for r in records(caplog, "notice")]
    assert told == ["AWS's clock is 40 s ahead", "node n9 claims i-0aa", "AWS's clock is 40 s ahead"]
    assert all(r.levelno == logging.WARNING for r in records(caplog, "notice"))


def test_an_operators_act_is_a_decision_a_metric_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.operator(ExpireVolume("vol-0a", NOW, "expires now, by the operator"), NOW)
        journal.operator(ExpireVolume("vol-0b", NOW + 1, "by the operator"), NOW + 1, error="EC2 CreateTags failed")

    ok, failed = journal.decisions
    assert (ok.kind, ok.target, ok.action, ok.reason, ok.at) == (
        "expire_volume",
        "vol-0a",
        "ExpireVolume vol-0a",
        "expires now, by the operator",
        NOW,
    )
    assert (ok.error, ok.dry_run, ok.created) == (None, False, None)
    assert failed.error == "EC2 CreateTags failed"
    told, refused = records(caplog, "expire_volume")
    assert (told.levelno, told.getMessage()) == (logging.INFO, "ExpireVolume vol-0a: expires now, by the operator")
    assert (refused.levelno, refused.getMessage()) == (
        logging.ERROR,
        "ExpireVolume vol-0b failed: EC2 CreateTags failed",
    )
    fields = ("target", "reason", "dry_run", "outcome")
    assert [extra(told, f) for f in fields] == ["vol-0a", "expires now, by the operator", False, "ok"]
    assert [extra(refused, f) for f in (*fields, "error")] == [
        "vol-0b",
        "by the operator",
        False,
        "error",
        "EC2 CreateTags failed",
    ]
    assert metric(journal, "warmswarm_actions_total", action="expire_volume", outcome="ok") == 1
    assert metric(journal, "warmswarm_actions_total", action="expire_volume", outcome="error") == 1


def test_an_action_without_a_result_is_told_without_a_created_id(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())
    tag = ReleaseVolume("vol-0a", NOW, NOW + 60, None, "released")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.applied([Outcome(tag)], NOW)

    (line,) = records(caplog, "tag_volume")
    assert line.getMessage() == "ReleaseVolume vol-0a: released"
    assert extra(line, "created_id") is None


def test_a_new_waiting_task_is_told_though_an_earlier_one_was_told_already(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())
    first = Waiting("t1", "ws-n1", ALICE_N1, "a machine is booting for it")
    second = Waiting("t2", "ws-n2", BOB, "a machine is booting for it")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.waiting([first])
        journal.waiting([first, second])

    assert [extra(r, "target") for r in records(caplog, "wait")] == ["t1", "t2"]


def test_a_buffer_refill_is_counted_as_the_buffers_launch_not_as_pending_work() -> None:
    journal = Journal(Metrics())
    refill = dataclasses.replace(LAUNCH, owner=Owner(), task_ids=(), purpose="buffer")

    journal.applied([Outcome(refill, instance_id="i-0bb"), Outcome(LAUNCH, instance_id="i-0aa")], NOW)

    assert metric(journal, "warmswarm_launches_total", reason="buffer") == 1
    assert metric(journal, "warmswarm_launches_total", reason="pending_work") == 1


def test_each_line_carries_the_fields_its_action_describes_itself_with(caplog: pytest.LogCaptureFixture) -> None:
    journal = Journal(Metrics())
    idle = Terminate("i-0aa", "idle for 5 min", cause="idle")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        journal.applied([Outcome(LAUNCH, instance_id="i-0aa"), Outcome(idle)], NOW)
        journal.not_applied([DRAIN], NOW)

    (launched,) = records(caplog, "launch")
    assert (extra(launched, "owner"), extra(launched, "purpose")) == (str(ALICE_N1), "pending_work")
    (terminated,) = records(caplog, "terminate")
    assert (terminated.getMessage(), extra(terminated, "cause")) == ("Terminate i-0aa: idle for 5 min", "idle")
    (would,) = records(caplog, "drain")
    assert would.getMessage() == "dry run, would Drain node-1: idle for 5 min"
    assert (extra(would, "target"), extra(would, "dry_run")) == ("node-1", True)
