"""The baseline's buffers, as osparc keeps them: a hot buffer of drained running machines with the session image
pre-pulled, kept at its size, claimed by a session that then runs without a pull, and refilled; a warm buffer of
stopped machines with the image on disk, claimed by StartInstances; buffers of size 0 change nothing."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator

import pytest
from warmswarm_models import Resources
from warmswarm_simulator.baseline import Baseline
from warmswarm_simulator.baseline_buffers import PRE_PULL_IMAGES
from warmswarm_simulator.baseline_rules import BaselineSettings, best_fit
from warmswarm_simulator.billing import BUFFER_MEMBER_TAG
from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import GIB, Model, Outage, load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.machines import OSPARC_PRE_PULLED_IMAGES_TAG, OSPARC_WARM_BUFFER_TAG, Machines
from warmswarm_simulator.platform import SESSION_IMAGE, SESSION_LABEL, Placement, Platform, SessionRecord, session_key
from warmswarm_simulator.policies import PolicySpec, load_policies
from warmswarm_simulator.simports import SimEc2, SimSwarmPort
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.workload import Session
from warmswarm_simulator.world import World

MODEL = load_model()
TYPE = "t3.medium"
CPUS = 0.5  # fits a t3.medium's room (2 vCPUs - 1.4): the type a cold launch picks too
MEMORY_GIB = 1.0
DATA_GB = 0.6
ARRIVAL_S = 2 * 3600.0  # long after the buffers are ready, far from the model's capacity outage
DURATION_S = 600.0
POLL_S = BaselineSettings().poll_interval_s
DOWNLOAD_S = DATA_GB * 1000.0 / MODEL.download_mb_per_s
COLD_S = MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + MODEL.swarm.image_pull_s  # a new machine, before the rest


def _session(arrival_s: float, user: str = "alice") -> Session:
    return Session(arrival_s, user, "p1", "n1", CPUS, MEMORY_GIB, 0, DURATION_S, "lab", DATA_GB)


@dataclasses.dataclass
class Rig:
    """The baseline wired as the engine wires it, on a world the test advances and looks into."""

    loop: VirtualLoop
    world: World
    cloud: Cloud
    swarm: Swarm
    machines: Machines
    platform: Platform
    ec2: SimEc2

    def advance_to(self, day_s: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(day_s - self.world.now_s))

    def live(self) -> list[str]:
        return [i.id for i in self.cloud.instances.values() if i.state in ("pending", "running")]

    def drained_nodes(self) -> list[str]:
        return [n.id for n in self.swarm.nodes.values() if n.state == "ready" and n.availability == "drain"]


@contextlib.contextmanager
def _rig(settings: BaselineSettings, model: Model = MODEL) -> Iterator[Rig]:
    loop = VirtualLoop()
    world = World(loop, model.day_epoch_s)
    cloud = Cloud(world, model)
    swarm = Swarm(world, model.swarm)
    ec2 = SimEc2(world, model, cloud, Throttle(model.throttling))
    port = SimSwarmPort(world, model, swarm)
    machines = Machines(
        world, model, cloud, swarm, join_availability="active", device_wait_s=0.0, buffer_images=PRE_PULL_IMAGES
    )
    platform = Platform(
        world, swarm, cloud, placement=Placement.SESSION, groups={}, download_mb_per_s=model.download_mb_per_s
    )
    baseline = Baseline(world, dict(model.instance_types), model.availability_zones, ec2, port, settings, 10)
    stop = asyncio.Event()
    running = loop.create_task(baseline.run(stop))
    try:
        yield Rig(loop, world, cloud, swarm, machines, platform, ec2)
    finally:
        stop.set()
        running.cancel()
        loop.run_until_complete(asyncio.gather(running, return_exceptions=True))
        loop.close()


@pytest.fixture
def hot_rig() -> Iterator[Rig]:
    with _rig(BaselineSettings(hot_buffers={TYPE: 2})) as rig:
        yield rig


@pytest.fixture
def warm_rig() -> Iterator[Rig]:
    with _rig(BaselineSettings(warm_buffers={TYPE: 1})) as rig:
        yield rig


def _ran(record: SessionRecord) -> float:
    assert record.wait_s is not None, "the session never ran"
    return record.wait_s


def test_the_sessions_fit_the_buffer_type() -> None:
    # The tests' premise: a cold launch for these sessions is the buffer's type, so only the buffer differs.
    demand = Resources(CPUS, int(MEMORY_GIB * GIB))
    assert best_fit(demand, MODEL.instance_types.values(), BaselineSettings()) == TYPE


def test_a_hot_buffer_is_kept_at_its_size_drained_with_the_image_pulled(hot_rig: Rig) -> None:
    rig = hot_rig
    rig.advance_to(3600.0)
    buffer = rig.live()
    assert len(buffer) == 2
    assert {rig.cloud.instances[i].instance_type for i in buffer} == {TYPE}
    assert len(rig.drained_nodes()) == 2  # joined, then drained: no task goes there unasked
    for node_id in rig.drained_nodes():
        node = rig.swarm.nodes[node_id]
        assert SESSION_IMAGE in node.images  # pre-pulled: a task placed here skips the pull
        assert not node.pulls
    rig.advance_to(3 * 3600.0 - 60.0)
    assert rig.live() == buffer  # hours drained and empty, never terminated while they are the buffer
    assert rig.ec2.call_counts[("RunInstances", "ok")] == 1  # one batch, never relaunched
    assert rig.ec2.call_counts[("TerminateInstances", "ok")] == 0


def test_a_session_claims_a_hot_buffer_runs_without_a_pull_and_the_buffer_is_refilled(hot_rig: Rig) -> None:
    rig = hot_rig
    rig.advance_to(ARRIVAL_S - 60.0)
    buffer = set(rig.live())
    rig.platform.start([_session(ARRIVAL_S)])
    rig.advance_to(ARRIVAL_S + 120.0)
    (record,) = rig.platform.records
    wait_s = _ran(record)
    # A cycle to see the task and activate the node, the container's start, the data's download: no boot, no pull.
    assert wait_s <= 2 * POLL_S + MODEL.swarm.container_start_s + DOWNLOAD_S
    assert wait_s < COLD_S / 3
    assert record.running_on is not None
    node = rig.swarm.nodes[record.running_on]
    assert node.instance_id in buffer
    assert node.availability == "active"
    assert node.labels[SESSION_LABEL] == session_key(record.session)  # one machine per session
    # Refilled: a machine launched at the claim, joined, drained and pre-pulled, beside the other one left.
    rig.advance_to(ARRIVAL_S + COLD_S + 3 * POLL_S)
    assert rig.ec2.call_counts[("RunInstances", "ok")] == 2
    refill = set(rig.live()) - buffer
    assert len(refill) == 1
    drained = rig.drained_nodes()
    assert len(drained) == 2
    assert {rig.swarm.nodes[n].instance_id for n in drained} == (buffer - {node.instance_id}) | refill
    assert all(SESSION_IMAGE in rig.swarm.nodes[n].images for n in drained)


def test_the_meters_marks_cost_the_baseline_no_ec2_call(hot_rig: Rig) -> None:
    # osparc keeps no billing tag: the simulator's note of a buffer machine and of its claim is not a CreateTags
    # call, which would cost the baseline modelled time and a token inside its scale-up loop.
    rig = hot_rig
    rig.advance_to(ARRIVAL_S - 60.0)
    buffer = set(rig.live())
    assert all(rig.cloud.meter.in_buffer(i) for i in buffer)
    rig.platform.start([_session(ARRIVAL_S)])
    rig.advance_to(ARRIVAL_S + 120.0)

    (record,) = rig.platform.records
    assert record.running_on is not None
    claimed = rig.swarm.nodes[record.running_on].instance_id
    assert claimed in buffer
    assert rig.cloud.instances[claimed].tags[BUFFER_MEMBER_TAG] == "false"
    assert not rig.cloud.meter.in_buffer(claimed)  # billed as the session's from the claim on
    assert rig.ec2.call_counts[("CreateTags", "ok")] == 0


def test_a_warm_buffer_is_stopped_with_its_image_on_disk(warm_rig: Rig) -> None:
    rig = warm_rig
    rig.advance_to(3600.0)
    (instance,) = rig.cloud.instances.values()
    assert instance.state == "stopped"
    assert instance.tags[OSPARC_WARM_BUFFER_TAG] == "true"
    assert instance.tags[OSPARC_PRE_PULLED_IMAGES_TAG] == SESSION_IMAGE
    assert rig.machines.images_on_disk[instance.id] == PRE_PULL_IMAGES
    assert not rig.swarm.nodes  # pulled without joining the swarm
    assert (rig.cloud.buffer_stops, rig.cloud.stops) == (1, 0)  # stopped in the buffer, billed by its rule
    assert rig.live() == []  # no compute billed while it waits


def test_a_session_claims_the_warm_buffer_by_starting_it_and_runs_without_a_pull(warm_rig: Rig) -> None:
    rig = warm_rig
    rig.advance_to(ARRIVAL_S - 60.0)
    (warm,) = rig.cloud.instances.values()
    rig.platform.start([_session(ARRIVAL_S)])
    rig.advance_to(ARRIVAL_S + 300.0)
    (record,) = rig.platform.records
    wait_s = _ran(record)
    assert rig.cloud.starts == 1
    assert record.running_on is not None
    node = rig.swarm.nodes[record.running_on]
    assert node.instance_id == warm.id  # not a cold launch: the buffer machine, started (StartInstances)
    assert record.resumed is True
    assert node.labels[SESSION_LABEL] == session_key(record.session)
    assert warm.tags[OSPARC_WARM_BUFFER_TAG] == "false"  # activated: it never returns to the pool
    # StartInstances, a restart boot, a cycle each to start it and to label its node, the container, the download.
    ec2 = MODEL.ec2
    restart_s = ec2.start_pending_s + ec2.restart_boot_s
    assert wait_s <= restart_s + 2 * POLL_S + MODEL.swarm.container_start_s + DOWNLOAD_S + 5.0
    assert wait_s < restart_s + MODEL.swarm.image_pull_s  # the image was on its disk
    # The pool launched a replacement, which pulled and was stopped in its turn.
    rig.advance_to(ARRIVAL_S + COLD_S + 120.0)
    replacements = [i for i in rig.cloud.instances.values() if i.id != warm.id]
    assert [(i.state, i.tags[OSPARC_WARM_BUFFER_TAG]) for i in replacements] == [("stopped", "true")]


def test_a_session_takes_the_hot_buffer_before_the_warm_one_which_then_refills_the_hot_buffer() -> None:
    with _rig(BaselineSettings(hot_buffers={TYPE: 1}, warm_buffers={TYPE: 1})) as rig:
        rig.advance_to(ARRIVAL_S - 60.0)
        (hot_node,) = rig.drained_nodes()
        (warm,) = [i for i in rig.cloud.instances.values() if i.state == "stopped"]
        rig.platform.start([_session(ARRIVAL_S)])
        rig.advance_to(ARRIVAL_S + 120.0)
        (record,) = rig.platform.records
        assert record.running_on == hot_node  # first fit: hot-buffer nodes before stopped warm buffers
        # osparc's _try_start_warm_buffer_instances: the hot buffer's gap is filled from the warm pool, no launch.
        assert rig.cloud.starts == 1
        assert warm.state == "running"
        rig.advance_to(ARRIVAL_S + COLD_S + 120.0)
        (refill,) = rig.drained_nodes()
        assert rig.swarm.nodes[refill].instance_id == warm.id
        assert SESSION_IMAGE in rig.swarm.nodes[refill].images  # from its disk
        # The hot buffer's first machine, the pool's first and its replacement: nothing launched cold.
        assert rig.ec2.call_counts[("RunInstances", "ok")] == 3


def test_a_warm_buffer_refused_for_capacity_sends_its_session_to_a_new_machine() -> None:
    zone = MODEL.availability_zones[0]  # where the pool launches its machine
    outage = Outage((TYPE,), zone, ARRIVAL_S - 30.0, ARRIVAL_S + 3600.0)
    with _rig(BaselineSettings(warm_buffers={TYPE: 1}), dataclasses.replace(MODEL, outages=(outage,))) as rig:
        rig.advance_to(ARRIVAL_S - 60.0)
        (warm,) = rig.cloud.instances.values()
        assert warm.availability_zone == zone
        rig.platform.start([_session(ARRIVAL_S)])
        rig.advance_to(ARRIVAL_S + COLD_S + 120.0)
        (record,) = rig.platform.records
        _ran(record)
        assert rig.ec2.call_counts[("StartInstances", "InsufficientInstanceCapacity")] >= 1
        assert warm.state == "stopped"  # still the pool's
        assert record.running_on is not None
        assert rig.swarm.nodes[record.running_on].instance_id != warm.id
        assert rig.cloud.instances[rig.swarm.nodes[record.running_on].instance_id].availability_zone != zone


# -- through the engine ------------------------------------------------------------------------------------------

SPEC = small_day(day_spec(MODEL.raw_day))
SMALL_DAY = generate_day(SPEC, seed=7)
POLICIES = load_policies()


def _baseline(name: str, **settings: object) -> PolicySpec:
    base = POLICIES.named("baseline")
    return dataclasses.replace(base, name=name, settings={**base.settings, **settings})


def test_buffers_of_size_zero_change_nothing() -> None:
    plain = run_policy(MODEL, _baseline("b"), SMALL_DAY, SPEC.groups, POLICIES.max_instances)
    zero = _baseline("b", hot_buffers={TYPE: 0, "c5.xlarge": 0}, warm_buffers={TYPE: 0})
    assert run_policy(MODEL, zero, SMALL_DAY, SPEC.groups, POLICIES.max_instances) == plain


def test_through_the_engine_a_hot_buffer_serves_sessions_and_the_world_still_ends_empty() -> None:
    sessions = [_session(ARRIVAL_S), _session(ARRIVAL_S + 300.0, "bob")]
    plain = run_policy(MODEL, _baseline("plain"), sessions, {}, 10)
    spec = _baseline("hot", hot_buffers={TYPE: 2})
    hot = run_policy(MODEL, spec, sessions, {}, 10)
    assert hot.never_ran == plain.never_ran == 0
    assert min(plain.waits_s) > COLD_S
    assert max(hot.waits_s) < COLD_S / 3
    # Kept from the day's start until the sessions and the day were over, then released: the world ended empty
    # soon after midnight, and the bill holds the buffer's hours (two machines over two hours before the first
    # session, at least).
    assert 86_400.0 <= hot.end_s < 86_400.0 + 3600.0
    assert hot.bill.instance_hours > 2 * ARRIVAL_S / 3600.0 > plain.bill.instance_hours
    assert run_policy(MODEL, spec, sessions, {}, 10) == hot  # the same inputs, the same numbers


def test_through_the_engine_a_warm_buffer_is_started_for_a_session() -> None:
    spec = _baseline("warm", warm_buffers={TYPE: 1})
    result = run_policy(MODEL, spec, [_session(ARRIVAL_S)], {}, 10)
    assert result.calls("StartInstances") == 1
    # The first buffer machine and its replacement, stopped in the buffer (the warm tier's stops stay 0).
    assert (result.buffer_stops, result.machines_stopped) == (2, 0)
    (wait_s,) = result.waits_s
    assert wait_s < MODEL.ec2.start_pending_s + MODEL.ec2.restart_boot_s + MODEL.swarm.image_pull_s


def test_the_buffers_policy_is_the_baseline_plus_a_hot_buffer() -> None:
    plain, buffers = POLICIES.named("baseline"), POLICIES.named("baseline-buffers")
    assert buffers.kind == "baseline"
    assert {k: v for k, v in buffers.settings.items() if k != "hot_buffers"} == plain.settings
    settings = BaselineSettings(**buffers.settings)
    assert settings.hot_buffers == {"t3.medium": 2, "t3.large": 1}
    assert settings.warm_buffers == {}


@pytest.mark.parametrize("buffers", [{"t9.huge": 1}, {TYPE: -1}])
def test_a_buffer_of_a_type_the_model_lacks_or_of_a_negative_size_is_refused(buffers: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="hot_buffers"):
        run_policy(MODEL, _baseline("typo", hot_buffers=buffers), [_session(ARRIVAL_S)], {}, 10)


def test_a_standing_hot_buffer_is_billed_for_the_day_s_24_hours_as_warmswarm_s_is() -> None:
    """One hot t3.medium from midnight on; a session claims it at ARRIVAL_S and its replacement stands until the
    run ends after midnight. The buffer's machine-hours are the day's 24 h: the claimed one's until its claim, the
    replacement's until midnight (then the next day's), not the whole run."""
    spec = _baseline("hot", hot_buffers={TYPE: 1})
    result = run_policy(MODEL, spec, [_session(ARRIVAL_S)], {}, 10)
    assert result.end_s >= 86_400.0, "the buffer stands the whole day"
    # A little over 24 h: the session's former node joins the buffer while the refill is still on its way.
    assert 23.5 <= result.bill.buffer_hours <= 24.5
    assert result.bill.buffer_usd <= 24.0 * MODEL.instance_types[TYPE].price_per_hour + 1.0  # and their disks
