"""warmswarm_models.start: each start path told from the machine's and volume's facts against the request's moment."""

from __future__ import annotations

import pytest
from warmswarm_models.start import CLOCK_SLACK_S, START_PATHS, MachineFacts, StartPath, cache_hit, start_path

ASKED = 1_000_000.0  # epoch s: the session's service was created
BEFORE = ASKED - 3_600.0  # an hour earlier: an earlier session's time
AFTER = ASKED + 20.0


@pytest.mark.parametrize(
    ("facts", "path"),
    [
        # A running hot-buffer machine, launched long before, claimed for this session.
        (MachineFacts(launched_at=BEFORE, buffer_kind="hot", claimed_at=AFTER, volume_created_at=BEFORE), "hot_claim"),
        # A stopped warm-buffer machine claimed, then started (started-at after the claim): still the claim.
        (
            MachineFacts(launched_at=BEFORE, buffer_kind="warm", claimed_at=AFTER, started_at=AFTER + 5),
            "buffer_claim",
        ),
        # The owner's own machine, stopped warm before the request and started for it.
        (MachineFacts(launched_at=BEFORE, started_at=AFTER, volume_created_at=BEFORE), "warm_resume"),
        # On EC2 a start moves LaunchTime too: the start still decides.
        (MachineFacts(launched_at=AFTER, started_at=AFTER, volume_created_at=BEFORE), "warm_resume"),
        # A machine claimed from a buffer for an earlier session, stopped, and resumed for this one.
        (MachineFacts(launched_at=BEFORE, buffer_kind="hot", claimed_at=BEFORE, started_at=AFTER), "warm_resume"),
        # Launched for the session, mounting the volume an earlier session left.
        (MachineFacts(launched_at=AFTER, volume_created_at=BEFORE), "cache_return"),
        # Launched for the session with a volume made for it, or without a cache.
        (MachineFacts(launched_at=AFTER, volume_created_at=ASKED + 2), "cold_launch"),
        (MachineFacts(launched_at=AFTER), "cold_launch"),
        # The owner's machine ran already: launched, claimed and started before the request.
        (MachineFacts(launched_at=BEFORE, started_at=BEFORE + 60, volume_created_at=BEFORE), "running_return"),
    ],
)
def test_each_path_is_told_from_the_facts(facts: MachineFacts, path: StartPath) -> None:
    assert start_path(ASKED, facts) == path
    assert path in START_PATHS


def test_a_fact_a_little_before_the_request_counts_for_it_a_moment_more_does_not() -> None:
    # AWS's clock a few seconds behind the swarm's: the claim was still made for this session.
    near = MachineFacts(launched_at=BEFORE, buffer_kind="hot", claimed_at=ASKED - CLOCK_SLACK_S + 1)
    far = MachineFacts(launched_at=BEFORE, buffer_kind="hot", claimed_at=ASKED - CLOCK_SLACK_S - 1)

    assert start_path(ASKED, near) == "hot_claim"
    assert start_path(ASKED, far) == "running_return"


def test_a_cache_hit_is_a_volume_older_than_the_request() -> None:
    assert cache_hit(ASKED, MachineFacts(launched_at=AFTER, volume_created_at=BEFORE))
    assert not cache_hit(ASKED, MachineFacts(launched_at=AFTER, volume_created_at=ASKED + 1))
    assert not cache_hit(ASKED, MachineFacts(launched_at=AFTER))
