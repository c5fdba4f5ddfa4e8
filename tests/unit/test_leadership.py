"""Only the leader acts, provably: each mutating call asks the lease by the clock, a stale plan is not applied,
a delete reads its volume again, and each term of leadership starts its clocks afresh."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from warmswarm_autoscaling.lease import Lease
from warmswarm_autoscaling.ports import LaunchRequest
from warmswarm_autoscaling.snapshot import Volume

from .factories import ALICE, BOB, NOW, attachment, instance, make_policy, node_of, pending_task, volume
from .fakes import Clock, FakeEc2, FakeLock, FakeSwarm, autoscaler

KEY = "warmswarm:autoscaling:unit:leader"


class StallingEc2(FakeEc2):
    """Its first launch stalls the whole event loop (a long GC pause, a starved CPU) for `stall_s`."""

    def __init__(self, stall_s: float, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.stall_s = stall_s

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        instance_ids = await super().run_instances(request)
        if len(self.launched) == 1:
            time.sleep(self.stall_s)  # noqa: ASYNC251 -- the point: no renewal, no cancellation can run meanwhile
        return instance_ids


async def test_a_stalled_leader_applies_nothing_after_its_lease_ran_out() -> None:
    # Two owners wait: one plan, two launches (one per zone: machines spread over the zones).
    # The first stalls the replica past its lease's ttl;
    # the second must not be sent, though nothing could cancel the cycle while the loop was stalled.
    swarm = FakeSwarm(tasks=[pending_task("t-alice", ALICE), pending_task("t-bob", BOB)])
    ec2 = StallingEc2(stall_s=1.5, clock=time.time)
    lock = FakeLock(time.monotonic)
    lease: Lease | None = None
    scaler = autoscaler(swarm, ec2, clock=time.time, lease_valid=lambda: lease is not None and lease.is_leader)
    lease = Lease(lock, key=KEY, replica="a", ttl_s=1.0, renew_interval_s=0.25, on_change=scaler.set_leader)
    stop = asyncio.Event()
    election = asyncio.create_task(lease.run(stop, scaler.run))
    try:
        async with asyncio.timeout(10):
            while not scaler.journal.decisions:  # noqa: ASYNC110 -- until the stalled cycle's outcomes are recorded
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await election

    assert len(ec2.launched) == 1, "nothing is sent once the lease has run out by the clock"
    outcomes = {d.target: d.error for d in scaler.journal.decisions}
    assert any(error and "lease is no longer valid" in error for error in outcomes.values()), outcomes


async def test_when_the_gate_closes_between_calls_the_rest_of_the_plan_is_not_sent() -> None:
    swarm = FakeSwarm(tasks=[pending_task("t-alice", ALICE), pending_task("t-bob", BOB)])
    ec2 = FakeEc2()
    valid = [True]
    scaler = autoscaler(swarm, ec2, lease_valid=lambda: valid[0])
    original = ec2.run_instances

    async def launch_then_lose_the_lease(request: LaunchRequest) -> list[str]:
        valid[0] = False
        return await original(request)

    ec2.run_instances = launch_then_lose_the_lease  # type: ignore[method-assign]

    await scaler.cycle()

    assert len(ec2.launched) == 1


async def test_a_plan_from_a_snapshot_older_than_the_safety_margin_is_not_applied() -> None:
    swarm = FakeSwarm(tasks=[pending_task("t-alice", ALICE)])
    ec2 = FakeEc2()
    scaler = autoscaler(swarm, ec2, max_plan_age_s=-1.0)  # any age is too old

    report = await scaler.cycle()

    assert report.ok
    assert ec2.launched == []


async def test_a_plan_within_the_safety_margin_is_applied() -> None:
    ec2 = FakeEc2()
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t-alice", ALICE)]), ec2, max_plan_age_s=60.0)

    await scaler.cycle()

    assert len(ec2.launched) == 1


class OwnerBackEc2(FakeEc2):
    """Between the snapshot and the delete the owner came back: EC2 now shows the volume attaching."""

    async def describe_volume(self, volume_id: str) -> Volume | None:
        found = await super().describe_volume(volume_id)
        if found is None:
            return None
        return dataclasses.replace(found, state="in-use", attachments=(attachment("i-back", state="attaching"),))


async def test_a_delete_reads_its_volume_again_and_does_not_delete_what_is_claimed_now() -> None:
    expired = volume("vol-1", released_at=NOW - 7200, expires_at=NOW - 3600)
    ec2 = OwnerBackEc2(volumes=[expired])
    scaler = autoscaler(FakeSwarm(), ec2)

    await scaler.cycle()

    assert [v.id for v in ec2.volumes] == ["vol-1"]
    (decision,) = [d for d in scaler.journal.decisions if d.kind == "delete_volume"]
    assert decision.error is not None
    assert "not deleted: read again" in decision.error


async def test_a_new_term_does_not_inherit_an_earlier_terms_clocks() -> None:
    # Term 1 sees alice's node down for a moment at NOW. Another replica leads for an hour, during which
    # the node is back and runs work. Term 2 (this replica again) finds it down for a moment: that is
    # not a machine lost for an hour.
    machine = instance("i-01", ALICE)
    down = dataclasses.replace(node_of(machine), state="down")
    clock = Clock()
    swarm = FakeSwarm(nodes=[down])
    scaler = autoscaler(swarm, FakeEc2(instances=[machine], clock=clock), clock=clock, policy=make_policy())
    await scaler.cycle()
    assert scaler.last.plan is not None
    assert scaler.last.plan.carried.down_since == {down.id: NOW}

    clock.now = NOW + 3600
    scaler.begin_term()
    await scaler.cycle()

    assert scaler.last.plan is not None
    assert not [d for d in scaler.journal.decisions if d.kind == "terminate"]
    assert scaler.last.plan.carried.down_since == {down.id: NOW + 3600}
