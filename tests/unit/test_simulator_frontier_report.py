"""make simulate's instrument: each family's frontiers and warmswarm's equal-cost ratios from given runs, the
candidates' grids (past the old edges, buffers in the cluster's machines), the classes declared as reservations,
the run cache that lets a measuring run resume, and the baseline's meter marks that cost it nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from warmswarm_simulator import fair, fair_run, targets
from warmswarm_simulator.billing import BUFFER_MEMBER_TAG, Bill
from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.candidates import CANDIDATES, ZONES
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.engine import run_policy
from warmswarm_simulator.frontier_report import (
    Candidate,
    frontier_json,
    frontier_report,
    ratios,
    summarise,
)
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.phases import SessionPhases
from warmswarm_simulator.policies import PolicySpec, load_policies
from warmswarm_simulator.reserved import DayReservations, class_reservations
from warmswarm_simulator.results import RunResult
from warmswarm_simulator.runcache import RunCache
from warmswarm_simulator.simports import SimEc2
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

MODEL = load_model()
SPEC = small_day(day_spec(MODEL.raw_day))
POLICIES = load_policies()
KEYS = ("p50_s", "p95_s", "first_p50_s", "returns_p50_s")


def _candidate(family: str, name: str, cost_usd: float, p50_s: float, p95_s: float) -> Candidate:
    waits = dict(zip(KEYS, (p50_s, p95_s, p50_s + 10, p50_s - 10), strict=True))
    return Candidate(family, name, cost_usd, waits, 0)


FAMILIES = {
    "baseline": [
        _candidate("baseline", "fresh", 80.0, 240.0, 320.0),
        _candidate("baseline", "hot", 100.0, 60.0, 280.0),
        _candidate("baseline", "dear and slow", 110.0, 200.0, 330.0),  # beaten in both
    ],
    "warmswarm": [
        _candidate("warmswarm", "warm", 90.0, 100.0, 260.0),
        _candidate("warmswarm", "between", 105.0, 55.0, 255.0),  # past the baseline frontier, within its candidates
        _candidate("warmswarm", "too dear", 130.0, 50.0, 250.0),  # past the baseline's dearest: no ratio
        _candidate("warmswarm", "broken", 70.0, 10.0, 10.0),
    ],
}
FAMILIES["warmswarm"][3] = replace(FAMILIES["warmswarm"][3], never_ran=3)  # left sessions unrun: on no frontier


def test_the_ratio_divides_by_the_baseline_frontier_at_the_same_cost() -> None:
    rows = {(r.measure, r.point.policy): r for r in ratios(FAMILIES)}

    warm = rows[("p50_s", "warm")]
    assert warm.baseline_wait_s == pytest.approx(150.0)  # halfway from fresh (240 s) to hot (60 s)
    assert warm.ratio == pytest.approx(100.0 / 150.0)
    assert rows[("p95_s", "warm")].ratio == pytest.approx(260.0 / 300.0)
    assert rows[("p50_s", "too dear")].ratio is None
    between = rows[("p50_s", "between")]
    assert between.flat  # the baseline's best for $105 is its $100 frontier point: every dearer one it beats
    assert between.ratio == pytest.approx(55.0 / 60.0)
    assert not warm.flat
    assert all(r.point.policy != "broken" for r in rows.values())
    assert {m for m, _ in rows} == set(KEYS)


def test_the_report_holds_each_family_s_frontiers_and_the_ratios() -> None:
    text = frontier_report(FAMILIES, [2, 3])

    assert "### baseline" in text
    assert "### warmswarm" in text
    assert "Frontier, daily cost against wait p50:" in text
    assert "Frontier, daily cost against wait p95:" in text
    p50_frontier = text.split("Frontier, daily cost against wait p50:")[1].split("Frontier")[0]
    assert "| fresh | 80.00 | 240 |" in p50_frontier
    assert "| hot | 100.00 | 60 |" in p50_frontier
    assert "dear and slow |" not in p50_frontier
    assert "| warmswarm | warm | 90.00 | 100 | 150 | 0.67 |" in text
    assert "| warmswarm | too dear | 130.00 | 50 | – | – |" in text
    assert "| warmswarm | between | 105.00 | 55 | 60 (flat) | 0.92 |" in text
    assert "broken (3 sessions never ran)" in text


def test_the_json_holds_the_same_frontiers_and_ratios() -> None:
    data = frontier_json(FAMILIES, [2, 3])

    assert data["families"]["baseline"]["frontiers"]["p50_s"] == ["fresh", "hot"]
    assert data["families"]["warmswarm"]["frontiers"]["p95_s"] == ["warm", "between", "too dear"]
    warm = next(r for r in data["equal_cost_ratios"] if r["candidate"] == "warm" and r["measure"] == "p50_s")
    assert warm["ratio"] == pytest.approx(100.0 / 150.0)


def test_a_candidate_s_figures_are_its_means_over_the_seeds() -> None:
    run = _small_run(POLICIES.named("baseline"))
    dearer = replace(run, bill=Bill(run.bill.total_usd + 10.0, 1.0, {}, 0.0, 0.0, 0.0, 0.0))

    candidate = summarise("baseline", "fresh", [run, dearer])

    assert candidate.cost_usd == pytest.approx(run.bill.total_usd + 5.0)
    assert candidate.waits_s["p50_s"] == pytest.approx(run.wait_p50_s)


# -- the candidates -------------------------------------------------------------------------------------------------


def _values(family: str, knob: str) -> set[float]:
    return {c.settings[knob] for c in CANDIDATES[family] if knob in c.settings}


def test_the_baseline_s_knobs_are_tried_past_their_old_edges() -> None:
    """The drained wind-down's pick sat on 300 s, the highest tried; the poll and the empty-to-drain interval
    (both 10 s) were never varied."""
    assert max(_values("baseline", "drained_to_terminating_s")) > 300.0
    assert min(_values("baseline", "poll_interval_s")) < 10.0 < max(_values("baseline", "poll_interval_s"))
    assert min(_values("baseline", "empty_to_drain_s")) < 10.0 < max(_values("baseline", "empty_to_drain_s"))


def test_the_baseline_s_buffers_match_warmswarm_s_per_zone_sizes_times_the_zones() -> None:
    assert len(MODEL.availability_zones) == ZONES
    per_zone = {
        tuple(sorted(c.settings["hot_buffer"].items()))
        for family in ("warmswarm-hot", "warmswarm-hot-demand")
        for c in CANDIDATES[family]
    }
    baseline = {
        tuple(sorted(c.settings["hot_buffers"].items()))
        for c in CANDIDATES["baseline"]
        if c.settings.get("hot_buffers")
    }
    in_cluster = {tuple((t, n * ZONES) for t, n in sizes) for sizes in per_zone}
    assert in_cluster <= baseline
    for candidate in CANDIDATES["warmswarm-hot"]:
        medium = candidate.settings["hot_buffer"].get("t3.medium", 0)
        assert candidate.name.startswith(f"hot {medium * ZONES}")  # the name counts the cluster's machines


def test_only_warmswarm_declares_reservations_and_each_fair_policy_is_a_candidate() -> None:
    every = [c for candidates in CANDIDATES.values() for c in candidates]
    assert any(c.reserve_classes for c in every)
    assert all(c.kind == "warmswarm" for c in every if c.reserve_classes)
    names = [name for family, candidates in CANDIDATES.items() for name in {(family, c.name) for c in candidates}]
    assert len(names) == len(every)  # no two candidates of a family share a name
    picks = fair_run.former_picks(POLICIES, fair_run.keyed_candidates(CANDIDATES))
    assert set(picks) == set(fair.FAIR_POLICIES)


# -- the classes as reservations ------------------------------------------------------------------------------------


def test_the_class_is_declared_with_its_size_and_start_ahead_of_it() -> None:
    (booking,) = class_reservations(SPEC)
    profile = SPEC.profiles[SPEC.klass.profile]

    assert (booking.group, booking.sessions, booking.at_s) == (SPEC.klass.group, SPEC.klass.size, SPEC.klass.at_s)
    assert (booking.cpus, booking.memory_gib) == (profile.cpus, profile.memory_gib)
    (reservation,) = DayReservations([booking], MODEL.day_epoch_s).stored.values()
    assert reservation.created_at == MODEL.day_epoch_s < reservation.at == MODEL.day_epoch_s + SPEC.klass.at_s


def _small_run(spec: PolicySpec, reserved: bool = False) -> RunResult:
    bookings = class_reservations(SPEC) if reserved else ()
    return run_policy(MODEL, spec, generate_day(SPEC, 7), SPEC.groups, POLICIES.max_instances, bookings)


def test_a_policy_that_declares_the_classes_needs_them() -> None:
    reserved = next(c for c in CANDIDATES["warmswarm-reserved"] if c.name.startswith("grace 120 s"))
    with pytest.raises(ValueError, match="declares the day's classes"):
        _small_run(reserved)


def test_the_day_s_sessions_wait_less_when_its_class_is_reserved() -> None:
    """The class is most of the small day's first sessions: its machines, raised ahead of it, pull the median down."""
    reserved = next(c for c in CANDIDATES["warmswarm-reserved"] if c.name.startswith("grace 120 s"))
    plain = replace(reserved, reserve_classes=False)

    assert _small_run(reserved, reserved=True).wait_p50_s < _small_run(plain).wait_p50_s


