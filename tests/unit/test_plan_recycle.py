"""plan/recycle.py: an idle owner's machine recycled for the buffers, stage by stage, within its bounds; never offered
before its scrub is proven, nor to an owner whose group does not accept recycled machines."""

from __future__ import annotations

import dataclasses
from typing import Final

from warmswarm_autoscaling.actions import (
    AttachVolume,
    ClaimBufferMachine,
    DetachVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    MarkScrubbed,
    RecycleMachine,
    Start,
    Stop,
    StripOwner,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.snapshot import Instance, Scrub
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLE_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    LAUNCH_REASON_TAG,
    CachePolicy,
)
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

from .factories import (
    ALICE_N1,
    BOB,
    GRACE_S,
    MAX_START_S,
    NOW,
    ZONE_A,
    ZONE_B,
    actions_of,
    attachment,
    instance,
    make_policy,
    node_of,
    pending_task,
    run,
    running_task,
    snapshot,
    volume,
)

RECYCLING: Final = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
HOT_RECYCLING: Final = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))
ACCEPTS: Final = CachePolicy(accept_recycled=True)
REFUSES: Final = CachePolicy(accept_recycled=False)
# The moment of the mark the machines below owe their scrub for, and its token (generation 1).
MARKED_AT: Final = int(NOW) - 600
TOKEN: Final = f"1.{MARKED_AT}"


def alices_machine(**changes: object) -> Instance:
    """Alice's machine, launched by her group that recycles, with her cache volume."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 3600)
    fields: dict[str, object] = {"recyclable": True, **changes}
    return dataclasses.replace(machine, **fields)  # type: ignore[arg-type]


def plan_idle(machine: Instance, policy: object = RECYCLING) -> Plan:
    """Alice's machine drained and idle past its grace, nothing else in the cluster."""
    node = node_of(machine, availability="drain")
    world = snapshot(instances=[machine], nodes=[node], idle_since={node.id: NOW - GRACE_S - 1})
    return run(world, policy)  # type: ignore[arg-type]


def on(result: Plan, instance_id: str) -> list[object]:
    return [a for a in result.actions if getattr(a, "instance_id", None) == instance_id]


# 1. The decision: recycled instead of terminated, where the group, the bounds and the buffers allow


def test_an_idle_machine_whose_group_recycles_is_marked_and_stopped_instead_of_terminated() -> None:
    result = plan_idle(alices_machine())

    [recycle] = on(result, "i-01")
    assert isinstance(recycle, RecycleMachine)
    assert (recycle.owner, recycle.generation, recycle.stop) == (ALICE_N1, 1, True)
    assert (recycle.marked_at, recycle.token) == (int(NOW), f"1.{int(NOW)}")
    assert "scrubbed on its next boot" in recycle.reason


def test_a_machine_whose_group_does_not_recycle_is_terminated_as_before() -> None:
    result = plan_idle(dataclasses.replace(alices_machine(), recyclable=False))

    assert [(a.instance_id, a.cause) for a in actions_of(result, Terminate)] == [("i-01", "idle")]
    assert not actions_of(result, RecycleMachine)


def test_without_a_buffer_place_for_it_the_machine_is_terminated_and_says_why() -> None:
    result = plan_idle(alices_machine(), make_policy(availability_zones=(ZONE_A,)))

    [terminate] = actions_of(result, Terminate)
    assert "not recycled: the buffers keep no more t3.medium in eu-west-1a" in terminate.reason


def test_the_leak_bounds_terminate_instead_and_name_the_bound() -> None:
    cases = {
        "other launch settings": alices_machine(launch_settings="0123456789abcdef"),
        "s old (recycle_max_age_s=": alices_machine(launched_at=NOW - 8 * 86_400),
        "owners (recycle_max_owners=20)": alices_machine(recycled=19),
    }
    for said, machine in cases.items():
        [terminate] = actions_of(plan_idle(machine), Terminate)
        assert said in terminate.reason, said


