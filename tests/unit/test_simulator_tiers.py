"""The warm tier in the simulator: a stopped machine comes back as the same node with its labels, its drain and its
cache; the real autoscaler resumes an owner's machine for a return within warm_ttl_s (StartInstances, no launch) and
terminates it once the tier is over; a stopped machine is billed for its disks only."""

from __future__ import annotations

import asyncio

import pytest
from warmswarm_models import ENGINE_LABEL_CACHE_VOLUME, INSTANCE_VOLUME_TAG, GroupProperties, Owner
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import load_model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.platform import Placement, Platform
from warmswarm_simulator.policies import PolicySpec, load_policies, warmswarm_settings
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.workload import Session
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE_A = MODEL.availability_zones[0]
WARM_TTL_S = 1800
IDLE_GRACE_S = 60.0
FIRST_ARRIVAL_S = 8 * 3600.0
DURATION_S = 600.0
DATA_GB = 3.0


def _session(arrival_s: float) -> Session:
    return Session(arrival_s, "alice", "p1", "n1", 1.0, 2.0, 0, DURATION_S, "lab", DATA_GB)


def _run(return_gap_s: float, cache_ttl_s: int) -> RunResult:
    """alice works 10 minutes, closes, and comes back `return_gap_s` after her session was planned to end."""
    groups = {"lab": GroupProperties(ebs_cache_enabled=True, cache_ttl_s=cache_ttl_s, cache_size_gib=20)}
    spec = PolicySpec(
        "warm",
        "warmswarm",
        "a warm tier of half an hour",
        settings={"idle_grace_s": IDLE_GRACE_S},
        groups={"lab": {"warm_ttl_s": WARM_TTL_S}},
    )
    sessions = [_session(FIRST_ARRIVAL_S), _session(FIRST_ARRIVAL_S + DURATION_S + 300.0 + return_gap_s)]
    return run_policy(MODEL, spec, sessions, groups, max_instances=10)


def _unstopped_at(result: RunResult) -> list[float]:
    """When a stopped machine left "stopped" (started or terminated), day seconds, in order."""
    series = result.fleet_series
    return [t for (t, _, stopped), (_, _, before) in zip(series[1:], series, strict=False) if stopped < before]


def test_a_stopped_machine_comes_back_as_the_same_node_and_its_cache_is_a_hit() -> None:
    loop = VirtualLoop()
    world = World(loop, MODEL.day_epoch_s)
    cloud = Cloud(world, MODEL)
    swarm = Swarm(world, MODEL.swarm)
    machines = Machines(world, MODEL, cloud, swarm, join_availability="drain", device_wait_s=300.0)
    platform = Platform(world, swarm, cloud, placement=Placement.OWNER, groups={}, download_mb_per_s=60.0)

    def advance(seconds: float) -> None:
        loop.run_until_complete(asyncio.sleep(seconds))

    alice = Owner("alice", "p1", "n1")
    volume_id = cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="")
    (instance_id,) = cloud.run_instances("t3.medium", ZONE_A, 1, {INSTANCE_VOLUME_TAG: volume_id})
    advance(MODEL.ec2.pending_s + 0.1)
    cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    advance(MODEL.ec2.boot_to_join_s + MODEL.ebs.mount_s + 1)
    node_id = machines.node_of[instance_id]
    swarm.update_node(node_id, alice.labels(), None)  # what the autoscaler writes on the owner's node
    cloud.volumes.volumes[volume_id].data.add("alice/p1/n1")  # her first session downloaded it there

    cloud.stop_instances([instance_id])
    advance(MODEL.ec2.stop_s + 1)
    node = swarm.nodes[node_id]
    assert node.state == "down"  # kept in the swarm while stopped, with its labels
    assert node.labels == alice.labels()
    assert cloud.volumes.volumes[volume_id].state == "in-use"  # still attached

    platform.start([_session(world.now_s)])  # her return: what the autoscaler starts the machine for
    cloud.start_instances([instance_id])
    advance(MODEL.ec2.start_pending_s + MODEL.ec2.restart_boot_s + MODEL.ebs.mount_s + 1)
    assert list(swarm.nodes) == [node_id]  # the same node, not a second one
    node = swarm.nodes[node_id]
    assert node.state == "ready"
    assert node.availability == "drain"  # as it was: the autoscaler activates it for the owner's work
    assert node.labels == alice.labels()
    assert node.engine_labels[ENGINE_LABEL_CACHE_VOLUME] == volume_id  # mounted again by the per-boot unit

    swarm.update_node(node_id, None, "active")
    advance(MODEL.swarm.image_pull_s + MODEL.swarm.container_start_s + 1)
    (record,) = platform.records
    assert record.running_on == node_id
    assert record.hit is True
    assert record.resumed is True
    assert record.downloaded_gb == 0.0
    loop.close()


