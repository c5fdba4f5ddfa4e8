"""The shared contract: owners and their constraints, and resource arithmetic."""

from __future__ import annotations

import pytest
from warmswarm_models import GPU, OWNER_KEYS, InvalidOwner, Owner, Resources, parse_constraints

GIB = 2**30


@pytest.mark.parametrize(
    "owner",
    [
        Owner(user_id="42"),
        Owner(project_id="p-7"),
        Owner(node_id="n.1"),
        Owner(user_id="42", project_id="p-7", node_id="n_1"),
        Owner(),
    ],
    ids=str,
)
def test_owner_constraints_round_trip_through_parse_constraints(owner: Owner) -> None:
    assert parse_constraints(owner.constraints()) == (owner, [])


def test_owner_constraints_use_the_owner_keys_as_node_labels() -> None:
    owner = Owner(user_id="42", project_id="7", node_id="3")
    assert owner.constraints() == [
        "node.labels.user_id==42",
        "node.labels.project_id==7",
        "node.labels.node_id==3",
    ]
    assert OWNER_KEYS == ("user_id", "project_id", "node_id")


def test_parse_constraints_keeps_other_constraints_in_order_and_strips_spaces() -> None:
    owner, rest = parse_constraints(
        [" node.role == worker", "node.labels.user_id == 42 ", "node.labels.other!=x", "node.labels.user_id!=9"]
    )
    assert owner == Owner(user_id="42")
    # `!=` on an owner key does not pin an owner: it stays an ordinary constraint.
    assert rest == ["node.role == worker", "node.labels.other!=x", "node.labels.user_id!=9"]


def test_parse_constraints_accepts_the_same_owner_constraint_twice() -> None:
    owner, _ = parse_constraints(["node.labels.user_id==42", "node.labels.user_id==42"])
    assert owner == Owner(user_id="42")


def test_contradicting_owner_constraints_raise_invalid_owner_naming_both() -> None:
    with pytest.raises(InvalidOwner, match=r"user_id==42 and user_id==43"):
        parse_constraints(["node.labels.user_id==42", "node.labels.user_id==43"])


def test_malformed_owner_constraint_raises_invalid_owner_naming_the_id() -> None:
    with pytest.raises(InvalidOwner, match=r"user_id='bad id!' is not a valid id"):
        parse_constraints(["node.labels.user_id==bad id!"])


@pytest.mark.parametrize("value", ["", "bad id", "-starts-with-dash", "a" * 129, "x/y", "42\n", "\n42"])
def test_owner_rejects_ids_that_cannot_be_labels(value: str) -> None:
    with pytest.raises(InvalidOwner):
        Owner(user_id=value)


def test_owner_rejects_upper_case_because_swarm_ignores_case_in_constraints() -> None:
    with pytest.raises(InvalidOwner, match=r"user_id='Alice' is not a valid id: use 1-128 characters of lower-case"):
        Owner(user_id="Alice")


@pytest.mark.parametrize("value", ["42", "a" * 128, "proj.1_x-2", "0", "0f8fad5b-d9cb-469f-a165-70867728950e"])
def test_owner_accepts_safe_ids(value: str) -> None:
    assert Owner(project_id=value).labels() == {"project_id": value}


def test_owner_from_labels_reads_only_the_owner_keys() -> None:
    owner = Owner.from_labels({"user_id": "42", "node_id": "3", "warmswarm.instance-id": "i-1", "other": "x"})
    assert owner == Owner(user_id="42", node_id="3")
    assert owner.labels() == {"user_id": "42", "node_id": "3"}
    assert str(owner) == "user_id=42,node_id=3"


def test_owner_without_ids_is_nobody() -> None:
    assert Owner().is_nobody
    assert not Owner(node_id="1").is_nobody
    assert str(Owner()) == "nobody"
    assert Owner.from_labels({"other": "x"}) == Owner()


def test_resources_add_sums_cpus_memory_and_each_generic_kind() -> None:
    total = Resources(1.5, 2 * GIB, {GPU: 1}) + Resources(0.5, GIB, {GPU: 1, "fpga": 2})
    assert total.cpus == 2.0
    assert total.memory_bytes == 3 * GIB
    assert dict(total.generic) == {GPU: 2, "fpga": 2}
    assert total.gpus == 2


def test_resources_add_leaves_its_operands_unchanged() -> None:
    left = Resources(1.0, GIB, {GPU: 1})
    _ = left + Resources(1.0, GIB, {GPU: 1})
    assert left == Resources(1.0, GIB, {GPU: 1})


def test_resources_minus_never_goes_below_zero() -> None:
    left = Resources(2.0, 4 * GIB, {GPU: 1}).minus(Resources(3.0, 5 * GIB, {GPU: 2}))
    assert left == Resources(0.0, 0, {GPU: 0})


def test_resources_minus_subtracts_each_kind() -> None:
    left = Resources(4.0, 16 * GIB, {GPU: 2}).minus(Resources(1.5, 4 * GIB, {GPU: 1}))
    assert left.cpus == 2.5
    assert left.memory_bytes == 12 * GIB
    assert left.gpus == 1


def test_resources_fits_in_needs_every_dimension_to_fit() -> None:
    room = Resources(2.0, 4 * GIB)
    assert Resources(2.0, 4 * GIB).fits_in(room)
    assert not Resources(2.1, GIB).fits_in(room)
    assert not Resources(1.0, 4 * GIB + 1).fits_in(room)


def test_resources_fits_in_absorbs_float_sums_but_not_a_real_shortfall() -> None:
    room = Resources(0.3, GIB)
    assert Resources(0.1 + 0.2, GIB).fits_in(room)  # 0.30000000000000004
    assert not Resources(0.302, GIB).fits_in(room)


def test_resources_fits_in_needs_the_generic_kinds_it_asks_for() -> None:
    one_gpu = Resources(1.0, GIB, {GPU: 1})
    assert not one_gpu.fits_in(Resources(8.0, 32 * GIB))
    assert not Resources(1.0, GIB, {GPU: 2}).fits_in(Resources(8.0, 32 * GIB, {GPU: 1}))
    assert one_gpu.fits_in(Resources(8.0, 32 * GIB, {GPU: 1}))
    # Asking for none of a kind fits where there is none.
    assert Resources(1.0, GIB, {GPU: 0}).fits_in(Resources(1.0, GIB))


def test_resources_cannot_be_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        Resources(-1.0, 0)
    with pytest.raises(ValueError, match="negative"):
        Resources(0.0, -1)
    with pytest.raises(ValueError, match="negative"):
        Resources(0.0, 0, {GPU: -1})


def test_resources_convert_nano_cpus_both_ways() -> None:
    r = Resources.from_nano_cpus(1_500_000_000, GIB, {GPU: 1})
    assert r.cpus == 1.5
    assert r.nano_cpus == 1_500_000_000
    assert r.gpus == 1
    assert Resources(0.1).nano_cpus == 100_000_000


def test_resources_describe_says_cpus_gib_and_kinds() -> None:
    assert Resources(2.0, 8 * GIB, {GPU: 1}).describe() == "2 CPU, 8 GiB, 1 gpu"
    assert Resources(0.5, GIB // 2).describe() == "0.5 CPU, 0.5 GiB"
