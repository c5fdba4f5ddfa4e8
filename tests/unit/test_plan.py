"""plan() (plan/__init__.py): how it wires the decisions together, and the Plan it answers.

Held and returning volumes are decided here, from what the launches and the machines name; so are the
waiting list, the notices and their order, what is in flight, and one answer for one snapshot."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import DeleteVolume, Launch, RenewVolume, SetVolumeTtl
from warmswarm_autoscaling.plan import Plan
from warmswarm_models import VOLUME_RELEASED_AT_TAG, CachePolicy, Owner

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    NOBODY,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    cached_task,
    foreign_node,
    instance,
    make_policy,
    node_of,
    only,
    pending_task,
    run,
    running_task,
    set_tags,
    snapshot,
    volume,
    volume_tagging,
)

# -- volumes the janitor leaves alone this cycle -----------------------------------------------------------


def test_a_volume_a_machine_with_its_disks_names_is_never_released_and_one_gone_for_good_is() -> None:
    """A stopped machine may be started again and mount its volume: releasing it would let it expire under
    the machine. A machine shutting down or terminated will never mount it again."""
    for state, released in [
        ("pending", False),
        ("running", False),
        ("stopping", False),
        ("stopped", False),
        ("shutting-down", True),
        ("terminated", True),
    ]:
        machine = instance("i-1", ALICE_N1, state=state, launched_at=NOW - 60, volume_id="vol-a")
        result = run(snapshot(instances=[machine], volumes=[volume("vol-a")]))
        releases = [t for t in volume_tagging(result) if VOLUME_RELEASED_AT_TAG in set_tags(t)]
        assert bool(releases) is released, state


def test_an_expired_volume_that_a_late_machine_still_names_is_not_deleted_while_that_machine_lives() -> None:
    expired = volume("vol-1", ALICE_N1, released_at=NOW - 7200, expires_at=NOW - 3600)
    late = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 10_000)  # never joined: terminated now
    stopped = instance("i-02", ALICE_N1, volume_id="vol-1", state="stopped")

    for machine in (late, stopped):
        result = run(snapshot(instances=[machine], volumes=[expired]))
        assert actions_of(result, DeleteVolume) == [], machine.state

    gone = instance("i-01", ALICE_N1, volume_id="vol-1", state="shutting-down")
    assert [d.volume_id for d in actions_of(run(snapshot(instances=[gone], volumes=[expired])), DeleteVolume)] == [
        "vol-1"
    ]


def test_an_expired_volume_whose_returning_owner_cannot_launch_yet_is_neither_deleted_nor_retagged() -> None:
    """The owner is back: their data must wait for a launch (here for capacity in the volume's zone)."""
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)
    full = {(name, ZONE_A): NOW + 300 for name in ("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge")}

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[expired], unavailable=full))

    assert actions_of(result, DeleteVolume) == []
    assert actions_of(result, Launch) == []
    assert [set_tags(t) for t in volume_tagging(result)] == [{}]  # only its release tags cleared


def test_an_owner_without_cache_work_does_not_hold_their_expired_volume() -> None:
    expired = volume("vol-a", released_at=NOW - 7200, expires_at=NOW - 3600)

    result = run(snapshot(tasks=[pending_task("t1", ALICE_N1)], volumes=[expired]))

    assert [d.volume_id for d in actions_of(result, DeleteVolume)] == ["vol-a"]
    assert only(result, Launch).volume_id is None


# -- a returning owner's launch ----------------------------------------------------------------------------


LONGER = CachePolicy(enabled=True, ttl_s=7200, size_gib=20, volume_type="gp3")


def test_a_launch_with_the_volume_retags_its_ttl_from_the_owners_cache_policy_even_beside_cache_off_work() -> None:
    """The owner's current policy decides how long the volume is kept once they leave again; their cache-off
    task on the same machine (sorted first) has no say in it."""
    kept = volume("vol-a", ttl_s=3600)
    plain = pending_task("t-a", ALICE_N1, cpus=1.0)
    cached = cached_task("t-b", cache=LONGER, cpus=0.5)

    result = run(snapshot(tasks=[plain, cached], volumes=[kept]))

    launch = only(result, Launch)
    assert (launch.task_ids, launch.volume_id) == (("t-a", "t-b"), "vol-a")
    assert volume_tagging(result) == [
        SetVolumeTtl("vol-a", 7200, "the owner's cache policy now keeps it 7200 s after release")
    ]


