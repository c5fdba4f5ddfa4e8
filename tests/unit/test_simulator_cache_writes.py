"""The simulator's cache data: sessions write to their owner's volume, the node reports its fill in 5-point steps, a
full volume makes the writes wait until a grown size is usable, and small volumes that grow cost less on a day."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from dataclasses import replace

import pytest
from warmswarm_autoscaling.readings import cache_fill
from warmswarm_models import ENGINE_LABEL_CACHE_FILL, ENGINE_LABEL_CACHE_VOLUME, Resources
from warmswarm_simulator.cache_writes import (
    CacheWriter,
    capacity_gb,
    fill_label,
    fill_percent,
    seconds_to_next_step,
    write_rate_gb_per_h,
)
from warmswarm_simulator.candidates import CANDIDATES
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_volumes import MODIFICATION_TIMING
from warmswarm_simulator.config import DataWrites, load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.growth_report import cache_ratio, fixed_twin, growth_table
from warmswarm_simulator.policies import load_policies
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE = MODEL.availability_zones[0]
STEP = MODEL.writes.fill_step_percent


# -- the pure parts ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("share", "percent"),
    [(0.0, 0), (0.049, 0), (0.05, 5), (0.7999, 75), (0.8, 80), (0.9999, 95), (1.0, 100), (1.3, 100)],
)
def test_the_fill_is_rounded_down_to_a_step_and_100_only_when_full(share: float, percent: int) -> None:
    assert fill_percent(share * capacity_gb(20), 20, 5) == percent


def test_the_fill_label_reads_back_as_the_planner_reads_it() -> None:
    read, problem = cache_fill(fill_label("vol-0abc", fill_percent(0.85 * capacity_gb(8), 8, STEP)))
    assert problem == ""
    assert read is not None
    assert read.volume_id == "vol-0abc"
    assert read.used_percent == 85


def test_a_gib_holds_more_than_a_gb() -> None:
    # Data is counted in GB (the trace), volumes in GiB (EBS): 20 GiB hold 21.47 GB.
    assert capacity_gb(20) == pytest.approx(21.474836, rel=1e-6)


def test_the_next_step_comes_when_the_writes_reach_it() -> None:
    rate_gb_per_s = 0.001
    used_gb = 0.0
    wait_s = seconds_to_next_step(used_gb, rate_gb_per_s, 4, 5)
    assert wait_s == pytest.approx(0.05 * capacity_gb(4) / rate_gb_per_s)
    assert fill_percent(used_gb + rate_gb_per_s * wait_s, 4, 5) == 5
    # From 95 %, the next step is the full volume.
    almost = 0.96 * capacity_gb(4)
    assert seconds_to_next_step(almost, rate_gb_per_s, 4, 5) == pytest.approx(0.04 * capacity_gb(4) / rate_gb_per_s)
    assert math.isinf(seconds_to_next_step(0.0, 0.0, 4, 5))


def test_an_owner_writes_alike_under_every_policy_and_owners_differ() -> None:
    writes = DataWrites(0.3, 1.0, 4.0, 5)
    rates = {write_rate_gb_per_h(f"u{i}.p.n", 1.5, writes) for i in range(50)}
    assert write_rate_gb_per_h("u1.p.n", 1.5, writes) == write_rate_gb_per_h("u1.p.n", 1.5, writes)
    assert len(rates) == 50
    assert all(0.0 < r <= 4.0 for r in rates)
    assert write_rate_gb_per_h("u1.p.n", 1.5, replace(writes, write_gb_per_h_median=0.0)) == 0.0


def test_the_rates_mean_is_near_the_lognormal_mean_the_model_states() -> None:
    writes = MODEL.writes
    rates = [write_rate_gb_per_h(f"user{i}.p.n", 2.0, writes) for i in range(4000)]
    expected = writes.write_gb_per_h_median * math.exp(writes.write_gb_per_h_sigma**2 / 2)
    assert sum(rates) / len(rates) == pytest.approx(expected, rel=0.1)


# -- a volume, a node, a session writing --------------------------------------------------------------------------


class Sim:
    """A cloud and a swarm on a virtual clock, one running machine joined with its owner's volume mounted."""

    def __init__(self, size_gib: int, rate_gb_per_h: float) -> None:
        self.loop = VirtualLoop()
        self.world = World(self.loop, MODEL.day_epoch_s)
        self.cloud = Cloud(self.world, MODEL)
        self.swarm = Swarm(self.world, MODEL.swarm)
        # Every owner writes at exactly `rate_gb_per_h` (no spread, no cap below it).
        writes = DataWrites(rate_gb_per_h, 0.0, 0.0, 5)
        self.writer = CacheWriter(self.world, self.cloud.volumes, self.swarm, writes)
        (self.instance_id,) = self.cloud.run_instances("t3.medium", ZONE, 1, {})
        self.volume_id = self.cloud.volumes.create(ZONE, size_gib, "gp3", {}, token="")
        self.advance(MODEL.ec2.pending_s + MODEL.ebs.create_s)
        self.cloud.volumes.attach(self.volume_id, self.instance_id, "/dev/sdf")
        self.advance(MODEL.ebs.attach_s + 0.1)
        labels = {ENGINE_LABEL_CACHE_VOLUME: self.volume_id}
        self.node_id = self.swarm.join(self.instance_id, "10.0.0.1", Resources(2.0, 4 << 30), labels, "active")
        self.volume = self.cloud.volumes.volumes[self.volume_id]

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def reported(self) -> str | None:
        return self.swarm.nodes[self.node_id].engine_labels.get(ENGINE_LABEL_CACHE_FILL)


