"""The allowed instance types (plan/offerings.py): which types are offered, the notice for those EC2 does not know,
and the zone the cheapest goes to."""

from __future__ import annotations

from warmswarm_autoscaling.actions import Launch
from warmswarm_autoscaling.plan.offerings import Offerings, unknown_types_notices

from .factories import (
    ALICE,
    INSTANCE_TYPES,
    M5_LARGE,
    ZONE_A,
    ZONE_B,
    make_policy,
    only,
    pending_task,
    resources,
    run,
    snapshot,
)

# -- which types are offered -------------------------------------------------------------------------------


def test_the_offerings_are_the_snapshots_instance_types_the_policy_allows() -> None:
    result = run(
        snapshot(tasks=[pending_task("t", ALICE, cpus=1.5)], instance_types={"m5.large": M5_LARGE}),
        make_policy(allowed_instance_types=("t3.medium", "m5.large")),
    )
    assert only(result, Launch).instance_type == "m5.large"


def test_only_allowed_types_are_launched() -> None:
    policy = make_policy(allowed_instance_types=("m5.large", "m5.xlarge"))
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)]), policy), Launch)
    assert launch.instance_type == "m5.large"


def test_instance_types_unknown_to_ec2_are_not_launched() -> None:
    types = {name: t for name, t in INSTANCE_TYPES.items() if name != "t3.medium"}
    launch = only(run(snapshot(tasks=[pending_task("t1", ALICE)], instance_types=types)), Launch)
    assert launch.instance_type == "m5.large"


def test_allowed_types_ec2_does_not_know_are_named_in_one_notice_and_the_others_still_launch() -> None:
    policy = make_policy(allowed_instance_types=("t3.mediun", "m5.large", "x9.huge"))
    result = run(snapshot(tasks=[pending_task("t1", ALICE)]), policy)

    assert only(result, Launch).instance_type == "m5.large"
    assert list(result.notices) == [
        "AUTOSCALING_ALLOWED_INSTANCE_TYPES names t3.mediun, x9.huge, which EC2 does not know in this region"
        " (a typo, or a type the region lacks): they are never launched; the other types are"
    ]


def test_no_notice_while_ec2_knows_every_allowed_type() -> None:
    assert unknown_types_notices(INSTANCE_TYPES, tuple(INSTANCE_TYPES)) == []
    assert run(snapshot(tasks=[pending_task("t1", ALICE)]), make_policy()).notices == ()


def test_the_notice_says_so_when_no_allowed_type_is_known() -> None:
    [notice] = unknown_types_notices(INSTANCE_TYPES, ("t3.mediun",))
    assert notice.startswith("AUTOSCALING_ALLOWED_INSTANCE_TYPES names t3.mediun, which EC2 does not know")
    assert notice.endswith(": it is never launched; no other type is allowed")


# -- the cheapest, called directly -------------------------------------------------------------------------


def test_a_zone_missing_from_the_machine_count_counts_as_empty() -> None:
    """Called directly: plan() always counts every allowed zone (zero included), so only the method's own
    contract can show that a zone it is not told about holds none of our machines."""
    offerings = Offerings(INSTANCE_TYPES, make_policy())
    found = offerings.cheapest(resources(1.0, 1.0), {}, {ZONE_A: 1}, (ZONE_A, ZONE_B))
    assert found is not None
    assert (found[0].name, found[1]) == ("t3.medium", ZONE_B)
    # And a tie between zones goes to the first allowed.
    tie = offerings.cheapest(resources(1.0, 1.0), {}, {}, (ZONE_B, ZONE_A))
    assert tie is not None
    assert tie[1] == ZONE_B