def test_a_launch_with_the_volume_of_an_unchanged_policy_retags_nothing_but_its_release() -> None:
    released = volume("vol-a", ttl_s=3600, released_at=NOW - 60, expires_at=NOW + 3540)

    result = run(snapshot(tasks=[cached_task("t1")], volumes=[released]))

    assert only(result, Launch).volume_id == "vol-a"
    assert volume_tagging(result) == [RenewVolume("vol-a", "its owner is back: vol-a no longer expires")]


# -- what the plan answers ---------------------------------------------------------------------------------


def _rich_snapshot_plan() -> tuple[Plan, Plan]:
    alice_i = instance("i-01", ALICE)
    bob_i = instance("i-02", BOB, state="pending")
    late_i = instance("i-03", NOBODY, launched_at=NOW - 3600)
    idle_i = instance("i-04", Owner(user_id="dave"), instance_type="m5.large")
    new_i = instance("i-05", Owner(user_id="erin"), zone=ZONE_B)
    nodes = [
        node_of(alice_i),
        node_of(idle_i),
        node_of(new_i, labelled=False),
        foreign_node("mgr", role="manager"),
    ]
    tasks = [
        running_task("r1", nodes[0], ALICE, cpus=1.5),
        pending_task("t1", ALICE),
        pending_task("t2", BOB),
        pending_task("t3", Owner(user_id="carol"), cpus=3.0),
        pending_task("t4", NOBODY, gpus=1),
        pending_task("t5", NOBODY, cpus=512.0),
    ]
    snap = snapshot(
        nodes=nodes,
        tasks=tasks,
        instances=[alice_i, bob_i, late_i, idle_i, new_i],
        idle_since={nodes[1].id: NOW - 1000},
        unavailable={("t3.medium", ZONE_A): NOW + 100, ("m5.large", ZONE_B): NOW - 1},
    )
    return run(snap), run(snap)


def test_every_task_the_scheduler_gave_up_on_is_reported_exactly_once() -> None:
    alice_i = instance("i-01", ALICE)
    tasks = [
        pending_task("fits", ALICE, cpus=0.5),
        pending_task("launch", BOB),
        pending_task("huge", Owner(user_id="carol"), cpus=512.0),
        pending_task("limit", Owner(user_id="dave")),
        pending_task("bad", constraints=["node.labels.node_id==x y"]),
        pending_task("quiet", ALICE, err=""),
    ]
    result = run(
        snapshot(nodes=[node_of(alice_i)], instances=[alice_i], tasks=tasks), make_policy(max_launches_per_cycle=1)
    )
    assert sorted(w.task_id for w in result.waiting) == ["bad", "fits", "huge", "launch", "limit"]


def test_the_clock_ahead_notice_comes_after_the_others() -> None:
    mine = instance("i-21", ALICE)
    node = node_of(mine)
    stray = running_task("stray.1", node)  # nobody's task on alice's node: a notice of its own
    snap = dataclasses.replace(snapshot(nodes=[node], instances=[mine], tasks=[stray]), aws_now=NOW - 600)

    notices = run(snap, make_policy(max_clock_skew_s=60.0)).notices

    assert len(notices) == 2
    assert notices[0].startswith("task stray.1 of service service-stray.1 runs on node")
    assert notices[1].startswith("this replica's clock is 600 s ahead of AWS's")


def test_in_flight_lists_the_live_machines_whose_nodes_have_not_joined_in_snapshot_order() -> None:
    joined = instance("i-1", ALICE)
    booting = instance("i-3", BOB, state="pending", launched_at=NOW - 10)
    running_not_joined = instance("i-2", ALICE, launched_at=NOW - 20)
    stopped = instance("i-4", BOB, state="stopped")
    gone = instance("i-5", BOB, state="shutting-down")

    result = run(snapshot(nodes=[node_of(joined)], instances=[joined, booting, running_not_joined, stopped, gone]))

    assert result.in_flight == ("i-3", "i-2")


def test_plan_is_deterministic() -> None:
    first, second = _rich_snapshot_plan()
    assert first == second
    # The snapshot exercises every kind of decision, so equality is not vacuous.
    kinds = {type(a).__name__ for a in first.actions}
    assert kinds >= {"LaunchBatch", "LabelNode", "Drain", "Terminate"}
    assert first.waiting
