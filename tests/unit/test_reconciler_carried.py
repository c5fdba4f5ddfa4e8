"""What the loop carries from cycle to cycle (failed starts, also as the adapter reads AWS's refusal), what it tells
when its lease lapses, and apply's gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
from warmswarm_autoscaling.actions import Launch, Start, Terminate
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.ports import InsufficientCapacity, LaunchRequest
from warmswarm_autoscaling.reconciler import LoopTiming, NotLeader, Reconciler
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, Owner, format_timestamp

from .factories import ALICE_N1, BACKOFF_S, BOB_N1, NOW, actions_of, instance, kept, launch, node_of, pending_task
from .fakes import ClusterEc2, FakeSwarm, Recorder, autoscaler, one, refusing_adapter
from .loop_sleeps import run_loop


class NoCapacityToStart(ClusterEc2):
    """EC2 that has no capacity to start a stopped machine again (InsufficientInstanceCapacity on StartInstances)."""

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        self._count("StartInstances")
        raise InsufficientCapacity("StartInstances", "InsufficientInstanceCapacity", "none left in the zone")


def warm(instance_id: str, owner: Owner) -> Instance:
    """A machine we stopped for its owner's warm tier, kept for half an hour more."""
    tags = {INSTANCE_WARM_TTL_TAG: "3600", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 1800)}
    return instance(instance_id, owner, state="stopped", tags=tags, volume_id=f"vol-{instance_id}")


def plan_of(scaler: Reconciler) -> Plan:
    assert scaler.last.plan is not None
    return scaler.last.plan


def terminations(scaler: Reconciler) -> dict[str, str]:
    return {t.instance_id: t.cause for t in actions_of(plan_of(scaler), Terminate)}


def starts(scaler: Reconciler) -> list[str]:
    return [s.instance_id for s in actions_of(plan_of(scaler), Start)]


async def test_a_machine_that_could_not_start_is_terminated_until_it_is_gone() -> None:
    """A start that found no capacity is not tried again: the machine goes (its owner's work launches anew), and a
    failed termination is tried again next cycle rather than forgotten. A warm machine that never failed stays."""
    alices, bobs = warm("i-01", ALICE_N1), warm("i-02", BOB_N1)
    swarm = FakeSwarm(
        nodes=[node_of(m, state="down", availability="drain") for m in (alices, bobs)],
        tasks=[pending_task("t1", ALICE_N1)],
    )
    ec2 = NoCapacityToStart(instances=[alices, bobs])
    scaler = autoscaler(swarm, ec2)

    await scaler.cycle()
    assert starts(scaler) == ["i-01"]
    assert terminations(scaler) == {}

    ec2.failing["TerminateInstances"] = "RequestLimitExceeded"
    await scaler.cycle()
    assert starts(scaler) == []
    assert terminations(scaler) == {"i-01": "start_failed"}

    del ec2.failing["TerminateInstances"]
    await scaler.cycle()
    assert starts(scaler) == []
    assert terminations(scaler) == {"i-01": "start_failed"}  # still stopped: still the machine that failed
    assert ec2.terminated == ["i-01"]
    assert ec2.started == []


class AwsRefusesToStart(ClusterEc2):
    """StartInstances answered as AWS answers a start it has no capacity for, read by the real EC2 adapter."""

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        self._count("StartInstances")
        await refusing_adapter("start_instances", "InsufficientInstanceCapacity").start_instances(instance_ids)


class NoCapacityToLaunch(ClusterEc2):
    """EC2 with no room for any launch; `aws_known` False: a port that tells no Date of AWS's answers."""

    aws_known = True

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._count("RunInstances")
        raise InsufficientCapacity("RunInstances", "InsufficientInstanceCapacity", "none left in the zone")

    def aws_clock(self) -> float | None:
        return super().aws_clock() if self.aws_known else None


@pytest.mark.parametrize(("aws_behind_s", "aws_known", "until"), [(600.0, True, NOW - 600.0), (0.0, False, NOW)])
async def test_an_offering_refused_for_capacity_is_avoided_by_the_plans_clock_aws_when_known(
    aws_behind_s: float, aws_known: bool, until: float
) -> None:
    """The back-off is carried on the clock the next plan reads it with (AWS's), or this replica's without one."""
    ec2 = NoCapacityToLaunch()
    ec2.aws_behind_s, ec2.aws_known = aws_behind_s, aws_known
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", ALICE_N1)]), ec2)

    await scaler.cycle()
    (refused,) = actions_of(plan_of(scaler), Launch)
    await scaler.cycle()

    assert scaler.last.snapshot is not None
    offering = (refused.instance_type, refused.availability_zone)
    assert scaler.last.snapshot.carried.unavailable_offerings == {offering: until + BACKOFF_S}


