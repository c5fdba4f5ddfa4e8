"""The warm tier (plan/tiers.py): an idle owner's machine stopped instead of terminated, resumed for its owner
only, and terminated once no tier keeps it; what each of these says."""

from __future__ import annotations

from dataclasses import replace

import pytest
from warmswarm_autoscaling.actions import Launch, LaunchBatch, RemoveNode, Start, Stop, Terminate
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.snapshot import Instance
from warmswarm_models import INSTANCE_WARM_TTL_TAG, INSTANCE_WARM_UNTIL_TAG, Owner, format_timestamp

from .factories import (
    ALICE,
    ALICE_N1,
    BOB,
    BUFFERED,
    GRACE_S,
    NOW,
    WARM_S,
    WARM_TAGS,
    ZONE_A,
    actions_of,
    buffer_machine,
    cached_task,
    instance,
    make_policy,
    next_snapshot,
    node_of,
    only,
    pending_task,
    run,
    snapshot,
    waiting_for,
    warm_machine,
)


def warm(instance_id: str, owner: Owner, until: float, *, state: str = "stopped") -> Instance:
    """A machine we stopped for its owner's warm tier, kept until `until`."""
    return instance(instance_id, owner, state=state, tags={INSTANCE_WARM_UNTIL_TAG: format_timestamp(until)})


# -- stopping an idle machine, or not ----------------------------------------------------------------------


IDLE = "node ip-10-0-0-01 is drained and idle for 300 s"


def idle_machine(warm_ttl_s: int, *, volume_id: str | None = None, state: str = "running") -> Instance:
    """Alice's machine, launched with the warm tier `warm_ttl_s` (0: none)."""
    tags = {INSTANCE_WARM_TTL_TAG: str(warm_ttl_s)} if warm_ttl_s else {}
    return instance("i-01", ALICE_N1, state=state, tags=tags, volume_id=volume_id)


def test_drained_idle_machine_with_a_warm_tier_is_stopped_until_now_plus_its_warm_ttl() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    stop = only(result, Stop)
    assert (stop.instance_id, stop.warm_until) == ("i-01", NOW + WARM_S)
    assert actions_of(result, Terminate) == []
    assert "kept warm" in stop.reason
    assert format_timestamp(NOW + WARM_S) in stop.reason


def test_before_its_grace_ends_a_warm_tier_machine_is_neither_stopped_nor_terminated() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S + 1}))
    assert actions_of(result, Stop) == []
    assert actions_of(result, Terminate) == []


def test_without_a_warm_tier_the_idle_machine_is_terminated_as_before() -> None:
    machine = instance("i-01", ALICE_N1)
    node = node_of(machine, availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}))
    assert only(result, Terminate).cause == "idle"
    assert actions_of(result, Stop) == []


def test_past_max_stopped_instances_an_idle_machine_is_terminated_and_says_why() -> None:
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    other = instance("i-02", BOB, state="stopped", tags=WARM_TAGS)
    world = snapshot(nodes=[node], instances=[machine, other], idle_since={node.id: NOW - GRACE_S})
    full = run(world, make_policy(max_stopped_instances=1))
    assert only(full, Terminate).instance_id == "i-01"
    assert "max_stopped_instances=1" in only(full, Terminate).reason
    assert only(run(world, make_policy(max_stopped_instances=2)), Stop).instance_id == "i-01"


def test_two_idle_machines_and_room_for_one_more_stopped_one_stop_one_terminates() -> None:
    first = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    second = instance("i-02", BOB, tags=WARM_TAGS)
    nodes = [node_of(first, availability="drain"), node_of(second, availability="drain")]
    idle = {n.id: NOW - GRACE_S for n in nodes}
    result = run(
        snapshot(nodes=nodes, instances=[first, second], idle_since=idle), make_policy(max_stopped_instances=1)
    )
    assert len(actions_of(result, Stop)) == 1
    assert len(actions_of(result, Terminate)) == 1


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


# -- resuming a warm machine for its owner -----------------------------------------------------------------


def test_owners_pending_work_starts_the_warm_machine_and_launches_nothing() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert only(result, Start).instance_id == "i-01"
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []
    assert "resuming your machine i-01" in waiting_for(result, "t1").reason


