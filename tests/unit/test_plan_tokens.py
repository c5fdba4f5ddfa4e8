"""Idempotency tokens (plan/tokens.py): one per decision, the same in every release and at any later moment,
a new one only once the old one is spent."""

from __future__ import annotations

from warmswarm_autoscaling.actions import CreateVolume, Launch
from warmswarm_autoscaling.plan.tokens import batch_token, launch_token, volume_token
from warmswarm_models import Owner

from .factories import (
    ALICE,
    ALICE_N1,
    ALICE_N2,
    BOB,
    BOB_N1,
    CLASS_POLICY,
    NOBODY,
    NOW,
    actions_of,
    batches,
    cached_task,
    make_policy,
    only,
    pending_task,
    run,
    snapshot,
    student,
)

# -- the derivation, called directly -----------------------------------------------------------------------


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


# -- through plan(): a retry is the same call --------------------------------------------------------------


def test_a_launchs_token_is_the_same_at_any_later_moment() -> None:
    task = pending_task("t1", ALICE)
    policy = make_policy(max_start_s=60.0)

    tokens = {only(run(snapshot(tasks=[task], now=NOW + delay_s), policy), Launch).client_token for delay_s in (0, 61)}

    assert len(tokens) == 1


def test_a_volumes_token_is_the_same_at_any_later_moment() -> None:
    task = cached_task("t1", ALICE_N1)
    policy = make_policy(max_start_s=60.0)

    tokens = {
        only(run(snapshot(tasks=[task], now=NOW + delay_s), policy), CreateVolume).client_token
        for delay_s in (0, 61, 3 * 86_400)
    }

    assert len(tokens) == 1


def test_client_token_is_stable_within_a_start_window_and_at_most_64_chars() -> None:
    policy = make_policy(max_start_s=600.0)
    window_start = (NOW // 600.0) * 600.0
    task = pending_task("t1", ALICE)
    tokens = {only(run(snapshot(now=now, tasks=[task]), policy), Launch).client_token for now in (window_start, NOW)}
    tokens.add(only(run(snapshot(now=window_start + 599.0, tasks=[task]), policy), Launch).client_token)
    assert len(tokens) == 1
    token = tokens.pop()
    assert 0 < len(token) <= 64
    assert token.isascii()


def test_a_batch_is_the_same_call_while_its_students_wait() -> None:
    tasks = [pending_task(f"t{n}", student(n)) for n in range(20)]
    first = run(snapshot(tasks=tasks), CLASS_POLICY)
    again = run(snapshot(tasks=tasks, now=NOW + 5), CLASS_POLICY)

    assert [b.client_token for b in batches(first)] == [b.client_token for b in batches(again)]


def test_a_spent_token_makes_the_next_launch_of_that_decision_a_new_one() -> None:
    task = pending_task("t1", ALICE)
    first = only(run(snapshot(tasks=[task])), Launch).client_token

    spent = snapshot(tasks=[task], spent_tokens={first})
    second = only(run(spent), Launch).client_token

    assert second != first
    again = snapshot(tasks=[task], spent_tokens={first})
    assert only(run(again), Launch).client_token == second, "the next generation is itself stable"


# -- each decision its own token ---------------------------------------------------------------------------


def test_a_launch_token_is_the_decision_of_one_owner_for_one_task() -> None:
    """The token names the owner as well as the task: the same task id pending for another owner is another
    decision, and a retry must never hand one owner's machine to another."""
    for_alice = only(run(snapshot(tasks=[pending_task("t1", ALICE)])), Launch)
    for_bob = only(run(snapshot(tasks=[pending_task("t1", BOB)])), Launch)

    assert for_alice.client_token != for_bob.client_token


def test_client_token_differs_for_different_launches_in_one_cycle() -> None:
    tasks = [pending_task("t1", ALICE), pending_task("t2", BOB)]
    tokens = [launch.client_token for launch in actions_of(run(snapshot(tasks=tasks)), Launch)]
    assert len(tokens) == 2
    assert len(set(tokens)) == 2


def test_create_volume_client_token_differs_per_owner_and_cluster() -> None:
    def token(owner: Owner, cluster: str = "test") -> str:
        return only(
            run(snapshot(tasks=[cached_task("t1", owner)]), make_policy(cluster=cluster)), CreateVolume
        ).client_token

    assert len({token(ALICE_N1), token(ALICE_N2), token(BOB_N1), token(ALICE_N1, "prod")}) == 4