# -- the cache ------------------------------------------------------------------------------------------------------


def test_a_run_in_the_cache_is_read_and_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = _small_run(POLICIES.named("baseline"))
    ran: list[str] = []

    def fake_run_jobs(model: object, jobs: Sequence[fair.Job], *rest: object) -> list[RunResult]:
        ran.extend(f"{j.seed}:{j.spec.name}" for j in jobs)
        return [replace(template, name=j.spec.name) for j in jobs]

    monkeypatch.setattr(fair, "run_jobs", fake_run_jobs)
    keyed = fair_run.keyed_candidates({"baseline": CANDIDATES["baseline"][:2]})
    cache = RunCache(tmp_path)

    def run() -> dict[tuple[int, str, str], RunResult]:
        return fair_run.run_candidates(MODEL, keyed, [2], lambda seed: [], SPEC.groups, 100, 1, (), cache)

    first = run()
    assert ran == ["2:fresh", "2:hot 3"]
    again = run()
    assert ran == ["2:fresh", "2:hot 3"]  # nothing run the second time
    assert again[(2, "baseline", "hot 3")].bill == first[(2, "baseline", "hot 3")].bill


# -- how sessions started, and the targets --------------------------------------------------------------------------


def test_a_session_s_start_path_is_read_from_its_launch_and_boot() -> None:
    def phases(launch_s: float, boot_s: float) -> SessionPhases:
        return SessionPhases(True, False, (launch_s, boot_s, 5.0, 0.0, 5.0, 20.0))

    assert targets.start_path(phases(0.0, 0.0)) == "on a running machine"
    assert targets.start_path(phases(4.0, 57.0)) == "short boot"
    assert targets.start_path(phases(2.0, 120.0)) == "cold launch"