def test_a_warm_machine_its_owner_s_new_work_does_not_fit_is_terminated_so_a_bigger_one_gets_the_volume() -> None:
    """Alice comes back asking for 3 CPUs; her warm t3.medium (2 vCPUs) cannot be it. Kept, it would hold her volume
    until its warm-until and her session would wait as long (found by the simulator's bigger returns)."""
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1, cpus=3.0, memory_gib=12.0)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert actions_of(result, Start) == []
    done = only(result, Terminate)
    assert (done.instance_id, done.cause) == ("i-01", "outgrown")
    assert "its owner's new work does not fit it" in done.reason
    assert "its cache volume vol-1 is kept for its owner" in done.reason


def test_a_warm_machine_whose_node_still_shows_ready_is_resumed_not_outgrown() -> None:
    """Alice returns seconds after her machine stopped, before the swarm misses its node: it is her warm machine,
    resumed; work that fits never counts as having outgrown it."""
    machine = warm_machine()
    node = node_of(machine, state="ready", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[cached_task("t1", ALICE_N1)]))
    assert only(result, Start).instance_id == "i-01"
    assert actions_of(result, Terminate) == []
    assert actions_of(result, Launch) == []
    assert actions_of(result, LaunchBatch) == []


def test_a_warm_machine_with_two_registrations_is_one_machine_to_resume() -> None:
    """Two sessions of Alice, each filling her t3.medium, and her machine left two node registrations: one resumes
    it, the other launches (and, fitting the machine, outgrows nothing)."""
    machine = warm_machine()
    nodes = [node_of(machine, state="down", availability="drain"), node_of(machine, node_id="n-old", state="down")]
    tasks = [cached_task(f"t{n}", ALICE_N1, cpus=1.5, memory_gib=1.0) for n in (1, 2)]
    result = run(snapshot(nodes=nodes, instances=[machine], tasks=tasks))
    assert only(result, Start).instance_id == "i-01"
    assert actions_of(result, Terminate) == []


def test_a_warm_machine_is_kept_when_its_owner_s_other_work_resumes_it() -> None:
    """Two sessions of Alice: the small one resumes her warm machine, the big one launches; the machine stays."""
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    tasks = [cached_task("t1", ALICE_N1), pending_task("t2", ALICE_N1, cpus=3.0, memory_gib=12.0)]
    result = run(snapshot(nodes=[node], instances=[machine], tasks=tasks))
    assert only(result, Start).instance_id == "i-01"
    assert [t.cause for t in actions_of(result, Terminate)] == []


def test_another_owner_s_work_never_outgrows_a_warm_machine() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", BOB, cpus=3.0)]))
    assert actions_of(result, Terminate) == []


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


def test_a_stopping_warm_machine_is_waited_for_then_started_once_stopped() -> None:
    machine = warm_machine(state="stopping")
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert actions_of(result, Start) == []
    assert actions_of(result, Launch) == []
    assert "resuming your machine" in waiting_for(result, "t1").reason


def test_a_started_machine_whose_node_is_still_down_is_waited_for_not_replaced() -> None:
    machine = warm_machine(state="pending")
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[task]))
    assert actions_of(result, Start) == []
    assert actions_of(result, Launch) == []
    assert result.carried.down_since == {node.id: NOW}  # the start timeout runs from now on


def test_another_owners_work_never_takes_a_warm_machine() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], tasks=[pending_task("t1", BOB)]))
    assert actions_of(result, Start) == []
    assert only(result, LaunchBatch).launches[0].owner == BOB


def test_resuming_counts_against_max_instances() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    busy = instance("i-02", BOB)
    world = snapshot(nodes=[node, node_of(busy)], instances=[machine, busy], tasks=[cached_task("t1", ALICE_N1)])
    assert actions_of(run(world, make_policy(max_instances=1)), Start) == []
    assert only(run(world, make_policy(max_instances=2)), Start).instance_id == "i-01"


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


# -- stopped machines: kept while a tier holds them, then terminated ---------------------------------------


def test_a_warm_machine_keeps_its_down_node_and_its_volume_and_wakes_the_loop_when_it_expires() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine], down_since={node.id: NOW - 10_000}))
    assert result.actions == ()  # no RemoveNode, no Terminate, no volume released
    assert result.deadline == NOW + 1800
    assert node.id not in result.carried.down_since  # its down clock starts when it runs again


def test_a_warm_machine_past_its_warm_until_is_terminated_and_its_node_removed_after() -> None:
    machine = warm_machine(until=NOW)
    node = node_of(machine, state="down", availability="drain")
    result = run(snapshot(nodes=[node], instances=[machine]))
    terminate = only(result, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "warm_expired")
    assert "vol-1" in terminate.reason
    gone = replace(machine, state="shutting-down")
    assert only(run(snapshot(nodes=[node], instances=[gone])), RemoveNode).node_id == node.id