def test_a_second_recycle_counts_on_and_keeps_the_audit_of_earlier_owners() -> None:
    machine = alices_machine(recycled=2, scrub=Scrub(2, True, "2.1700000000"), served_owners=("bob/p1", "carol/p2"))
    [recycle] = actions_of(plan_idle(machine), RecycleMachine)

    assert (recycle.generation, recycle.earlier_owners) == (3, ("bob/p1", "carol/p2"))


def test_two_idle_machines_and_one_buffer_place_recycle_one() -> None:
    first = alices_machine()
    second = dataclasses.replace(alices_machine(), id="i-02", private_ip=instance("i-02").private_ip)
    nodes = [node_of(m, availability="drain") for m in (first, second)]
    world = snapshot(instances=[first, second], nodes=nodes, idle_since={n.id: NOW - GRACE_S - 1 for n in nodes})
    result = run(world, RECYCLING)

    assert [a.instance_id for a in actions_of(result, RecycleMachine)] == ["i-01"]
    assert [a.instance_id for a in actions_of(result, Terminate)] == ["i-02"]


def test_a_running_machine_is_not_recycled_past_the_stopped_cap() -> None:
    """Fault campaign seed 28: at max_stopped_instances=1 with a buffer machine stopped, an idle warm-tier machine
    was terminated for the cap, and recycling made that termination a stop: two stopped, one allowed."""
    capped = make_policy(warm_buffer={"t3.medium": 2}, availability_zones=(ZONE_A,), max_stopped_instances=1)
    parked = instance("i-09", state="stopped", tags={INSTANCE_BUFFER_TAG: "true"})
    machine = alices_machine(warm_ttl_s=1800)
    node = node_of(machine, availability="drain")
    world = snapshot(instances=[machine, parked], nodes=[node], idle_since={node.id: NOW - GRACE_S - 1})
    result = run(world, capped)

    assert not actions_of(result, RecycleMachine)
    [terminate] = on(result, "i-01")
    assert isinstance(terminate, Terminate)
    assert "not recycled: max_stopped_instances=1 machines are stopped already" in terminate.reason


def test_an_expired_warm_machine_is_recycled_without_a_second_stop() -> None:
    machine = alices_machine(state="stopped", warm_until=NOW - 1.0, warm_ttl_s=3600)
    node = node_of(machine, state="down")
    result = run(snapshot(instances=[machine], nodes=[node]), RECYCLING)

    [recycle] = on(result, "i-01")
    assert isinstance(recycle, RecycleMachine)
    assert recycle.stop is False


# 2. The stages: detached while stopped, stripped, started for the scrub, proven


def recycling(state: str, **changes: object) -> Instance:
    """Alice's machine after its RecycleMachine: it owes scrub 1."""
    return alices_machine(state=state, scrub=Scrub(1, False, TOKEN), recycled=1, **changes)


def test_a_recycling_machine_found_running_is_stopped_and_given_nothing() -> None:
    machine = recycling("running")
    result = run(snapshot(instances=[machine], nodes=[node_of(machine, availability="drain")]), RECYCLING)

    assert on(result, "i-01") == [
        Stop(
            "i-01",
            None,
            "recycling machine i-01 of " + str(ALICE_N1) + " is stopped before its owner's volume is detached",
        )
    ]


def test_a_recycling_machine_its_owners_work_came_back_to_is_neither_stopped_nor_terminated() -> None:
    """The property test's find: the mark landed, the stop did not, and Alice's session came back on the node before it
    was drained. Under her work nothing happens to the machine; once idle, its recycling goes on."""
    capped = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=0)
    machine = recycling("running")
    node = node_of(machine)
    working = snapshot(instances=[machine], nodes=[node], tasks=[running_task("t-1", node, ALICE_N1)])
    for policy in (RECYCLING, capped):  # the stop, and the terminate that replaces it past the stopped cap
        assert on(run(working, policy), "i-01") == []

    idle = snapshot(instances=[machine], nodes=[node])
    assert [type(a) for a in on(run(idle, RECYCLING), "i-01")] == [Stop]