@pytest.fixture
def small() -> Iterator[Sim]:
    # 4 GiB (4.29 GB) written at 1.0737 GB/h: a 5 % step every 12 minutes, full after 4 hours.
    made = Sim(4, capacity_gb(4) / 4.0)
    yield made
    made.loop.close()


def test_a_running_session_fills_its_volume_and_the_node_reports_each_step(small: Sim) -> None:
    small.writer.start(0, "u.p.n", 0.0, small.node_id, small.volume)
    assert small.reported() == f"{small.volume_id}:0"
    small.advance(12 * 60 - 1)
    assert small.reported() == f"{small.volume_id}:0"
    small.advance(2)
    assert small.reported() == f"{small.volume_id}:5"
    small.advance(3 * 3600 + 3 * 60)  # 3 h 15 min in: 81.25 %
    assert small.reported() == f"{small.volume_id}:80"
    assert small.volume.used_gb == pytest.approx(capacity_gb(4) * 0.8, rel=0.01)
    assert small.writer.full_sessions == set()


def test_a_full_volume_makes_the_writes_wait_until_the_grown_size_is_usable(small: Sim) -> None:
    small.writer.start(7, "u.p.n", 0.0, small.node_id, small.volume)
    small.advance(4 * 3600 + 60)  # full a minute ago
    assert small.reported() == f"{small.volume_id}:100"
    assert small.writer.full_sessions == {7}
    small.cloud.volumes.modify(small.volume_id, 8)
    assert small.volume.size_gib == 8
    assert small.volume.usable_size_gib == 4
    small.advance(MODIFICATION_TIMING.modifying_s - 1)
    assert small.reported() == f"{small.volume_id}:100"
    small.advance(2)
    assert small.volume.usable_size_gib == 8
    assert small.reported() == f"{small.volume_id}:50"  # the same data, twice the room
    small.advance(15 * 60)
    small.writer.stop(7, small.volume_id)
    # It waited from the moment the volume was full until the new size was usable: 60 s + modifying_s.
    assert small.writer.full_s == pytest.approx(60.0 + MODIFICATION_TIMING.modifying_s, abs=1.0)
    assert small.volume.used_gb == pytest.approx(capacity_gb(4) * (1 + 15 / 240), rel=0.01)
    assert small.writer.owner_data_gb == {"u.p.n": pytest.approx(small.volume.used_gb)}


