"""The simulator's workloads: the trace CSV reads back what was written, and the generated day has the shape the
issue asks for (a morning ramp, a class of 100 within two minutes, lunch returns, same-day returns, large jobs)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
from warmswarm_simulator.config import clock_s, load_model
from warmswarm_simulator.dayspec import day_spec
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