def test_a_recycling_machine_found_running_with_the_stopped_cap_full_is_terminated_not_stopped() -> None:
    """Fault campaign seed 364: the mark's answer was lost, the stop came a plan later, in the plan that stopped a warm
    machine too: two stopped, max_stopped_instances=1. Recycling's stop takes the plan's one stop budget."""
    capped = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_stopped_instances=1)
    machine = recycling("running")
    parked = instance("i-09", state="stopped", tags={INSTANCE_BUFFER_TAG: "true"})
    world = snapshot(instances=[machine, parked], nodes=[node_of(machine, availability="drain")])
    result = run(world, capped)

    [terminate] = on(result, "i-01")
    assert isinstance(terminate, Terminate)
    assert "max_stopped_instances=1 machines are stopped already" in terminate.reason
    assert not actions_of(result, Stop)


def test_stopped_its_owners_volume_is_detached_and_never_attached_back() -> None:
    machine = recycling("stopped")
    attached = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-01")])
    world = snapshot(instances=[machine], nodes=[node_of(machine, state="down")], volumes=[attached])
    result = run(world, RECYCLING)

    [detach] = actions_of(result, DetachVolume)
    assert (detach.volume_id, detach.instance_id, detach.force) == ("vol-1", "i-01", False)
    assert not actions_of(result, StripOwner)
    assert not actions_of(result, Start)

    detached = volume("vol-1", ALICE_N1, state="available")
    after = run(snapshot(instances=[machine], nodes=[node_of(machine, state="down")], volumes=[detached]), RECYCLING)
    assert not actions_of(after, AttachVolume)
    [strip] = actions_of(after, StripOwner)
    assert (strip.node_ids, strip.hot) == (("node-i-01",), False)


def test_a_stripped_machine_joins_the_hot_buffer_where_the_hot_part_has_room() -> None:
    machine = recycling("stopped")
    result = run(snapshot(instances=[machine], nodes=[node_of(machine, state="down")]), HOT_RECYCLING)

    [strip] = actions_of(result, StripOwner)
    assert strip.hot is True


def test_a_recycling_machine_the_buffers_have_no_place_for_any_more_is_terminated_not_stripped() -> None:
    """Fault campaign seed 172: the hot part had room at the mark, was refilled by a launch before the strip, and the
    machine was stripped into a warm part of no place, then stopped there: a buffer machine the buffer does not hold."""
    machine = recycling("stopped")
    hot = dataclasses.replace(instance("i-09", tags={INSTANCE_BUFFER_TAG: "true"}), hot=True)
    nodes = [node_of(machine, state="down"), node_of(hot, labelled=False, availability="drain")]
    result = run(snapshot(instances=[machine, hot], nodes=nodes), HOT_RECYCLING)

    assert not actions_of(result, StripOwner)
    [terminate] = on(result, "i-01")
    assert isinstance(terminate, Terminate)
    assert "the buffers keep no more t3.medium" in terminate.reason


def test_the_refill_leaves_the_place_a_recycling_machine_took() -> None:
    """Fault campaign seed 1520: the refill launched for the warm place a machine being recycled had taken at its mark,
    and the strip put that machine there too: a stopped buffer machine beyond the warm buffer's one per zone."""
    machine = recycling("stopped")
    world = snapshot(instances=[machine], nodes=[node_of(machine, state="down")])
    result = run(world, RECYCLING)

    assert not [a for a in actions_of(result, Launch) if a.purpose == "buffer"]
    assert [a.instance_id for a in actions_of(result, DetachVolume) + actions_of(result, StripOwner)] == ["i-01"]


def stripped(state: str, **changes: object) -> Instance:
    """A recycled machine after its StripOwner: the buffer's, nobody's, its scrub 1 still owed."""
    machine = instance("i-01", tags={INSTANCE_BUFFER_TAG: "true"}, state=state, launched_at=NOW - 3600)
    fields: dict[str, object] = {"recycled": 1, "scrub": Scrub(1, False, TOKEN), **changes}
    return dataclasses.replace(machine, **fields)  # type: ignore[arg-type]