def test_a_warm_machine_whose_start_failed_is_terminated_and_not_started_again() -> None:
    machine = warm_machine()
    node = node_of(machine, state="down", availability="drain")
    task = cached_task("t1", ALICE_N1)
    world = snapshot(nodes=[node], instances=[machine], tasks=[task], failed_starts={"i-01"})
    result = run(world)
    assert actions_of(result, Start) == []
    terminate = only(result, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "start_failed")


def test_a_machine_stopped_by_someone_else_is_not_resumed_and_goes_after_max_start_s() -> None:
    stray = instance("i-01", ALICE_N1, state="stopped", tags=WARM_TAGS)  # no warm-until: not stopped by us
    node = node_of(stray, state="down", availability="drain")
    task = pending_task("t1", ALICE_N1)
    first = run(snapshot(nodes=[node], instances=[stray], tasks=[task]))
    assert actions_of(first, Start) == []
    assert first.carried.stopped_since == {"i-01": NOW}
    late = run(snapshot(nodes=[node], instances=[stray], stopped_since={"i-01": NOW - 600}))
    assert only(late, Terminate).cause == "stopped"


def test_a_machine_left_stopped_is_terminated_after_max_start_s_so_its_owners_volume_is_freed() -> None:
    """Stopped by someone else (no policy of ours keeps a stopped machine yet), it would hold the owner's cache
    volume, attached, forever while the owner's next session waited "still attached"."""
    policy = make_policy(max_start_s=600.0)
    stopped = instance("i-01", ALICE, state="stopped", volume_id="vol-1")
    node = node_of(stopped, state="down")

    first = run(snapshot(nodes=[node], instances=[stopped], now=NOW), policy)
    assert actions_of(first, Terminate) == []
    assert first.carried.stopped_since == {"i-01": NOW}
    assert first.deadline == NOW + 600.0  # the loop wakes for it

    before = run(next_snapshot(first, now=NOW + 599, nodes=[node], instances=[stopped]), policy)
    assert actions_of(before, Terminate) == []

    after = run(next_snapshot(before, now=NOW + 600, nodes=[node], instances=[stopped]), policy)
    [terminate] = actions_of(after, Terminate)
    assert (terminate.instance_id, terminate.cause) == ("i-01", "stopped")
    assert "vol-1 is kept" in terminate.reason

    # Started again in time (a resize), the clock is gone: a later stop waits its whole max_start_s again.
    running = instance("i-01", ALICE, volume_id="vol-1")
    back = run(next_snapshot(before, now=NOW + 600, nodes=[node_of(running)], instances=[running]), policy)
    assert actions_of(back, Terminate) == []
    assert back.carried.stopped_since == {}