async def test_a_start_aws_refuses_for_capacity_is_not_tried_again_the_machine_is_replaced() -> None:
    """Issue 19: read as a plain error, the refusal left the same warm machine started again every cycle until its
    warm-until, and its owner's work never got a machine."""
    alices = warm("i-01", ALICE_N1)
    swarm = FakeSwarm(nodes=[node_of(alices, state="down", availability="drain")], tasks=[pending_task("t1", ALICE_N1)])
    ec2 = AwsRefusesToStart(instances=[alices])
    scaler = autoscaler(swarm, ec2)

    await scaler.cycle()
    assert starts(scaler) == ["i-01"]
    await scaler.cycle()

    assert starts(scaler) == []
    assert terminations(scaler) == {"i-01": "start_failed"}
    assert ec2.terminated == ["i-01"]


async def test_warm_machines_nobody_asks_for_stay_warm_cycle_after_cycle() -> None:
    machines = [warm("i-01", ALICE_N1), warm("i-02", BOB_N1)]
    swarm = FakeSwarm(nodes=[node_of(m, state="down", availability="drain") for m in machines])
    ec2 = ClusterEc2(instances=machines)
    scaler = autoscaler(swarm, ec2)

    for _ in range(3):
        await scaler.cycle()
        assert terminations(scaler) == {}
    assert ec2.terminated == []


async def test_actions_a_lapsed_lease_holds_back_are_told_with_the_reason() -> None:
    """The journal (/v1/status, the CLI) says why a planned action was not sent."""
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t1", ALICE_N1)]), ClusterEc2(), lease_valid=lambda: False)

    await scaler.cycle()

    assert scaler.journal.decisions
    assert {d.error for d in scaler.journal.decisions} == {
        "not applied: this replica's lease is no longer valid; the leader acts"
    }


async def test_an_expire_whose_lease_lapses_at_the_last_moment_tags_nothing_and_says_so() -> None:
    """The lease is asked before each step; the last ask is right before the tag call, and it is honoured: the
    operator hears that this replica is not the leader (not an expiry that will never come), and the journal too."""
    asks: list[None] = []

    def lease_valid() -> bool:
        asks.append(None)
        return len(asks) <= 3  # valid through the checks before and after the reads, lapsed at the call

    ec2 = ClusterEc2(volumes=[kept()])
    scaler = autoscaler(FakeSwarm(), ec2, lease_valid=lease_valid)

    lapsed = "not applied: this replica's lease is no longer valid; the leader acts"
    with pytest.raises(NotLeader) as refused:
        await scaler.expire_volume("vol-a")

    assert len(asks) == 4
    assert ec2.tag_calls == []
    (told,) = scaler.journal.decisions
    assert str(refused.value) == lapsed
    assert (told.target, told.error) == ("vol-a", lapsed)


async def test_a_launch_whose_gate_opens_only_after_apply_began_is_not_sent() -> None:
    """How nodes join is read only while the gate is open; a launch without it is an error, never a blind launch."""
    answers = iter(["the lease lapsed", None])
    ports = Recorder()

    outcome = await one(launch(), ports, gate=lambda: next(answers, None))

    assert outcome.error == (
        "cannot tell how a node joins the swarm, so no launch: it was not read, the gate being closed when apply began"
    )
    assert ports.calls == []


class OneEvent(FakeSwarm):
    """A swarm that reports one change, then nothing more."""

    def __init__(self) -> None:
        super().__init__()
        self.told = 0

    async def events(self) -> AsyncIterator[str]:
        self.told += 1
        yield "node"
        await asyncio.Event().wait()


async def test_a_term_that_followed_swarm_events_ends_cleanly_when_stopped() -> None:
    swarm = OneEvent()
    timing = LoopTiming(resync_interval_s=3600.0, debounce_s=0.0)
    scaler = autoscaler(swarm, ClusterEc2(), timing=timing)

    delays = await run_loop(scaler, sleeps=2)  # raises if following the events failed

    assert delays == [3600.0, 3600.0]
    assert swarm.told == 1
