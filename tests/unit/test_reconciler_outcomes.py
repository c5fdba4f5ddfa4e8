"""What one cycle's outcomes leave the next (the offering AWS had no capacity for, a spent client token, also one AWS
refused as first used with other arguments), what a cycle reports, and how long the loop sleeps in the cases at the
edges: a deadline a moment away, a failed look after a good one."""

from __future__ import annotations

import time

import pytest
from warmswarm_autoscaling.metrics import Metrics
from warmswarm_autoscaling.ports import InsufficientCapacity, LaunchRequest, SwarmError, TokenSpent, VolumeRequest
from warmswarm_autoscaling.reconciler import LoopTiming
from warmswarm_autoscaling.snapshot import Node, Volume

from .factories import ALICE_N1, BOB, NOW, ZONE_A, cached_task, make_policy, pending_task, volume
from .fakes import Clock, ClusterEc2, FakeEc2, FakeSwarm, Recorder, autoscaler, refusing_adapter
from .loop_sleeps import run_loop
from .metrics_scrape import parse

TIMING = LoopTiming(resync_interval_s=3600.0, busy_resync_interval_s=3.0, debounce_s=0.0, failure_backoff_s=7.0)


class NoCapacityEc2(ClusterEc2):
    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._count("RunInstances")
        raise InsufficientCapacity("RunInstances", "InsufficientInstanceCapacity", "none left")


class SpentEc2(ClusterEc2):
    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._count("RunInstances")
        raise TokenSpent("RunInstances", request.client_token, "i-0dead", "terminated")


async def test_an_offering_without_capacity_is_avoided_for_the_policys_backoff() -> None:
    ec2 = NoCapacityEc2()
    policy = make_policy()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), ec2, policy=policy)

    await scaler.cycle()
    refused = ec2.call_counts[("RunInstances", "ok")]
    await scaler.cycle()

    assert refused == 1
    assert scaler.last.snapshot is not None
    assert scaler.last.snapshot.carried.unavailable_offerings == {
        ("t3.medium", ZONE_A): NOW + policy.capacity_backoff_s
    }


async def test_a_spent_token_is_known_to_the_next_cycle() -> None:
    ec2 = SpentEc2()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), ec2)

    await scaler.cycle()
    assert scaler.last.plan is not None
    (first,) = scaler.last.plan.actions
    await scaler.cycle()

    assert scaler.last.snapshot is not None
    assert scaler.last.snapshot.carried.spent_tokens == {first.client_token}  # type: ignore[union-attr]
    (second,) = scaler.last.plan.actions
    assert second.client_token != first.client_token  # type: ignore[union-attr]