def test_a_stopped_buffer_machine_is_kept_past_max_start_s_and_shows_as_buffer() -> None:
    kept = buffer_machine()
    node = node_of(kept, labelled=False, state="down")
    result = run(snapshot(nodes=[node], instances=[kept], stopped_since={"i-b1": NOW - 10_000}), BUFFERED)
    assert result.actions == ()
    assert tier_of(kept) == ("buffer", None)


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
    # Each machine we stopped keeps its node (down while it is stopped).
    down = [node_of(m, state="down") for m in machines[1:] if m.warm_until is not None]
    world = snapshot(
        nodes=[node_of(machines[0]), *down],
        instances=machines,
        stopped_since={"i-04": NOW - 10, "i-06": NOW - 600},
        failed_starts={"i-02"},
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


# -- the tiers as the status shows them --------------------------------------------------------------------


def test_tiers_as_the_status_shows_them() -> None:
    assert tier_of(instance("i-01", ALICE_N1)) == ("hot", None)
    assert tier_of(instance("i-01", ALICE_N1, state="pending")) == ("hot", None)
    assert tier_of(warm_machine()) == ("warm", NOW + 1800)
    assert tier_of(instance("i-01", ALICE_N1, state="stopped")) == ("cold", None)
    assert tier_of(instance("i-01", ALICE_N1, state="shutting-down")) == ("cold", None)


# -- trust under faults (issue 19) -------------------------------------------------------------------------


def test_a_clock_behind_or_ahead_of_aws_keeps_an_idle_warm_machine_running_rather_than_write_its_warm_until() -> None:
    """A warm-until written by a clock AWS disagrees with is wrong for the next leader (behaviour 1)."""
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    for skew_s in (-600.0, 600.0):
        world = replace(
            snapshot(nodes=[node], instances=[machine], idle_since={node.id: NOW - GRACE_S}), aws_now=NOW + skew_s
        )
        result = run(world)
        assert actions_of(result, Stop) == []
        assert actions_of(result, Terminate) == []


def test_a_warm_machine_whose_node_was_removed_is_terminated_and_its_volume_kept() -> None:
    """It could not come back as its owner's node: kept until its warm-until, it would hold the volume while the
    owner is told it is still detaching (behaviour 9)."""
    machine = warm_machine(until=NOW + 1800)

    result = run(snapshot(instances=[machine], tasks=[cached_task("t1")]))

    (end,) = actions_of(result, Terminate)
    assert (end.instance_id, end.cause, end.reason) == (
        "i-01",
        "node_down",
        "instance i-01 of user_id=alice,project_id=p1,node_id=n1 is stopped and no swarm node stands for it any more"
        " (its node was removed): it could not come back as its owner's node; terminated; its cache volume vol-1 is"
        " kept for its owner",
    )
    assert actions_of(result, Start) == []


def test_a_warm_until_beyond_any_warm_tier_is_not_trusted_the_machine_goes_and_is_never_resumed() -> None:
    """Trusted, a warm-until thirty days ahead would keep the machine and the volume for good (behaviour 10)."""
    far = warm_machine(until=NOW + 30 * 86_400)
    node = node_of(far, state="down")

    result = run(snapshot(nodes=[node], instances=[far], tasks=[cached_task("t1")]))

    (end,) = actions_of(result, Terminate)
    assert (end.instance_id, end.cause, end.reason) == (
        "i-01",
        "warm_expired",
        "instance i-01 of user_id=alice,project_id=p1,node_id=n1 is kept warm until"
        f" {format_timestamp(NOW + 30 * 86_400)}, further ahead than any warm tier allows (604800 s; a hand edit or"
        " a bad clock): not trusted, its warm tier is over; its cache volume vol-1 is kept for its owner",
    )
    assert actions_of(result, Start) == []
    # One at the bound (the longest tier, 7 days, plus the clock skew allowed) is still the owner's warm machine;
    # a second further is not.
    for until, resumed in ((NOW + 7 * 86_400 + 60, True), (NOW + 7 * 86_400 + 61, False)):
        near = warm_machine(until=until)
        world = snapshot(nodes=[node_of(near, state="down")], instances=[near], tasks=[cached_task("t1")])
        assert bool(actions_of(run(world), Start)) is resumed, until
    # At the bound with no work, it is kept stopped: neither resumed nor given up.
    edge = warm_machine(until=NOW + 7 * 86_400 + 60)
    kept = run(snapshot(nodes=[node_of(edge, state="down")], instances=[edge]))
    assert actions_of(kept, Terminate) == []


def test_every_stopped_machine_is_judged_whatever_became_of_the_one_before() -> None:
    """Removed, untrusted, expired: each terminated for its own cause, in the order they are listed."""
    removed = warm("i-01", ALICE, NOW + 900)
    untrusted = warm("i-02", BOB, NOW + 30 * 86_400)
    expired = warm("i-03", ALICE_N1, NOW - 1)
    nodes = [node_of(untrusted, state="down"), node_of(expired, state="down")]

    result = run(snapshot(nodes=nodes, instances=[removed, untrusted, expired]))

    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [
        ("i-01", "node_down"),
        ("i-02", "warm_expired"),
        ("i-03", "warm_expired"),
    ]


def test_a_warm_stop_counts_the_buffer_machines_still_booting_against_the_stopped_cap() -> None:
    """Each booting buffer machine is stopped once it joins: a warm stop that ignored them would take the cap past
    max_stopped_instances (behaviour 11)."""
    policy = make_policy(max_stopped_instances=2, warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
    stopped = warm("i-02", BOB, NOW + 900)
    booting = buffer_machine("i-b1", state="pending")
    machine = instance("i-01", ALICE_N1, tags=WARM_TAGS)
    node = node_of(machine, availability="drain")
    world = snapshot(
        nodes=[node, node_of(stopped, state="down")],
        instances=[machine, stopped, booting],
        idle_since={node.id: NOW - GRACE_S},
    )

    result = run(world, policy)

    assert actions_of(result, Stop) == []
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-01", "idle")]
    # With room for one more, the machine is stopped: a booting buffer machine takes one place, not two.
    roomier = run(world, replace(policy, max_stopped_instances=3))
    assert [stop.instance_id for stop in actions_of(roomier, Stop)] == ["i-01"]
