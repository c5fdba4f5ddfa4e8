"""The loop's dry run and its follower mode: it observes, plans and reports, and applies nothing."""

from __future__ import annotations

import logging

import pytest
from warmswarm_autoscaling.reconciler import LoopTiming

from .factories import ALICE, BOB, NOW, instance, make_policy, node_of, pending_task
from .fakes import Clock, FakeEc2, FakeSwarm, autoscaler, status_json
from .loop_sleeps import run_loop
from .metrics_scrape import parse

LOOP_LOGGER = "warmswarm_autoscaling.journal"


async def test_dry_run_reports_a_launch_once_and_launches_nothing(caplog: pytest.LogCaptureFixture) -> None:
    swarm = FakeSwarm(tasks=[pending_task("t1", BOB, cpus=1.0)])
    ec2 = FakeEc2()
    clock = Clock()
    scaler = autoscaler(swarm, ec2, clock=clock, dry_run=True)

    with caplog.at_level(logging.INFO, logger=LOOP_LOGGER):
        await scaler.cycle()
        clock.now += 3
        await scaler.cycle()  # the same launch is still planned: not reported again

    assert ec2.launched == []
    assert ("RunInstances", "ok") not in ec2.call_counts
    status = status_json(scaler)
    assert status["dry_run"] is True
    (decision,) = status["decisions"]
    assert decision["kind"] == "launch_batch"
    assert decision["dry_run"] is True
    assert decision["target"] == "1x t3.medium in eu-west-1a"
    assert decision["action"] == "LaunchBatch 1x t3.medium in eu-west-1a"
    assert "cheapest fit" in decision["reason"]
    (line,) = [r for r in caplog.records if "would" in r.getMessage()]
    assert line.getMessage().startswith("dry run, would LaunchBatch 1x t3.medium in eu-west-1a: ")
    assert (line.kind, line.target, line.dry_run) == ("launch_batch", "1x t3.medium in eu-west-1a", True)  # type: ignore[attr-defined]
    # The pending task is still reported as waiting, with the reason plan() gave.
    assert [p["task_id"] for p in status["pending"]] == ["t1"]


async def test_dry_run_reports_a_waiting_launch_once_across_start_windows() -> None:
    """The same waiting launch is one decision however long it waits (its token comes from the decision)."""
    clock = Clock()
    policy = make_policy()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), FakeEc2(), clock=clock, policy=policy, dry_run=True)

    await scaler.cycle()
    first_token = scaler.last.plan.actions[0].client_token  # type: ignore[union-attr]
    clock.now += policy.max_start_s
    await scaler.cycle()

    assert scaler.last.plan is not None
    assert scaler.last.plan.actions[0].client_token == first_token  # type: ignore[union-attr]
    assert [d.kind for d in scaler.journal.decisions] == ["launch_batch"]


async def test_dry_run_counts_no_action_in_the_metrics() -> None:
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), FakeEc2(), dry_run=True)

    await scaler.cycle()

    body = scaler.metrics.exposition().decode()
    assert parse(body).value("warmswarm_launches_total", reason="pending_work") == 0
    assert parse(body).value("warmswarm_actions_total", action="launch_batch", outcome="ok") == 0
    assert parse(body).value("warmswarm_dry_run") == 1


async def test_dry_run_does_not_spin_on_a_deadline_it_will_never_act_on() -> None:
    """An idle node past its grace stays planned for a drain forever: the loop must still sleep until resync."""
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    swarm = FakeSwarm(nodes=[node_of(idle)])
    ec2 = FakeEc2(instances=[idle])
    # A short busy period: were the unapplied drain taken for motion, the loop would cycle every 50 ms.
    timing = LoopTiming(resync_interval_s=30.0, busy_resync_interval_s=0.05, debounce_s=0.0)
    scaler = autoscaler(swarm, ec2, policy=make_policy(idle_grace_s=0.0), timing=timing, dry_run=True)

    # The loop's sleeps are recorded, not slept: after its first cycle it asks to sleep until the resync.
    delays = await run_loop(scaler, sleeps=2)

    assert delays == [30.0, 30.0], "after each cycle, asleep until the resync"
    assert swarm.node_reads == 2, "one cycle before each sleep"
    assert [d.kind for d in scaler.journal.decisions] == ["drain"]
    assert swarm.updates == []


async def test_a_replica_that_is_not_the_leader_applies_and_records_nothing() -> None:
    swarm = FakeSwarm(tasks=[pending_task("t1", BOB)])
    ec2 = FakeEc2()
    scaler = autoscaler(swarm, ec2)
    scaler.set_leader(False)

    report = await scaler.cycle()

    assert report.ok
    assert ec2.launched == []
    assert list(scaler.journal.decisions) == []
    assert status_json(scaler)["leader"] is False
    # Leadership back: the next cycle acts.
    scaler.set_leader(True)
    await scaler.cycle()
    assert len(ec2.launched) == 1


async def test_an_applied_action_is_logged_once_with_its_kind_and_target(caplog: pytest.LogCaptureFixture) -> None:
    ec2 = FakeEc2()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), ec2)

    with caplog.at_level(logging.INFO, logger=LOOP_LOGGER):
        await scaler.cycle()

    (line,) = [r for r in caplog.records if getattr(r, "kind", None) == "launch_batch"]
    fields = {key: getattr(line, key) for key in ("kind", "target", "outcome", "dry_run", "created_id")}
    assert fields == {
        "kind": "launch_batch",
        "target": "1x t3.medium in eu-west-1a",
        "outcome": "ok",
        "dry_run": False,
        "created_id": "i-00000001",
    }
    (decision,) = status_json(scaler)["decisions"]
    assert (decision["kind"], decision["dry_run"], decision["created"]) == ("launch_batch", False, "i-00000001")