def test_stripped_and_stopped_it_is_started_for_its_scrub_boot() -> None:
    machine = stripped("stopped")
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(instances=[machine], nodes=[node]), RECYCLING)

    [start] = on(result, "i-01")
    assert isinstance(start, Start)
    assert start.started_at == NOW
    assert "scrub" in start.reason


def test_a_scrub_boot_refused_for_capacity_is_given_up_not_retried() -> None:
    """Fault campaign seed 24: AWS refused the scrub boot's StartInstances for capacity and the next plans started it
    again, cycle after cycle (start-retried); a refused start ends the machine, as it does a warm one's."""
    machine = stripped("stopped")
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(instances=[machine], nodes=[node], failed_starts=["i-01"]), RECYCLING)

    [terminate] = on(result, "i-01")
    assert isinstance(terminate, Terminate)
    assert terminate.cause == "start_failed"


def test_no_scrub_boot_starts_while_an_owners_work_launches() -> None:
    machine = stripped("stopped")
    node = node_of(machine, labelled=False, state="down")
    world = snapshot(instances=[machine], nodes=[node], tasks=[pending_task("t-b", BOB, cpus=3.0)])
    result = run(world, RECYCLING)

    assert any(isinstance(a, Launch | LaunchBatch) for a in result.actions)
    assert not on(result, "i-01")


def test_back_with_the_proof_of_its_token_it_is_marked_scrubbed_and_nothing_else() -> None:
    machine = stripped("running", started_at=NOW - 60)
    node = dataclasses.replace(node_of(machine, labelled=False), scrubbed=TOKEN)
    result = run(snapshot(instances=[machine], nodes=[node]), RECYCLING)

    assert on(result, "i-01") == [
        MarkScrubbed("i-01", TOKEN, f"recycled machine i-01's node proved scrub {TOKEN}: a buffer machine from now on")
    ]


# Proofs a node could show that are not of the token its machine owes (2.<MARKED_AT>): as the node's reader gives them.
STALE_PROOFS: Final = {
    "no proof": None,
    "an older generation's": f"1.{MARKED_AT - 86_400}",
    "an earlier mark of the same generation (the count set back)": f"2.{MARKED_AT - 3_600}",
    "a later generation's": f"3.{MARKED_AT}",
    "another moment of this generation": f"2.{MARKED_AT + 1}",
}


def test_back_with_any_other_proof_it_waits_its_start_timeout_then_goes() -> None:
    """Issue 42: a proof of 0, which the reader never gives, passed for 'an older generation', and a planner that took
    any proof passed. Every proof here is one a real node could show: only the exact token proves."""
    owed = {"recycled": 2, "scrub": Scrub(2, False, f"2.{MARKED_AT}")}
    for said, proof in STALE_PROOFS.items():
        waiting = stripped("running", started_at=NOW - 60, **owed)
        node = dataclasses.replace(node_of(waiting, labelled=False), scrubbed=proof)
        assert not on(run(snapshot(instances=[waiting], nodes=[node]), RECYCLING), "i-01"), said

        late = stripped("running", started_at=NOW - MAX_START_S - 1, **owed)
        [terminate] = on(run(snapshot(instances=[late], nodes=[node]), RECYCLING), "i-01")
        assert isinstance(terminate, Terminate), said
        assert terminate.cause == "scrub_unproven", said
        assert f"without the proof of scrub 2.{MARKED_AT} within" in terminate.reason, said


