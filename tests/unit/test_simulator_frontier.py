"""The cost-wait frontier (warmswarm_simulator.frontier): who is on it, the wait read between two of its candidates,
and a ratio at equal cost only where the reference reaches that cost."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_simulator.frontier import Point, equal_cost_ratio, frontier, wait_at_cost

CHEAP = Point("cheap", 80.0, 240.0)
MIDDLE = Point("middle", 90.0, 100.0)
DEAR = Point("dear", 100.0, 60.0)
BEATEN = Point("beaten", 95.0, 120.0)  # dearer than MIDDLE and waits longer


def test_the_frontier_keeps_the_candidates_none_beats_ordered_by_cost() -> None:
    assert frontier([DEAR, BEATEN, CHEAP, MIDDLE]) == [CHEAP, MIDDLE, DEAR]


def test_a_tie_in_both_is_kept_once_and_an_equal_cost_keeps_the_shorter_wait() -> None:
    twin = Point("a-twin", MIDDLE.cost_usd, MIDDLE.wait_s)
    slower = Point("slower", MIDDLE.cost_usd, MIDDLE.wait_s + 1)

    assert frontier([MIDDLE, twin, slower]) == [twin]


def test_the_wait_between_two_candidates_is_read_on_the_line_between_them() -> None:
    line = frontier([CHEAP, MIDDLE, DEAR])

    assert wait_at_cost(line, 85.0) == pytest.approx(170.0)
    assert wait_at_cost(line, 90.0) == 100.0
    assert wait_at_cost(line, 100.0) == 60.0


def test_outside_the_frontiers_costs_there_is_no_reading() -> None:
    line = frontier([CHEAP, MIDDLE, DEAR])

    assert wait_at_cost(line, 79.99) is None
    assert wait_at_cost(line, 100.01) is None
    assert wait_at_cost([], 90.0) is None
    assert equal_cost_ratio(Point("x", 120.0, 50.0), line) is None


def test_the_equal_cost_ratio_divides_by_the_reference_at_the_same_cost() -> None:
    line = frontier([CHEAP, MIDDLE, DEAR])

    assert equal_cost_ratio(Point("ours", 95.0, 40.0), line) == pytest.approx(40.0 / 80.0)


points = st.lists(
    st.builds(
        Point,
        st.sampled_from("abcdefgh"),
        st.floats(50, 150, allow_nan=False),
        st.floats(1, 500, allow_nan=False),
    ),
    min_size=1,
    max_size=12,
)


@given(points)
def test_no_point_beats_a_frontier_point_and_every_other_point_is_beaten(candidates: list[Point]) -> None:
    line = frontier(candidates)

    def beats(a: Point, b: Point) -> bool:
        return a.cost_usd <= b.cost_usd and a.wait_s <= b.wait_s and (a.cost_usd, a.wait_s) != (b.cost_usd, b.wait_s)

    for kept in line:
        assert not any(beats(other, kept) for other in candidates)
    for other in candidates:
        if other not in line:
            assert any(
                beats(kept, other) or (kept.cost_usd, kept.wait_s) == (other.cost_usd, other.wait_s) for kept in line
            )
    assert [p.cost_usd for p in line] == sorted(p.cost_usd for p in line)