def test_the_target_table_gives_the_mean_and_the_miss() -> None:
    run = _small_run(POLICIES.named("baseline"))
    waits = tuple(sorted([40.0] * 50 + [200.0] * 50))
    ours = replace(run, waits_s=waits, bill=Bill(110.0, 1.0, {}, 0.0, 0.0, 0.0, 0.0))
    reference = replace(run, bill=Bill(100.0, 1.0, {}, 0.0, 0.0, 0.0, 0.0))

    text = targets.target_table({"ours": [ours], "ref": [reference]}, ["ours"], "ref")

    assert f"| p50 ≤ 45 s | {ours.wait_p50_s:,.0f} s (" in text
    assert "| p95 ≤ 150 s | 200 s (200–200): **missed by 50 s** |" in text
    assert "| cost against the reference ≤ 1.1× ref | 1.10 × (1.10–1.10): **met** |" in text


def test_the_meter_s_mark_is_no_call_and_takes_no_time() -> None:
    """The baseline marks its buffer machines for the meter; that must cost it nothing a policy pays for."""
    loop = VirtualLoop()
    world = World(loop, MODEL.day_epoch_s)
    cloud = Cloud(world, MODEL)
    ec2 = SimEc2(world, MODEL, cloud, Throttle(MODEL.throttling))
    (instance_id,) = cloud.run_instances("t3.medium", MODEL.availability_zones[0], 1, {})
    before_s, calls = world.now_s, dict(ec2.call_counts)

    ec2.mark_for_meter(instance_id, buffer_member=True)  # synchronous: nothing to await, no clock to move

    assert cloud.instances[instance_id].tags[BUFFER_MEMBER_TAG] == "true"
    assert (world.now_s, dict(ec2.call_counts)) == (before_s, calls)
    loop.close()
