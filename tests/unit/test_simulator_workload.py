"""The simulator's workloads: the trace CSV reads back what was written, and the generated day has the shape the
issue asks for (a morning ramp, a class of 100 within two minutes, lunch returns, same-day returns, large jobs) and
a cache that can miss: returns after their TTL, the next morning, and returns asking for more resources."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from warmswarm_simulator.config import clock_s, load_model
from warmswarm_simulator.dayspec import day_spec, small_day
from warmswarm_simulator.generator import generate_day
from warmswarm_simulator.workload import Session, TraceError, parse_trace, trace_text

SPEC = day_spec(load_model().raw_day)
DAY = generate_day(SPEC, seed=1)


def test_a_trace_reads_back_what_was_written() -> None:
    assert parse_trace(trace_text(DAY)) == DAY
    assert trace_text(DAY).splitlines()[0] == (
        "arrival_s,user,project,node,cpus,memory_gib,gpus,duration_s,group,data_gb"
    )


def test_a_trace_row_that_cannot_be_read_names_its_line() -> None:
    text = "arrival_s,user,project,node,cpus,memory_gib,gpus,duration_s,group,data_gb\n1,u,p,n,one,2,0,60,lab,1\n"
    with pytest.raises(TraceError, match="line 2"):
        parse_trace(text)


def test_the_same_seed_gives_the_same_day_and_another_seed_another() -> None:
    assert generate_day(SPEC, seed=1) == DAY
    assert generate_day(SPEC, seed=2) != DAY


def test_a_class_of_100_opens_its_sessions_within_two_minutes() -> None:
    first = [s for s in DAY if s.user.startswith("s") and s.arrival_s < clock_s("11:00")]
    assert len(first) == 100
    assert max(s.arrival_s for s in first) - min(s.arrival_s for s in first) <= 120


def test_the_morning_ramps_up() -> None:
    firsts: dict[tuple[str, str, str], Session] = {}
    for s in DAY:
        if s.user.startswith("u"):
            firsts.setdefault(s.owner, s)
    per_hour = Counter(int(s.arrival_s // 3600) for s in firsts.values())
    assert per_hour[7] < per_hour[8] < (per_hour[10] + per_hour[11]) / 2
    assert min(s.arrival_s for s in firsts.values()) >= clock_s("07:00")


def _returns(sessions: list[Session]) -> list[tuple[Session, Session]]:
    by_owner: dict[tuple[str, str, str], list[Session]] = {}
    for s in sessions:
        by_owner.setdefault(s.owner, []).append(s)
    return [(a, b) for owned in by_owner.values() for a, b in itertools.pairwise(owned)]


def test_owners_come_back_after_lunch_and_later_the_same_day_with_the_same_data() -> None:
    pairs = _returns(DAY)
    lunch = [b for a, b in pairs if clock_s("11:45") <= a.arrival_s + a.duration_s <= clock_s("12:15")]
    assert len(lunch) >= 20
    assert len(pairs) >= 150
    assert all(a.data_gb == b.data_gb and a.group == b.group for a, b in pairs)
    assert all(b.arrival_s >= a.arrival_s + a.duration_s for a, b in pairs)  # never while planned to run


def test_a_tail_of_large_jobs_needs_big_machines_and_much_data() -> None:
    large = [s for s in DAY if s.user.startswith("h")]
    assert len(large) >= 12
    assert all(s.cpus >= 2 and s.data_gb >= 20 for s in large)
    assert any(s.gpus for s in large)


def test_the_same_seed_gives_the_same_trace_bytes() -> None:
    assert trace_text(generate_day(SPEC, seed=1)) == trace_text(DAY)


def _cache_returns() -> list[tuple[Session, Session, float]]:
    """(previous session, return, planned gap in s) of each return of an owner whose group keeps a cache."""
    return [
        (a, b, b.arrival_s - (a.arrival_s + a.duration_s))
        for a, b in _returns(DAY)
        if SPEC.groups[b.group].ebs_cache_enabled
    ]


def test_some_returns_come_after_their_caches_ttl() -> None:
    returns = _cache_returns()
    after = [b for _, b, gap in returns if gap > SPEC.groups[b.group].cache_ttl_s]
    assert len(after) >= 10
    assert len(after) < len(returns) / 4  # the TTLs still cover most returns
    # The course keeps its cache for the afternoon only: most homework comes after it.
    ttl_s = SPEC.groups["course"].cache_ttl_s
    assert ttl_s < 6 * 3600
    homework = [(b, gap) for _, b, gap in returns if b.group == "course"]
    assert sum(1 for _, gap in homework if gap > ttl_s) > len(homework) / 3
    assert any(gap <= ttl_s for _, gap in homework)


def test_owners_come_back_the_next_morning_past_the_days_end_of_arrivals() -> None:
    morning = [s for s in DAY if s.arrival_s > SPEC.end_of_arrivals_s]
    assert len(morning) >= 20
    assert all(clock_s("32:00") <= s.arrival_s <= clock_s("35:00") for s in morning)
    assert all(s.user.startswith("u") for s in morning)
    earlier = {s.owner for s in DAY if s.arrival_s < SPEC.end_of_arrivals_s}
    assert {s.owner for s in morning} <= earlier  # returns, not first sessions


def test_some_returns_ask_for_more_resources_with_the_same_data() -> None:
    pairs = _returns(DAY)
    bigger = [(a, b) for a, b in pairs if b.cpus > a.cpus and b.memory_gib > a.memory_gib]
    assert 0.08 * len(pairs) <= len(bigger) <= 0.2 * len(pairs)
    assert all(a.data_key == b.data_key and a.data_gb == b.data_gb and a.group == b.group for a, b in bigger)
    assert sum(1 for _, b in bigger if SPEC.groups[b.group].ebs_cache_enabled) >= 10
    # The next size up, and kept: no owner's session asks for less than the one before.
    sizes = {(p.cpus, p.memory_gib) for p in SPEC.profiles.values()}
    assert all((b.cpus, b.memory_gib) in sizes for _, b in bigger)
    assert all(b.cpus >= a.cpus and b.memory_gib >= a.memory_gib for a, b in pairs)


def test_the_small_day_has_returns_after_their_ttl_and_a_bigger_return() -> None:
    spec = small_day(SPEC)
    day = generate_day(spec, seed=7)
    pairs = _returns(day)
    assert any(
        spec.groups[b.group].ebs_cache_enabled
        and b.arrival_s - a.arrival_s - a.duration_s > spec.groups[b.group].cache_ttl_s
        for a, b in pairs
    )
    assert any(b.memory_gib > a.memory_gib for a, b in pairs)
    assert max(s.arrival_s for s in day) <= spec.end_of_arrivals_s  # no night on the small day