def test_a_legacy_pending_tag_is_never_proven_and_goes_at_its_start_timeout() -> None:
    """`pending-1` (before scrub tokens): the node script refuses it; no proof, not even a legacy label "1" or a token
    of generation 1, marks it scrubbed."""
    tags = {INSTANCE_BUFFER_TAG: "true", INSTANCE_RECYCLED_TAG: "1", INSTANCE_SCRUB_TAG: "pending-1"}
    for started_s, expected in ((60, []), (MAX_START_S + 1, ["scrub_unproven"])):
        legacy = dataclasses.replace(instance("i-01", tags=tags, launched_at=NOW - 3600), started_at=NOW - started_s)
        for label in ("1", TOKEN):
            node = node_of(legacy, labelled=False, scrubbed=label)
            result = run(snapshot(instances=[legacy], nodes=[node]), RECYCLING)
            assert not actions_of(result, MarkScrubbed), label
            ended = [a for a in on(result, "i-01") if isinstance(a, Terminate)]
            assert [a.cause for a in ended] == expected, label
            assert all("proof of scrub 1 (a tag no node can prove)" in a.reason for a in ended), label


def test_a_scrub_boot_whose_node_never_comes_back_goes_after_its_start_timeout() -> None:
    """A crashed scrub boot (the fault campaign's scrub kind): its node stays down, and the start timeout ends it."""
    node_state = "down"
    waiting = stripped("running", started_at=NOW - 60)
    node = node_of(waiting, labelled=False, state=node_state)
    assert not on(run(snapshot(instances=[waiting], nodes=[node]), RECYCLING), "i-01")

    crashed = stripped("running", started_at=NOW - MAX_START_S - 1)
    [terminate] = on(run(snapshot(instances=[crashed], nodes=[node]), RECYCLING), "i-01")
    assert isinstance(terminate, Terminate)
    assert terminate.cause == "start_timeout"


def test_a_scrub_boot_is_timed_from_its_start_not_from_the_launch_long_ago() -> None:
    machine = stripped("running", started_at=NOW - 60)  # launched an hour ago
    node = node_of(machine, labelled=False, state="down")
    result = run(snapshot(instances=[machine], nodes=[node]), RECYCLING)

    assert not actions_of(result, Terminate)


# 3. Never across the wrong line: claims


def warm_recycled(**changes: object) -> Instance:
    machine = instance("i-r1", tags={INSTANCE_BUFFER_TAG: "true"}, state="stopped")
    fields: dict[str, object] = {"recycled": 1, "scrub": Scrub(1, True), **changes}
    return dataclasses.replace(machine, **fields)  # type: ignore[arg-type]


def claims_for_bob(machine: Instance, cache: CachePolicy) -> list[ClaimBufferMachine]:
    node = node_of(machine, labelled=False, state="down")
    task = pending_task("t-b", BOB, service_labels=cache.to_labels())
    return actions_of(run(snapshot(instances=[machine], nodes=[node], tasks=[task]), RECYCLING), ClaimBufferMachine)


def test_a_scrubbed_recycled_machine_goes_only_to_an_owner_whose_groups_accept_one() -> None:
    assert [c.instance_id for c in claims_for_bob(warm_recycled(), ACCEPTS)] == ["i-r1"]
    assert claims_for_bob(warm_recycled(), REFUSES) == []


def test_a_machine_that_owes_its_scrub_is_never_claimed() -> None:
    assert claims_for_bob(warm_recycled(scrub=Scrub(1, False, TOKEN)), ACCEPTS) == []
    assert claims_for_bob(warm_recycled(scrub=Scrub(0, False)), ACCEPTS) == []  # an unreadable scrub tag


def test_a_hot_machine_that_owes_its_scrub_is_never_claimed_or_marked_on_a_stale_proof() -> None:
    """Not only where no proof was ever written: its ready node shows a proof of another token (an earlier mark's, left
    on the disk), and Bob waits. Nothing is claimed, labelled or marked until the node shows the very token owed."""
    tags = {
        INSTANCE_BUFFER_TAG: "true",
        INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT,
        INSTANCE_RECYCLED_TAG: "2",
        INSTANCE_SCRUB_TAG: f"pending-2.{MARKED_AT}",
    }
    owing = dataclasses.replace(instance("i-h1", tags=tags, launched_at=NOW - 3600), started_at=NOW - 60)
    task = pending_task("t-b", BOB, service_labels=CachePolicy(accept_recycled=True).to_labels())
    for said, proof in STALE_PROOFS.items():
        if proof is None:
            continue
        node = node_of(owing, labelled=False, availability="drain", scrubbed=proof)
        result = run(snapshot(instances=[owing], nodes=[node], tasks=[task]), HOT_RECYCLING)
        assert not [a for a in result.actions if isinstance(a, ClaimBufferMachine | MarkScrubbed | LabelNode)], said

    proven = node_of(owing, labelled=False, availability="drain", scrubbed=f"2.{MARKED_AT}")
    result = run(snapshot(instances=[owing], nodes=[proven], tasks=[task]), HOT_RECYCLING)
    assert [a.token for a in actions_of(result, MarkScrubbed)] == [f"2.{MARKED_AT}"]