def test_a_session_that_ends_on_a_full_volume_counts_its_wait_to_its_end(small: Sim) -> None:
    small.writer.start(3, "u.p.n", 0.0, small.node_id, small.volume)
    small.advance(5 * 3600)
    small.writer.stop(3, small.volume_id)
    assert small.writer.full_s == pytest.approx(3600.0, abs=1.0)
    small.advance(3600)
    assert small.writer.full_s == pytest.approx(3600.0, abs=1.0)  # nobody writes once it ended


def test_a_download_larger_than_the_volume_fills_it_and_is_kept_once_it_has_room() -> None:
    sim = Sim(4, 0.0)
    try:
        sim.writer.downloaded(1, sim.volume, "u.p.n", 6.0)
        sim.writer.start(1, "u.p.n", 6.0, sim.node_id, sim.volume)
        assert sim.reported() == f"{sim.volume_id}:100"
        assert sim.writer.full_sessions == {1}
        assert "u.p.n" not in sim.volume.data  # not all of it is there: the next session would download it
        sim.cloud.volumes.modify(sim.volume_id, 8)
        sim.advance(MODIFICATION_TIMING.modifying_s + 1)
        assert sim.volume.used_gb == pytest.approx(6.0)
        assert "u.p.n" in sim.volume.data
        assert sim.reported() == f"{sim.volume_id}:{fill_percent(6.0, 8, 5)}"
    finally:
        sim.loop.close()


def test_a_download_that_fits_is_written_and_kept() -> None:
    sim = Sim(4, 0.0)
    try:
        sim.writer.downloaded(1, sim.volume, "u.p.n", 2.0)
        assert sim.volume.used_gb == pytest.approx(2.0)
        assert "u.p.n" in sim.volume.data
        assert sim.writer.full_sessions == set()
    finally:
        sim.loop.close()


# -- the candidates and the report ---------------------------------------------------------------------------------


def test_the_growing_candidates_start_small_and_may_grow_and_keep_their_twins_knobs() -> None:
    twin, *growing = CANDIDATES["warmswarm-grow-choice"]
    assert growing
    for spec in growing:
        assert fixed_twin(spec.name) == twin.name
        assert spec.settings == twin.settings
        for group in ("lab", "course", "compute"):
            size, limit = spec.groups[group]["cache_size_gib"], spec.groups[group]["cache_max_size_gib"]
            assert size < limit
            assert {k: v for k, v in spec.groups[group].items() if not k.startswith("cache_")} == twin.groups[group]
        assert "cache_size_gib" not in spec.groups["guests"]  # no cache: nothing to size


def test_the_growth_family_pairs_each_growing_candidate_with_its_fixed_twin() -> None:
    names = [c.name for c in CANDIDATES["warmswarm-grow"]]
    for name in names:
        assert fixed_twin(name) in names


@pytest.fixture(scope="module")
def small_day_runs() -> tuple[RunResult, RunResult]:
    """Today's fixed volumes and the smallest start on the small day, seed 2 (the test suite's day)."""
    spec = small_day(day_spec(MODEL.raw_day))
    sessions = generate_day(spec, 2)
    max_instances = load_policies().max_instances
    fixed, smallest = CANDIDATES["warmswarm-grow-choice"][0], CANDIDATES["warmswarm-grow-choice"][1]
    return (
        run_policy(MODEL, fixed, sessions, spec.groups, max_instances),
        run_policy(MODEL, smallest, sessions, spec.groups, max_instances),
    )


def test_on_a_day_small_volumes_grow_and_cost_less_than_todays(small_day_runs: tuple[RunResult, RunResult]) -> None:
    fixed, smallest = small_day_runs
    assert fixed.volumes_grown == 0  # today's groups set no max: nothing grows
    assert smallest.volumes_grown > 0
    assert smallest.bill.cache_gb_months < 0.5 * fixed.bill.cache_gb_months
    assert smallest.never_ran == fixed.never_ran == 0
    assert cache_ratio([smallest], [fixed]) == [pytest.approx(smallest.bill.cache_usd / fixed.bill.cache_usd)]
    # Owners' data on their volumes: what they downloaded and wrote.
    assert fixed.owner_data_gb
    assert smallest.owner_data_gb
    table = growth_table({fixed.name: [fixed], smallest.name: [smallest]})
    assert smallest.name in table
    assert fixed.name in table
