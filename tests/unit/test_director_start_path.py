"""A running session's start path in the director's answer, and its one observation in the director's /metrics."""

from __future__ import annotations

from .metrics_scrape import director_metrics_after_a_session, parse


def _value(text: str, name: str, **labels: str) -> float:
    return parse(text).samples[(name, frozenset(labels.items()))]


async def test_the_running_answer_names_the_start_path() -> None:
    _, (answer,) = await director_metrics_after_a_session()

    assert answer["status"] == "running"
    assert answer["start_path"] == "cache_return"


async def test_a_session_is_observed_once_under_its_path_however_often_it_is_asked() -> None:
    text, answers = await director_metrics_after_a_session(polls=3)

    assert [a["start_path"] for a in answers] == ["cache_return"] * 3
    assert _value(text, "warmswarm_session_start_seconds_count", path="cache_return") == 1
    assert _value(text, "warmswarm_session_start_seconds_sum", path="cache_return") == 42.5
    # 42.5 s: not within 30 s, within 45 s.
    assert _value(text, "warmswarm_session_start_seconds_bucket", path="cache_return", le="30.0") == 0
    assert _value(text, "warmswarm_session_start_seconds_bucket", path="cache_return", le="45.0") == 1
    for other in ("hot_claim", "buffer_claim", "warm_resume", "cold_launch", "running_return", "unknown"):
        assert _value(text, "warmswarm_session_start_seconds_count", path=other) == 0
    assert _value(text, "warmswarm_cache_hits_total") == 1
    assert _value(text, "warmswarm_cache_misses_total") == 0