def test_a_buffer_machine_launched_with_other_settings_is_never_claimed_and_goes() -> None:
    stale = warm_recycled(launch_settings="0123456789abcdef", recycled=0, scrub=None)
    assert claims_for_bob(stale, ACCEPTS) == []
    node = node_of(stale, labelled=False, state="down")
    result = run(snapshot(instances=[stale], nodes=[node]), RECYCLING)
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-r1", "stale")]


def test_a_stale_buffer_machine_that_never_joined_is_terminated_once_for_its_start_timeout() -> None:
    """The property test's find: stale and late, it was terminated twice in one plan (surplus and the start timeout).
    The start timeout's counts for the buffers' back-off."""
    tags = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT}
    booting = instance("i-r1", state="running", tags=tags, launched_at=NOW - MAX_START_S - 1)
    stale = dataclasses.replace(booting, launch_settings="0123456789abcdef")
    result = run(snapshot(instances=[stale]), HOT_RECYCLING)
    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-r1", "start_timeout")]


def test_a_recycled_buffer_machine_past_its_age_goes() -> None:
    old = warm_recycled(launched_at=NOW - 8 * 86_400)
    node = node_of(old, labelled=False, state="down")
    result = run(snapshot(instances=[old], nodes=[node]), RECYCLING)

    assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-r1", "stale")]


# 4. Returns take the fastest path: a hot machine, where the owner's group recycles their stopped one


def ada_returns(*, recyclable: bool = True, hot: Instance | None = None, accepts: bool = True) -> Plan:
    """Ada's machine stopped warm (her volume attached), her session back, and maybe a hot machine in her zone."""
    warm = alices_machine(state="stopped", warm_until=NOW + 1800, warm_ttl_s=3600, recyclable=recyclable)
    volume_on_it = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-01")])
    nodes = [node_of(warm, state="down")]
    instances = [warm]
    if hot is not None:
        instances.append(hot)
        nodes.append(node_of(hot, labelled=False, availability="drain"))
    labels = {**CachePolicy(enabled=True, accept_recycled=accepts, recycle_machines=True).to_labels()}
    task = pending_task("t-a", ALICE_N1, service_labels=labels)
    return run(snapshot(instances=instances, nodes=nodes, tasks=[task], volumes=[volume_on_it]), HOT_RECYCLING)


def hot_machine(**changes: object) -> Instance:
    machine = instance("i-h1", tags={INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT})
    return dataclasses.replace(machine, **changes)  # type: ignore[arg-type]


def test_a_return_goes_hot_and_its_stopped_machine_is_recycled_not_resumed() -> None:
    result = ada_returns(hot=hot_machine())

    [recycle] = on(result, "i-01")
    assert isinstance(recycle, RecycleMachine)
    assert recycle.stop is False
    assert "faster than their stopped machine i-01 resumes" in recycle.reason
    assert not actions_of(result, Start)


def test_without_a_hot_machine_or_without_recycling_the_return_resumes_its_own_machine() -> None:
    for result in (ada_returns(), ada_returns(recyclable=False, hot=hot_machine())):
        assert [a.instance_id for a in actions_of(result, Start)] == ["i-01"]
        assert not actions_of(result, RecycleMachine)


