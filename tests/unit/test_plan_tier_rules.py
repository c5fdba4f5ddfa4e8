"""The warm tier's rules: when an idle machine stops or goes, when a warm one resumes or expires, and what each says."""

from __future__ import annotations

from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import Launch, LaunchBatch, Start, Stop, Terminate
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, Owner, format_timestamp

from .factories import (
    ALICE_N1,
    BOB,
    NOW,
    actions_of,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
)

GRACE_S = 300.0  # the default policy's idle_grace_s
IDLE = "node ip-10-0-0-01 is drained and idle for 300 s"


def idle_machine(warm_ttl_s: int, *, volume_id: str | None = None, state: str = "running") -> Instance:
    """Alice's machine, launched with the warm tier `warm_ttl_s` (0: none)."""
    tags = {INSTANCE_WARM_TTL_TAG: str(warm_ttl_s)} if warm_ttl_s else {}
    return instance("i-01", ALICE_N1, state=state, tags=tags, volume_id=volume_id)


def warm(instance_id: str, owner: Owner, until: float, *, state: str = "stopped") -> Instance:
    """A machine we stopped for its owner's warm tier, kept until `until`."""
    return instance(instance_id, owner, state=state, tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(until)})


@pytest.mark.parametrize(
    ("machine", "max_stopped", "step", "reason"),
    [
        (idle_machine(0), 20, Terminate, IDLE),
        (idle_machine(3600, state="pending"), 20, Terminate, IDLE),  # not running (yet): nothing to keep warm
        (
            idle_machine(3600),
            0,
            Terminate,
            f"{IDLE}; its owner's warm tier is 3600 s, but max_stopped_instances=0 machines are stopped already:"
            " terminated instead",
        ),
        (
            idle_machine(3600, volume_id="vol-1"),
            0,
            Terminate,
            f"{IDLE}; its owner's warm tier is 3600 s, but max_stopped_instances=0 machines are stopped already:"
            " terminated instead; its cache volume vol-1 keeps its cache TTL",
        ),
        (
            idle_machine(1),  # the shortest warm tier still is one
            20,
            Stop,
            f"{IDLE}: stopped and kept warm for user_id=alice,project_id=p1,node_id=n1 until"
            f" {format_timestamp(NOW + 1)} (warm_ttl_s=1); disks, images, labels and cache stay",
        ),
    ],
)
def test_what_becomes_of_an_idle_machine_and_why(
    machine: Instance, max_stopped: int, step: type[Stop | Terminate], reason: str
) -> None:
    """The reason is what the owner and ops read (status, journal) to learn why a machine stopped or went."""
    node = node_of(machine, availability="drain")
    world = snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S})
    result = run(world, make_policy(max_stopped_instances=max_stopped))
    done = only(result, step)
    assert (done.instance_id, done.reason) == ("i-01", reason)
    if isinstance(done, Terminate):
        assert done.cause == "idle"
        assert actions_of(result, Stop) == []


@pytest.mark.parametrize(
    ("warm_until", "resumed"),
    [
        (NOW + 1, True),  # within its warm tier: the owner's own machine comes back
        (NOW, False),  # its warm tier is over this very moment: it goes, and the work launches anew
    ],
)
def test_a_warm_machine_resumes_only_within_its_warm_tier(warm_until: float, resumed: bool) -> None:
    machine = warm("i-01", BOB, warm_until)
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", BOB)]))
    assert [start.instance_id for start in actions_of(result, Start)] == (["i-01"] if resumed else [])
    assert [t.cause for t in actions_of(result, Terminate)] == ([] if resumed else ["warm_expired"])
    launched = actions_of(result, Launch) + actions_of(result, LaunchBatch)
    assert bool(launched) is not resumed


def test_a_resumed_machine_says_whose_it_is_and_a_stopping_one_does_not_hold_up_the_others() -> None:
    """Alice's machine is still stopping (EC2 refuses a start yet); Bob's, stopped, is started all the same."""
    stopping, stopped = warm("i-01", ALICE_N1, NOW + 900, state="stopping"), warm("i-02", BOB, NOW + 900)
    nodes = [node_of(m, state="down", availability="drain") for m in (stopping, stopped)]
    tasks = [pending_task("t1", ALICE_N1), pending_task("t2", BOB)]
    start = only(run(snapshot(nodes=nodes, instances=[stopping, stopped], tasks=tasks)), Start)
    assert (start.instance_id, start.reason) == (
        "i-02",
        "resuming the machine of user_id=bob: i-02 (t3.medium in eu-west-1a) was kept warm; the same node comes"
        " back with its labels and cache",
    )


def test_each_stopped_machine_no_tier_keeps_is_terminated_whatever_comes_before_it() -> None:
    """Every stopped machine is judged on its own: one that is kept (or running) does not shield the next."""
    machines = [
        instance("i-01", BOB),  # running
        warm("i-02", BOB, NOW + 900),  # its start failed
        warm("i-03", BOB, NOW + 900),  # still warm
        instance("i-04", BOB, state="stopped"),  # stopped by a person just now: they may start it again
        warm("i-05", BOB, NOW - 1),  # its warm tier is over
        instance("i-06", BOB, state="stopped", volume_id="vol-6"),  # stopped by a person max_start_s ago
    ]
    world = replace(
        snapshot(nodes=[node_of(machines[0])], instances=machines, stopped_since={"i-04": NOW - 10, "i-06": NOW - 600}),
        failed_starts=frozenset({"i-02"}),
    )
    terminated = [(t.instance_id, t.cause, t.reason) for t in actions_of(run(world), Terminate)]
    assert terminated == [
        (
            "i-02",
            "start_failed",
            "instance i-02 of user_id=bob could not be started (no capacity for it): terminated so that its owner's"
            " work launches anew",
        ),
        (
            "i-05",
            "warm_expired",
            f"instance i-05 of user_id=bob was kept warm until {format_timestamp(NOW - 1)}: its warm tier is over",
        ),
        (
            "i-06",
            "stopped",
            "instance i-06 of user_id=bob has been stopped for 600 s (max_start_s=600) and no policy keeps a stopped"
            " machine; its cache volume vol-6 is kept for its owner",
        ),
    ]
