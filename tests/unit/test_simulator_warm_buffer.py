"""The warm buffer in the simulator: a buffer machine pulls the session image before it joins and is stopped with
it on its disk; the real autoscaler claims one for an owner's first session (tags, attach, StartInstances), which
then runs with no launch and no pull; a standing buffer is billed for exactly the 24 h of the day."""

from __future__ import annotations

import asyncio

import pytest
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_CACHE_VOLUME,
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    GroupProperties,
    Owner,
)
from warmswarm_simulator.billing import DAY_S
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import load_model
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.platform import SESSION_IMAGE, Placement, Platform
from warmswarm_simulator.policies import PolicySpec, load_policies, warmswarm_settings
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.workload import Session
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE_A = MODEL.availability_zones[0]
ZONES = len(MODEL.availability_zones)
ARRIVAL_S = 8 * 3600.0
DURATION_S = 600.0
DATA_GB = 0.6  # a short download (10 s), so that the wait is the machine's
BUFFER = {"t3.medium": 1}


def _session(arrival_s: float = ARRIVAL_S, user: str = "alice") -> Session:
    return Session(arrival_s, user, "p1", "n1", 1.0, 2.0, 0, DURATION_S, "lab", DATA_GB)


def _run(warm_buffer: dict[str, int], sessions: list[Session] | None = None) -> RunResult:
    """By default alice's first session of the day (a notebook, with a cache kept an hour) at 08:00, with or
    without a warm buffer."""
    groups = {"lab": GroupProperties(ebs_cache_enabled=True, cache_ttl_s=3600, cache_size_gib=20)}
    settings: dict[str, object] = {"idle_grace_s": 60.0}
    if warm_buffer:
        settings |= {"warm_buffer": warm_buffer, "buffer_images": [SESSION_IMAGE]}
    spec = PolicySpec("buffer", "warmswarm", "a warm buffer", settings=settings)
    return run_policy(MODEL, spec, sessions or [_session()], groups, max_instances=10)


def test_a_buffer_machine_pulls_before_it_joins_and_a_claim_runs_a_session_with_no_pull() -> None:
    loop = VirtualLoop()
    world = World(loop, MODEL.day_epoch_s)
    cloud = Cloud(world, MODEL)
    swarm = Swarm(world, MODEL.swarm)
    machines = Machines(
        world, MODEL, cloud, swarm, join_availability="drain", device_wait_s=300.0, buffer_images=(SESSION_IMAGE,)
    )
    platform = Platform(world, swarm, cloud, placement=Placement.OWNER, groups={}, download_mb_per_s=60.0)

    def advance(seconds: float) -> None:
        loop.run_until_complete(asyncio.sleep(seconds))

    ec2, ebs = MODEL.ec2, MODEL.ebs
    (instance_id,) = cloud.run_instances(
        "t3.medium", ZONE_A, 1, {CLUSTER_TAG: "warmswarm", INSTANCE_BUFFER_TAG: "true"}
    )
    advance(ec2.pending_s + ec2.boot_to_join_s + 1)
    assert instance_id not in machines.node_of  # booted, still pulling: it joins only with the image on its disk
    advance(MODEL.swarm.image_pull_s)
    node_id = machines.node_of[instance_id]
    assert SESSION_IMAGE in swarm.nodes[node_id].images
    assert swarm.nodes[node_id].availability == "drain"  # nobody's work goes to it
    cloud.stop_instances([instance_id])
    advance(ec2.stop_s + 1)
    assert cloud.buffer_stops == 1
    assert cloud.stops == 0  # the buffer's stop, not the warm tier's

    # The claim, as apply.py makes it: the owner's tags with the volume's id, the attach to the stopped machine,
    # then StartInstances.
    alice = Owner("alice", "p1", "n1")
    volume_id = cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="")
    advance(ebs.create_s + 0.1)
    claimed_s = world.now_s
    cloud.tag_instance(instance_id, {**alice.labels(), INSTANCE_VOLUME_TAG: volume_id})
    cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    platform.start([_session(world.now_s)])
    cloud.start_instances([instance_id])
    advance(ec2.start_pending_s + ec2.restart_boot_s + ebs.mount_s + 1)
    assert list(swarm.nodes) == [node_id]  # the node that joined at the pull, back
    node = swarm.nodes[node_id]
    assert node.state == "ready"
    assert node.engine_labels[ENGINE_LABEL_CACHE_VOLUME] == volume_id  # the per-boot unit mounted her volume
    swarm.update_node(node_id, alice.labels(), "active")  # what the autoscaler writes on the owner's node
    advance(MODEL.swarm.container_start_s + MODEL.swarm.scheduler_delay_s + 0.5)  # a start, no pull
    (record,) = platform.records
    assert record.running_on == node_id
    assert (record.from_buffer, record.resumed) == (True, False)
    assert (cloud.buffer_starts, cloud.starts) == (1, 0)
    # Billed as the buffer's from its launch to the claim (within the day), as alice's from then on.
    bill = cloud.meter.bill(world.now_s)
    assert bill.buffer_hours == pytest.approx(claimed_s / 3600.0)
    loop.close()