def test_a_return_that_refuses_recycled_machines_resumes_rather_than_take_a_recycled_hot_one() -> None:
    recycled_hot = hot_machine(recycled=1, scrub=Scrub(1, True))
    assert [a.instance_id for a in actions_of(ada_returns(hot=recycled_hot, accepts=False), Start)] == ["i-01"]
    assert [a.instance_id for a in actions_of(ada_returns(hot=recycled_hot, accepts=True), RecycleMachine)] == ["i-01"]


def test_once_her_volume_is_detached_the_return_claims_the_hot_machine_with_it() -> None:
    warm = recycling("stopped", warm_until=NOW + 1800, warm_ttl_s=3600)
    hot = hot_machine()
    nodes = [node_of(warm, state="down"), node_of(hot, labelled=False, availability="drain")]
    labels = CachePolicy(enabled=True, accept_recycled=True, recycle_machines=True).to_labels()
    task = pending_task("t-a", ALICE_N1, service_labels=labels)
    detached = volume("vol-1", ALICE_N1, state="available")
    result = run(snapshot(instances=[warm, hot], nodes=nodes, tasks=[task], volumes=[detached]), HOT_RECYCLING)

    [claim] = actions_of(result, ClaimBufferMachine)
    assert (claim.instance_id, claim.owner, claim.volume_id, claim.hot) == ("i-h1", ALICE_N1, "vol-1", True)
    assert [(a.volume_id, a.instance_id) for a in actions_of(result, AttachVolume)] == [("vol-1", "i-h1")]
    assert [a.instance_id for a in actions_of(result, StripOwner)] == ["i-01"]


def test_the_refill_launches_nothing_for_the_place_a_machine_being_recycled_will_take() -> None:
    """Found by the sandbox e2e: once the machine stopped for its recycle, the hot buffer's refill launched a new
    machine for the place it would take; the recycled one then had no place left (stripped into the warm buffer) and
    no room under max_instances for its scrub boot."""
    policy = make_policy(hot_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,), max_instances=1)
    stopping = recycling("stopped")
    attached = volume("vol-1", ALICE_N1, state="in-use", attached_to=[attachment("i-01")])
    detaching = run(snapshot(instances=[stopping], nodes=[node_of(stopping, state="down")], volumes=[attached]), policy)
    detached = run(snapshot(instances=[stopping], nodes=[node_of(stopping, state="down")]), policy)

    for result in (detaching, detached):
        assert not any(isinstance(a, Launch | LaunchBatch) for a in result.actions)
    [strip] = actions_of(detached, StripOwner)
    assert strip.hot is True
    [part] = [p for p in detached.buffers if p.hot]
    assert (part.target, part.held) == (1, 1)


# 5. A machine whose recycle count cannot be known served an unknown owner: treated as recycled, never recycled again

# Tags of a machine that served others whose count was lost, garbled or set back (as EC2 would hand them back).
UNKNOWN_COUNTS: Final = {
    "count lost, scrub proven": {INSTANCE_SCRUB_TAG: f"done-1.{MARKED_AT}"},
    "count lost, audit kept": {INSTANCE_SERVED_OWNERS_TAG: "carol/p2"},
    "count garbled": {INSTANCE_RECYCLED_TAG: "one", INSTANCE_SCRUB_TAG: f"done-1.{MARKED_AT}"},
    "count set back": {INSTANCE_RECYCLED_TAG: "1", INSTANCE_SCRUB_TAG: f"done-2.{MARKED_AT}"},
    "scrub tag lost": {INSTANCE_RECYCLED_TAG: "3"},
}


def test_an_owners_machine_of_unknown_count_is_terminated_not_recycled_and_says_why() -> None:
    """Issue 42: a lost count read as 0, and the machine was recycled again as generation 1 (its bounds skipped)."""
    for said, traces in UNKNOWN_COUNTS.items():
        machine = instance(
            "i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 3600, tags={INSTANCE_RECYCLE_TAG: "true", **traces}
        )
        result = plan_idle(machine)

        assert not actions_of(result, RecycleMachine), said
        [terminate] = on(result, "i-01")
        assert isinstance(terminate, Terminate), said
        assert "not recycled: its recycle count cannot be read" in terminate.reason, said


