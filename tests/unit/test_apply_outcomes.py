"""apply()'s outcomes: an adapter's failure is its own action's error (capacity and spent tokens said so the
planner can act on them), a launch without a way to join sends nothing, and a closed gate sends nothing at all."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import DeleteVolume, Drain, LaunchBatch, Terminate
from warmswarm_autoscaling.apply import always_open, apply
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, JoinInfo, SwarmError, TokenSpent
from warmswarm_autoscaling.snapshot import Task

from .factories import ALICE_N1, NOW, TEMPLATE, ZONE_A, ZONE_B, instance, launch, node_of, running_task, volume
from .fakes import Recorder, one


def test_the_default_gate_is_open() -> None:
    assert always_open() is None


async def test_no_capacity_names_the_offering_to_avoid() -> None:
    ports = Recorder()
    ports.fail["run_instance"] = InsufficientCapacity("RunInstances", "InsufficientInstanceCapacity", "none left")

    outcome = await one(launch(zone=ZONE_B), ports)

    assert outcome.unavailable_offering == ("m5.large", ZONE_B)
    assert outcome.error == "EC2 RunInstances failed with InsufficientInstanceCapacity: none left"
    assert outcome.instance_id is None
    assert not outcome.ok


async def test_no_capacity_for_a_batch_names_its_offering_too() -> None:
    ports = Recorder()
    ports.fail["run_instances"] = InsufficientCapacity("RunInstances", "InsufficientInstanceCapacity", "none")
    batch = LaunchBatch("t3.medium", ZONE_A, (launch(),), "tok-b", "work waits")

    outcome = await one(batch, ports)

    assert outcome.unavailable_offering == ("t3.medium", ZONE_A)
    assert outcome.instance_ids == ()


async def test_a_spent_token_is_handed_back_for_the_next_generation() -> None:
    ports = Recorder()
    ports.fail["run_instance"] = TokenSpent("RunInstances", "tok-launch-1", "i-0dead", "terminated")

    outcome = await one(launch(), ports)

    assert outcome.spent_token == "tok-launch-1"
    assert outcome.error is not None
    assert "client token tok-launch-1 made i-0dead, which is terminated now" in outcome.error
    assert outcome.unavailable_offering is None


async def test_any_other_port_error_is_that_actions_error_alone() -> None:
    ports = Recorder()
    ports.fail["terminate_instances"] = Ec2Error("TerminateInstances", "UnauthorizedOperation", "denied")

    failed, drained = await apply(
        (Terminate("i-0aa", "idle", cause="idle"), Drain("node-2", "idle")), ports, ports, TEMPLATE, clock=lambda: NOW
    )

    assert failed.error == "EC2 TerminateInstances failed with UnauthorizedOperation: denied"
    assert (failed.spent_token, failed.unavailable_offering, failed.skipped) == (None, None, None)
    assert drained.ok
    assert ("update_node", "node-2", None, "drain") in ports.calls


class Landed(Recorder):
    """A swarm whose tasks are read again before an idle node's drain: `tasks` is what it lists now."""

    def __init__(self, *tasks: Task) -> None:
        super().__init__()
        self.tasks = list(tasks)

    async def list_tasks(self) -> list[Task]:
        self._call("list_tasks")
        return self.tasks


IDLE_NODE = node_of(instance("i-01", ALICE_N1))
OTHER_NODE = node_of(instance("i-02", ALICE_N1))


async def test_an_idle_drain_reads_the_tasks_again_and_one_placed_on_the_node_since_stops_it() -> None:
    """The owner's new session landed on the node after the plan saw it idle (the fault campaign's seed 3930):
    drained, it would be evicted as it starts."""
    ports = Landed(running_task("t1", IDLE_NODE, ALICE_N1, state="starting"))

    outcome = await one(Drain(IDLE_NODE.id, "idle", if_still_idle=True), ports)

    assert outcome.skipped == "not drained: read again, it runs service-t1 (t1) now"
    assert ports.calls == [("list_tasks",)]


async def test_an_idle_drain_goes_on_past_tasks_that_keep_no_node_busy() -> None:
    finished = running_task("t0", IDLE_NODE, ALICE_N1, state="complete", desired_state="shutdown")
    agent = dataclasses.replace(running_task("t9", IDLE_NODE), global_service=True)
    elsewhere = running_task("t2", OTHER_NODE, ALICE_N1)
    ports = Landed(finished, agent, elsewhere)

    outcome = await one(Drain(IDLE_NODE.id, "idle", if_still_idle=True), ports)

    assert outcome.ok
    assert ports.calls == [("list_tasks",), ("update_node", IDLE_NODE.id, None, "drain")]