@pytest.fixture(scope="module")
def cold() -> RunResult:
    return _run({})


@pytest.fixture(scope="module")
def buffered() -> RunResult:
    return _run(BUFFER)


def test_a_first_session_claims_a_buffer_machine_and_runs_much_sooner_than_a_cold_start(
    cold: RunResult, buffered: RunResult
) -> None:
    assert cold.never_ran == buffered.never_ran == 0
    assert cold.buffer_waits_s == ()
    (wait_s,) = buffered.waits_s
    assert buffered.buffer_waits_s == (wait_s,)
    assert buffered.buffer_first_sessions == 1
    assert buffered.first_waits_s == (wait_s,)
    # No launch for alice: every RunInstances was the buffer's (one per zone, and the refill behind her claim).
    assert buffered.calls("RunInstances") == buffered.machines_launched == ZONES + 1
    assert (buffered.buffer_stops, buffered.buffer_starts) == (ZONES + 1, 1)
    assert (buffered.machines_stopped, buffered.machines_resumed) == (0, 0)  # the warm tier did nothing
    # A restart boot with the image on disk: less than a cold machine's boot alone, and the cold start's pull saved.
    ec2 = MODEL.ec2
    (cold_wait_s,) = cold.waits_s
    assert wait_s < ec2.pending_s + ec2.boot_to_join_s
    assert wait_s < cold_wait_s - MODEL.swarm.image_pull_s
    assert wait_s < cold_wait_s / 2
    assert buffered.downloaded_gb == cold.downloaded_gb == pytest.approx(DATA_GB)  # a first session: no cache yet


def _buffer_usd_per_machine_hour() -> float:
    prices = MODEL.prices
    return MODEL.ec2.root_volume_gib * prices.gp3_per_gb_month / prices.hours_per_month


def test_a_standing_buffer_is_billed_the_day_though_the_run_ends_before_midnight(
    cold: RunResult, buffered: RunResult
) -> None:
    # Nothing of alice's is left once her volume's hour is over: the run ends with the buffer standing, stopped.
    assert buffered.end_s < DAY_S
    assert buffered.fleet_series[-1][1:] == (0, ZONES)
    # Its machines are billed until midnight all the same: ZONES machine-days, less the seconds before the first
    # launches and between alice's claim and the refill.
    assert ZONES * 24 - 0.05 < buffer_hours(buffered) <= ZONES * 24
    disk_usd = buffer_hours(buffered) * _buffer_usd_per_machine_hour()
    compute_usd = buffered.bill.buffer_usd - disk_usd
    boot_h = (MODEL.ec2.boot_to_join_s + MODEL.swarm.image_pull_s + 60.0) / 3600.0  # each boot and pull, at most
    assert 0 < compute_usd < (ZONES + 1) * boot_h * MODEL.price_per_hour["t3.medium"]
    assert buffered.stopped_hours < 0.01  # the buffer's stopped time is not the warm tier's (only the claim's seconds)
    assert buffered.bill.total_usd - cold.bill.total_usd == pytest.approx(buffered.bill.buffer_usd, abs=0.01)


def buffer_hours(result: RunResult) -> float:
    return result.bill.buffer_hours


def test_a_standing_buffer_is_billed_the_day_only_though_the_run_goes_past_midnight(buffered: RunResult) -> None:
    # bob's first session comes an hour after midnight: he claims a machine that stood in the buffer all day, and
    # the refill behind him is launched after midnight. Neither is the day's buffer bill any more: the claimed
    # machine's time after midnight is bob's, the refill's boot and disk the next day's.
    late = _run(BUFFER, [_session(), _session(DAY_S + 3600.0, "bob")])
    assert late.end_s > DAY_S + 3600.0
    assert late.buffer_first_sessions == 2
    assert late.calls("RunInstances") == ZONES + 2
    assert late.bill.buffer_hours == pytest.approx(buffered.bill.buffer_hours, abs=1e-6)
    assert late.bill.buffer_usd == pytest.approx(buffered.bill.buffer_usd, abs=1e-6)


def test_the_buffer_policy_is_the_warm_one_plus_a_buffer_the_autoscaler_accepts() -> None:
    policies = load_policies()
    warm, buffer = policies.named("warmswarm-warm"), policies.named("warmswarm-warm-buffer")
    assert buffer.groups == warm.groups
    extra = {k: v for k, v in buffer.settings.items() if k not in warm.settings}
    assert {k: v for k, v in buffer.settings.items() if k in warm.settings} == warm.settings
    assert set(extra) == {"warm_buffer", "buffer_images"}
    assert extra["buffer_images"] == [SESSION_IMAGE]  # the image the platform's sessions run
    settings = warmswarm_settings(buffer, policies.max_instances, load_model().platform)
    AutoscalingSettings.model_validate(settings.model_dump())  # within the settings' own bounds
    assert settings.policy().warm_buffer == extra["warm_buffer"]


def test_a_buffer_run_gives_the_same_numbers_again(buffered: RunResult) -> None:
    assert _run(BUFFER) == buffered