@pytest.fixture(scope="module")
def within_tier() -> RunResult:
    return _run(return_gap_s=600.0, cache_ttl_s=3600)


def test_a_return_within_warm_ttl_resumes_the_same_machine_and_it_is_terminated_after_the_tier(
    within_tier: RunResult,
) -> None:
    result = within_tier
    assert result.never_ran == 0
    assert result.calls("RunInstances") == 1  # no second launch
    assert result.machines_launched == 1
    assert result.calls("StartInstances") == 1
    assert result.machines_resumed == 1
    assert result.machines_stopped == 2  # after each session
    assert result.calls("TerminateInstances") == 1  # once, when its tier was over
    # The return ran on the resumed machine: no launch, boot or image pull, and its data in place.
    (resumed_wait_s,) = result.resumed_waits_s
    ec2 = MODEL.ec2
    assert resumed_wait_s < ec2.start_pending_s + ec2.restart_boot_s + 30.0
    assert resumed_wait_s < ec2.pending_s + ec2.boot_to_join_s  # less than a cold machine's boot alone
    assert (result.returns_within_ttl, result.hits_within_ttl) == (1, 1)
    assert result.downloaded_gb == pytest.approx(DATA_GB)
    # Terminated warm_ttl_s after its second stop (the second session's end + the idle grace), not before.
    waits = sorted(result.waits_s)
    second_end_s = FIRST_ARRIVAL_S + DURATION_S + 300.0 + 600.0 + resumed_wait_s + DURATION_S
    assert waits[0] == resumed_wait_s
    terminated_s = _unstopped_at(result)[-1]
    assert second_end_s + IDLE_GRACE_S + WARM_TTL_S <= terminated_s <= second_end_s + IDLE_GRACE_S + WARM_TTL_S + 120


def test_a_stopped_machine_is_billed_for_its_root_disk_not_compute(within_tier: RunResult) -> None:
    result = within_tier
    # Two stops: the gap before the return, then the whole tier after the second session.
    assert WARM_TTL_S / 3600 < result.stopped_hours < (WARM_TTL_S + 1200) / 3600
    root_usd_per_hour = MODEL.ec2.root_volume_gib * MODEL.prices.gp3_per_gb_month / MODEL.prices.hours_per_month
    assert result.stopped_root_usd == pytest.approx(result.stopped_hours * root_usd_per_hour)
    # Compute is billed for the two running periods only: far less than the hours the machine existed.
    assert result.bill.instance_hours < 2 * (DURATION_S + 600.0) / 3600
    assert result.peak_stopped == 1


def test_a_return_after_warm_ttl_launches_anew_and_the_warm_machine_expired_before() -> None:
    gap_s = WARM_TTL_S + 1800.0
    result = _run(return_gap_s=gap_s, cache_ttl_s=4 * 3600)
    assert result.never_ran == 0
    assert result.calls("StartInstances") == 0
    assert result.calls("RunInstances") == 2
    assert result.machines_resumed == 0
    assert result.machines_stopped == 2
    assert result.calls("TerminateInstances") == 2
    assert result.resumed_waits_s == ()
    # The first machine left "stopped" (warm_expired) before alice came back; her volume waited with its cache TTL.
    second_arrival_s = FIRST_ARRIVAL_S + DURATION_S + 300.0 + gap_s
    assert _unstopped_at(result)[0] < second_arrival_s
    assert (result.returns_within_ttl, result.hits_within_ttl) == (1, 1)


def test_the_warm_policy_carries_its_tier_to_the_groups_and_the_autoscaler() -> None:
    policies = load_policies()
    warm = [s for s in policies.specs if s.kind == "warmswarm" and s.groups]
    assert warm, "policies.toml has a policy with a warm tier"
    for spec in warm:
        groups = spec.group_properties({"lab": GroupProperties(ebs_cache_enabled=True)})
        assert groups["lab"].warm_ttl_s > 0
        policy = warmswarm_settings(spec, policies.max_instances, load_model().platform).policy()
        assert policy.max_stopped_instances == spec.settings.get("max_stopped_instances", 20)


def test_a_warm_run_gives_the_same_numbers_again(within_tier: RunResult) -> None:
    assert _run(return_gap_s=600.0, cache_ttl_s=3600) == within_tier
