"""Idempotency tokens: one per decision, the same in every release, a new one only once the old one is spent."""

from __future__ import annotations

from warmswarm_autoscaling.plan.tokens import batch_token, launch_token, volume_token

from .factories import ALICE_N1, ALICE_N2, NOBODY

# Tokens as the released autoscaler issues them. A leader that sent RunInstances and lost the answer may be
# replaced by a newer release during an upgrade; the new one retries the same decision, and EC2 returns the
# machine it already made only if the token is the same. So a token's derivation never changes between releases.
ALICE_LAUNCH = "a7711a44b8a30c0dab6102ceb8798aa22e4eaeea01678db8bfbf45e1728e42eb"
ALICE_LAUNCH_NEXT = "abd00d7577f56bb6366140c89807c1e2fe9c1796235bac7f423124ba71369d4b"
ALICE_VOLUME = "920fcc22b8432f609d495c781b7475fbfc633b575bb03c7d52155b727add52e1"
BATCH_OF_A_AND_B = "b8e5ef70a896eaf7ff20d9bb7c3c7acae7b7f36c6f7e5c1a9506cef05bf62267"
NOBODYS_LAUNCH = "f6ca1839f2c1970dfdb2ef3c2b6f1953a548df078e8e7ab7e4fd42a1e23f6836"


def test_tokens_are_the_released_ones() -> None:
    assert launch_token("prod", ALICE_N1, "task-1", frozenset()) == ALICE_LAUNCH
    assert volume_token("prod", ALICE_N1, frozenset()) == ALICE_VOLUME
    assert batch_token("prod", "t3.medium", "eu-west-1a", ["b", "a"], frozenset()) == BATCH_OF_A_AND_B
    assert launch_token("prod", NOBODY, "task-1", frozenset()) == NOBODYS_LAUNCH


def test_a_spent_token_gives_way_to_the_next_generation_of_the_same_decision() -> None:
    assert launch_token("prod", ALICE_N1, "task-1", frozenset({ALICE_LAUNCH})) == ALICE_LAUNCH_NEXT
    third = launch_token("prod", ALICE_N1, "task-1", frozenset({ALICE_LAUNCH, ALICE_LAUNCH_NEXT}))
    assert third not in (ALICE_LAUNCH, ALICE_LAUNCH_NEXT)
    assert launch_token("prod", ALICE_N1, "task-1", frozenset({ALICE_LAUNCH, ALICE_LAUNCH_NEXT, third})) not in (
        ALICE_LAUNCH,
        ALICE_LAUNCH_NEXT,
        third,
    )
    # Spending an unrelated token changes nothing.
    assert launch_token("prod", ALICE_N1, "task-1", frozenset({ALICE_VOLUME})) == ALICE_LAUNCH


def test_tokens_fit_ec2s_limit_of_64_ascii_characters() -> None:
    for token in (ALICE_LAUNCH, ALICE_VOLUME, BATCH_OF_A_AND_B):
        assert len(token) == 64
        assert token.isascii()


def test_a_batch_is_the_same_decision_whatever_the_order_of_its_seats() -> None:
    assert batch_token("prod", "t3.medium", "eu-west-1a", ["a", "b"], frozenset()) == BATCH_OF_A_AND_B


def test_every_part_of_a_decision_makes_its_token_its_own() -> None:
    tokens = {
        launch_token("prod", ALICE_N1, "task-1", frozenset()),
        launch_token("staging", ALICE_N1, "task-1", frozenset()),
        launch_token("prod", ALICE_N2, "task-1", frozenset()),
        launch_token("prod", ALICE_N1, "task-2", frozenset()),
        volume_token("prod", ALICE_N1, frozenset()),
        volume_token("prod", ALICE_N2, frozenset()),
        batch_token("prod", "t3.medium", "eu-west-1a", ["a"], frozenset()),
        batch_token("prod", "m5.large", "eu-west-1a", ["a"], frozenset()),
        batch_token("prod", "t3.medium", "eu-west-1b", ["a"], frozenset()),
        batch_token("prod", "t3.medium", "eu-west-1a", ["a", "b"], frozenset()),
    }
    assert len(tokens) == 10