class TokenReusedEc2(ClusterEc2):
    """AWS's answer to a client token first used with other arguments, read by the real adapter: CreateVolume and
    RunInstances refused with IdempotentParameterMismatch. `tokens` lists each call's token."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens: list[str] = []

    async def create_volume(self, request: VolumeRequest) -> str:
        self._count("CreateVolume")
        self.tokens.append(request.client_token)
        return await refusing_adapter("create_volume", "IdempotentParameterMismatch").create_volume(request)

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._count("RunInstances")
        self.tokens.append(request.client_token)
        return await refusing_adapter("run_instances", "IdempotentParameterMismatch").run_instances(request)


@pytest.mark.parametrize("cached", [True, False], ids=["volume", "launch"])
async def test_a_token_aws_says_was_first_used_with_other_arguments_is_spent_and_the_next_plan_takes_another(
    cached: bool,
) -> None:
    # Issue 19: the janitor deleted the owner's volume and the owner now asks for another size (or a launch is
    # retried with another type): the same token with other arguments is refused every cycle, unless it is spent.
    ec2 = TokenReusedEc2()
    task = cached_task("t1", ALICE_N1) if cached else pending_task("t1", BOB)
    scaler = autoscaler(FakeSwarm(tasks=[task]), ec2)

    await scaler.cycle()
    await scaler.cycle()

    first, second = ec2.tokens
    assert second != first
    assert scaler.last.snapshot is not None
    assert scaler.last.snapshot.carried.spent_tokens == {first}
    errors = [d.error or "" for d in scaler.journal.decisions]
    refused = [error for error in errors if "IdempotentParameterMismatch" in error]
    assert len(refused) == 2
    # The launch for the refused volume is not made (a decision skipped, saying why): no machine without its data.
    not_launched = [error for error in errors if error.startswith("not launched: its owner's cache volume")]
    assert len(not_launched) == (2 if cached else 0)
    assert len(errors) == len(refused) + len(not_launched)
    assert ec2.call_counts[("RunInstances", "ok")] == (0 if cached else 2)  # RunInstances calls made


async def test_a_cycle_reports_its_actions_and_a_duration_it_took() -> None:
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", BOB)]), ClusterEc2())

    before = time.monotonic()
    report = await scaler.cycle()
    took = time.monotonic() - before

    assert report.ok
    assert report.actions == 1
    assert report.started_at == NOW
    assert 0 <= report.duration_s <= took  # bracketed by the test's own readings: no bound of its own


async def test_a_failed_look_reports_how_long_it_took_and_counts_as_an_error() -> None:
    class Unreachable(FakeSwarm):
        async def list_nodes(self) -> list[Node]:
            raise SwarmError("the manager does not answer")

    scaler = autoscaler(Unreachable(), ClusterEc2())

    before = time.monotonic()
    report = await scaler.cycle()
    took = time.monotonic() - before

    assert not report.ok
    assert 0 <= report.duration_s <= took
    exposition = parse(scaler.metrics.exposition().decode())
    assert exposition.family("warmswarm_cycles_total") == {frozenset({("outcome", "error")}): 1.0} | {
        frozenset({("outcome", "ok")}): 0.0
    }


async def test_a_failed_look_after_a_good_one_is_backed_off() -> None:
    class FailsSecond(FakeSwarm):
        looked = 0

        async def list_nodes(self) -> list[Node]:
            self.looked += 1
            if self.looked == 2:
                raise SwarmError("the manager does not answer")
            return await super().list_nodes()

    scaler = autoscaler(FailsSecond(), ClusterEc2(), timing=TIMING)

    assert await run_loop(scaler, sleeps=3) == [3600.0, 7.0, 3600.0]


async def test_a_deadline_a_moment_away_is_slept_to_and_no_longer() -> None:
    # A volume that expires 10 ms from now (tags have whole seconds): the janitor looks again just after.
    ec2 = ClusterEc2(volumes=[volume("vol-a", ALICE_N1, released_at=NOW - 600, expires_at=NOW + 1)])
    scaler = autoscaler(FakeSwarm(), ec2, timing=TIMING, clock=Clock(NOW + 0.99))

    delays = await run_loop(scaler, sleeps=1)

    assert delays == [pytest.approx(0.06)]


async def test_the_delete_is_judged_again_by_the_autoscalers_clock() -> None:
    # Planned at NOW (expired), then read again with an expiry an hour after NOW: by the autoscaler's clock (the
    # port tells no Date of AWS's) it has not expired, so it stays. (By the wall clock, years after NOW, it would go.)
    expired = volume("vol-a", ALICE_N1, released_at=NOW - 600, expires_at=NOW - 1)
    extended = volume("vol-a", ALICE_N1, released_at=NOW - 600, expires_at=NOW + 3600)

    class ExtendedMeanwhile(ClusterEc2):
        async def describe_volume(self, volume_id: str) -> Volume | None:
            self.volumes = [extended]
            return await super().describe_volume(volume_id)

        def aws_clock(self) -> float | None:
            return None  # no Date of AWS's known: the autoscaler's own clock judges

    ec2 = ExtendedMeanwhile(volumes=[expired])
    scaler = autoscaler(FakeSwarm(), ec2)

    await scaler.cycle()

    assert ec2.volumes == [extended]
    (decision,) = scaler.journal.decisions
    assert decision.kind == "delete_volume"
    assert decision.error is not None
    assert decision.error.startswith("not deleted: read again, vol-a expires at")


async def test_the_delete_read_again_is_judged_by_the_date_of_that_read_not_this_replicas_clock() -> None:
    # Expired by this replica's clock (30 s ahead of AWS's, within max_clock_skew_s), not by AWS's: the Date of the
    # read before the delete says 10 s are left, and the volume stays.
    expiring = volume("vol-a", ALICE_N1, released_at=NOW - 3590, expires_at=NOW + 10)

    class AheadWhenReadAgain(ClusterEc2):
        async def describe_volume(self, volume_id: str) -> Volume | None:
            self.aws_behind_s = 30.0
            return await super().describe_volume(volume_id)

    ec2 = AheadWhenReadAgain(volumes=[expiring])
    scaler = autoscaler(FakeSwarm(), ec2, clock=Clock(NOW + 11))

    await scaler.cycle()

    assert ec2.volumes == [expiring]
    (decision,) = scaler.journal.decisions
    assert decision.error == "not deleted: read again, vol-a expires at 2023-11-14T22:13:30Z, not yet"


async def test_the_metrics_given_are_the_ones_kept() -> None:
    metrics = Metrics()
    scaler = autoscaler(FakeSwarm(), FakeEc2(), metrics=metrics)

    await scaler.cycle()

    assert scaler.metrics is metrics
    assert parse(metrics.exposition().decode()).value("warmswarm_cycles_total", outcome="ok") == 1


async def test_an_ec2_port_that_counts_no_calls_gives_no_call_counts() -> None:
    scaler = autoscaler(FakeSwarm(), Recorder())  # type: ignore[arg-type]

    await scaler.cycle()

    families = parse(scaler.metrics.exposition().decode()).family("warmswarm_aws_calls_total")
    assert all(value == 0 for value in families.values())