def test_a_buffer_machine_of_unknown_count_goes_to_no_refusing_owner_and_is_let_go() -> None:
    """Issue 42: a recycled buffer machine whose count was lost looked new, and a group that refuses recycled machines
    received it."""
    unknown = {**UNKNOWN_COUNTS, "stripped, count and scrub tag lost": {LAUNCH_REASON_TAG: LAUNCH_REASON_STRIPPED}}
    for said, traces in unknown.items():
        machine = instance("i-r1", tags={INSTANCE_BUFFER_TAG: "true", **traces}, state="stopped")
        assert claims_for_bob(machine, REFUSES) == [], said

        node = node_of(machine, labelled=False, state="down")
        result = run(snapshot(instances=[machine], nodes=[node]), RECYCLING)
        assert [(t.instance_id, t.cause) for t in actions_of(result, Terminate)] == [("i-r1", "stale")], said


def test_a_return_that_refuses_recycled_machines_never_takes_a_hot_one_of_unknown_count() -> None:
    tags = {INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT, INSTANCE_SERVED_OWNERS_TAG: "c/p"}
    unknown_hot = instance("i-h1", tags=tags)
    assert unknown_hot.recycled is None

    assert [a.instance_id for a in actions_of(ada_returns(hot=unknown_hot, accepts=False), Start)] == ["i-01"]
    assert not actions_of(ada_returns(hot=unknown_hot, accepts=False), ClaimBufferMachine)


def test_each_leak_bound_holds_at_its_edge_and_says_exactly_why() -> None:
    """plan/recycle.past_bounds at each edge, through a whole plan: the reason in the terminate is the bound's own."""
    week_s = 7 * 86_400  # recycle_max_age_s's default
    refused = {
        "it was launched with other launch settings (AMI, network, boot scripts) than today's": alices_machine(
            launch_settings="0123456789abcdef"
        ),
        f"it is {week_s} s old (recycle_max_age_s={week_s})": alices_machine(launched_at=NOW - week_s),
        "it has served 20 owners (recycle_max_owners=20)": alices_machine(recycled=19),
        "its type or zone is not one the autoscaler launches today": alices_machine(availability_zone=ZONE_B),
    }
    for said, machine in refused.items():
        [terminate] = actions_of(plan_idle(machine), Terminate)
        assert terminate.reason.endswith(f"; not recycled: {said}"), (said, terminate.reason)

    for within in (alices_machine(launched_at=NOW - week_s + 1), alices_machine(recycled=18)):
        [recycle] = actions_of(plan_idle(within), RecycleMachine)
        assert recycle.generation == within.recycled + 1  # type: ignore[operator]


def test_scrub_boots_skip_what_cannot_start_and_stay_within_max_instances() -> None:
    """Several stripped machines, sorted by id: one whose node is gone, one holding an attachment and one refused a
    start are each passed over (the next still gets its step), and the scrub boots take max_instances' room, no more."""
    policy = make_policy(warm_buffer={"t3.medium": 6}, availability_zones=(ZONE_A,), max_instances=2)
    machines = [
        dataclasses.replace(stripped("stopped"), id=f"i-0{n}", private_ip=instance(f"i-0{n}").private_ip)
        for n in range(1, 7)
    ]
    nodes = [node_of(m, labelled=False, state="down") for m in machines if m.id != "i-01"]  # i-01's node removed
    held = volume("vol-9", ALICE_N1, state="in-use", attached_to=[attachment("i-02")])
    world = snapshot(instances=machines, nodes=nodes, volumes=[held], failed_starts=["i-03"])
    result = run(world, policy)

    steps = {m.id: [type(a).__name__ for a in on(result, m.id) if isinstance(a, Start | Terminate)] for m in machines}
    assert steps == {
        "i-01": ["Terminate"],  # by refill.py: it could never come back
        "i-02": [],
        "i-03": ["Terminate"],
        "i-04": ["Start"],
        "i-05": ["Start"],
        "i-06": [],
    }
