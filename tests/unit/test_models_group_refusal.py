"""A group can say no: its false for a recycling property wins over any other group's true; unset is no opinion."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from warmswarm_models import CachePolicy, GroupProperties, effective_cache_policy
from warmswarm_models.cache import GroupsDecision, recycling_decisions, refusal_wins

Opinion = bool | None
OPINIONS: tuple[Opinion, ...] = (False, True, None)


def oracle_value(opinions: list[Opinion]) -> bool:
    """Written from operations.md's table, not from the code: rank the answers a group can give (a refusal outranks a
    grant, a grant outranks silence) and keep the strongest; the property holds only when that is a grant."""
    strength = {False: 2, True: 1, None: 0}
    strongest = max(opinions, key=lambda opinion: strength[opinion], default=None)
    return strongest is True


def oracle_deciders(named: list[tuple[str, Opinion]]) -> list[str]:
    """The groups whose own answer is the outcome: the refusers when refused, the granters when granted, and nobody
    when only silence was heard (a None never equals a bool)."""
    outcome = oracle_value([opinion for _, opinion in named])
    return [group_id for group_id, opinion in named if opinion is not None and opinion == outcome]


def test_the_two_recycling_properties_are_unset_by_default() -> None:
    assert (GroupProperties().recycle_machines, GroupProperties().accept_recycled) == (None, None)


def test_a_user_in_vault_and_lab_neither_receives_nor_gives_a_recycled_machine() -> None:
    vault = GroupProperties(recycle_machines=False, accept_recycled=False)
    lab = GroupProperties(recycle_machines=True, accept_recycled=True)
    for groups in ([vault, lab], [lab, vault]):
        policy = effective_cache_policy(groups)
        assert (policy.accept_recycled, policy.recycle_machines) == (False, False)
    decisions = recycling_decisions({"lab": lab, "vault": vault})
    assert decisions.accept_recycled == GroupsDecision(False, ("vault",))
    assert decisions.recycle_machines == GroupsDecision(False, ("vault",))


def test_an_unset_group_does_not_stop_another_groups_grant() -> None:
    decisions = recycling_decisions({"everyone": GroupProperties(), "lab": GroupProperties(accept_recycled=True)})
    assert decisions.accept_recycled == GroupsDecision(True, ("lab",))
    assert decisions.recycle_machines == GroupsDecision(False, ())


def test_nobody_with_an_opinion_means_off_decided_by_nobody() -> None:
    assert refusal_wins([]) == GroupsDecision(False, ())
    assert refusal_wins([("a", None), ("b", None)]) == GroupsDecision(False, ())


def test_the_stored_form_of_before_this_change_reads_as_a_refusal() -> None:
    # Every group stored before unset existed was dumped with its defaults written out, as this.
    stored = (
        '{"ebs_cache_enabled": true, "cache_ttl_s": 600, "cache_size_gib": 10, "cache_max_size_gib": null,'
        ' "volume_type": "gp3", "warm_ttl_s": 0, "recycle_machines": false, "accept_recycled": false}'
    )
    old = GroupProperties.model_validate_json(stored)
    assert (old.recycle_machines, old.accept_recycled) == (False, False)
    lab = GroupProperties(recycle_machines=True, accept_recycled=True)
    assert recycling_decisions({"old": old, "lab": lab}).accept_recycled == GroupsDecision(False, ("old",))
    # Stored from before recycling existed (neither field): no opinion. A JSON null: no opinion.
    assert GroupProperties.model_validate_json('{"ebs_cache_enabled": true}').accept_recycled is None
    assert GroupProperties.model_validate_json('{"accept_recycled": null}').accept_recycled is None


def test_what_is_stored_keeps_unset_apart_from_a_refusal() -> None:
    for opinion in OPINIONS:
        properties = GroupProperties(recycle_machines=opinion, accept_recycled=opinion)
        assert GroupProperties.model_validate_json(properties.model_dump_json()) == properties


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_every_combination_of_up_to_three_groups_follows_refusal_wins(count: int) -> None:
    for recycle, accept in itertools.product(itertools.product(OPINIONS, repeat=count), repeat=2):
        groups = [GroupProperties(recycle_machines=r, accept_recycled=a) for r, a in zip(recycle, accept, strict=True)]
        policy = effective_cache_policy(groups)
        assert policy.recycle_machines is oracle_value(list(recycle)), recycle
        assert policy.accept_recycled is oracle_value(list(accept)), accept


# Group ids are unique in a request (the director reads each once); any order.
_NAMED_OPINIONS = st.lists(
    st.tuples(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), st.sampled_from(OPINIONS)),
    max_size=12,
    unique_by=lambda pair: pair[0],
)


@given(named=_NAMED_OPINIONS, cache=st.booleans(), warm_ttl_s=st.integers(0, 3600))
def test_refusal_wins_against_an_independent_oracle(
    named: list[tuple[str, Opinion]], cache: bool, warm_ttl_s: int
) -> None:
    decision = refusal_wins(named)
    assert decision.value is oracle_value([opinion for _, opinion in named])
    assert list(decision.decided_by) == oracle_deciders(named)
    # The same through the properties: both properties decided alike, whatever the cache or the warm tier.
    groups = {
        group_id: GroupProperties(
            ebs_cache_enabled=cache, warm_ttl_s=warm_ttl_s, recycle_machines=opinion, accept_recycled=opinion
        )
        for group_id, opinion in named
    }
    decisions = recycling_decisions(groups)
    assert decisions.recycle_machines == decisions.accept_recycled == decision
    policy = effective_cache_policy(groups.values())
    assert (policy.recycle_machines, policy.accept_recycled) == (decision.value, decision.value)
    # The labels the director writes say the decision, in the keys and words they always had.
    assert CachePolicy.from_labels(policy.to_labels()) == policy


@given(named=_NAMED_OPINIONS, order=st.randoms(use_true_random=False))
def test_the_outcome_does_not_depend_on_the_order_of_the_groups(
    named: list[tuple[str, Opinion]], order: object
) -> None:
    shuffled = list(named)
    order.shuffle(shuffled)  # type: ignore[attr-defined]
    before, after = refusal_wins(named), refusal_wins(shuffled)
    assert before.value is after.value
    assert sorted(before.decided_by) == sorted(after.decided_by)


@pytest.mark.parametrize("value", [0, 1, "false", "no"])
def test_the_properties_take_true_false_or_null_only(value: object) -> None:
    with pytest.raises(ValidationError):
        GroupProperties.model_validate({"accept_recycled": value}, strict=True)