async def test_a_drain_for_the_work_on_a_node_is_not_read_again() -> None:
    ports = Landed(running_task("t1", IDLE_NODE, ALICE_N1))
    outcome = await one(Drain(IDLE_NODE.id, "no cache volume for the work on it"), ports)
    assert outcome.ok
    assert ports.calls == [("update_node", IDLE_NODE.id, None, "drain")]


async def test_an_idle_drain_whose_tasks_cannot_be_read_again_is_not_sent() -> None:
    ports = Landed()
    ports.fail["list_tasks"] = SwarmError("the manager does not answer")
    outcome = await one(Drain(IDLE_NODE.id, "idle", if_still_idle=True), ports)
    assert (
        outcome.error
        == f"could not read the tasks of {IDLE_NODE.id} again before draining it: the manager does not answer"
    )
    assert ports.calls == [("list_tasks",)]


async def test_a_swarm_error_is_the_actions_error() -> None:
    ports = Recorder()
    ports.fail["update_node"] = SwarmError("node node-1 is gone")

    outcome = await one(Drain("node-1", "idle"), ports)

    assert outcome.error == "node node-1 is gone"


async def test_without_the_join_token_no_launch_is_sent_and_each_says_why() -> None:
    ports = Recorder()
    ports.fail["join_info"] = SwarmError("the manager does not answer")
    batch = LaunchBatch("m5.large", ZONE_A, (launch(),), "tok-b", "work waits")

    single, many = await apply((launch(), batch), ports, ports, TEMPLATE)

    assert ports.calls == [("join_info",)]  # asked once for the cycle, and nothing launched
    assert (single.action, many.action) == (launch(), batch)
    for outcome in (single, many):
        assert outcome.error == "cannot tell how a node joins the swarm, so no launch: the manager does not answer"


async def test_a_join_token_of_an_unexpected_form_launches_nothing() -> None:
    ports = Recorder(join=JoinInfo("10.1.2.3:2377", "not-a-token; rm -rf /"))
    batch = LaunchBatch("m5.large", ZONE_A, (launch(),), "tok-b", "work waits")

    single, many = await apply((launch(), batch), ports, ports, TEMPLATE)

    assert ports.calls == [("join_info",)]
    assert (single.action, many.action) == (launch(), batch)
    for outcome in (single, many):
        assert outcome.error is not None
        assert outcome.error.startswith("no node boot script, so no launch: the swarm worker join token")


async def test_the_join_token_is_not_asked_for_without_a_launch() -> None:
    ports = Recorder()

    await apply((Drain("node-1", "idle"),), ports, ports, TEMPLATE)

    assert ("join_info",) not in ports.calls


async def test_a_closed_gate_sends_nothing_and_each_action_says_why() -> None:
    ports = Recorder()
    ports.volumes["vol-0a"] = volume("vol-0a", expires_at=NOW - 1)
    actions = (
        launch(),
        Drain("node-1", "idle"),
        Terminate("i-0aa", "idle", cause="idle"),
        DeleteVolume("vol-0a", "expired"),
    )

    outcomes = await apply(actions, ports, ports, TEMPLATE, gate=lambda: "the lease ran out", clock=lambda: NOW)

    # Only the delete's re-read (which changes nothing) is sent; the join token is not even asked for.
    assert ports.calls == [("describe_volume", "vol-0a")]
    assert [o.skipped for o in outcomes] == ["not applied: the lease ran out"] * 4
    assert not any(o.ok for o in outcomes)


async def test_the_gate_is_asked_before_each_call() -> None:
    ports = Recorder()
    answers = iter([None, "closed now"])  # the drain's, then the terminate's

    first, second = await apply(
        (Drain("node-1", "idle"), Terminate("i-0aa", "idle", cause="idle")),
        ports,
        ports,
        TEMPLATE,
        gate=lambda: next(answers, "x"),
    )

    assert first.ok
    assert second.skipped == "not applied: closed now"
    assert ports.calls == [("update_node", "node-1", None, "drain")]
