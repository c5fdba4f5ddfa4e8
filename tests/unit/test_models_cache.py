"""The cache contract: group properties, the effective policy, its service labels, and expiry timestamps."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import ValidationError
from warmswarm_models import (
    SERVICE_LABEL_ACCEPT_RECYCLED,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_MAX_SIZE_GIB,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    SERVICE_LABEL_RECYCLE_MACHINES,
    SERVICE_LABEL_WARM_TTL_S,
    CachePolicy,
    GroupProperties,
    InvalidCachePolicy,
    effective_cache_policy,
    format_timestamp,
    parse_timestamp,
)
from warmswarm_models.cache import DEFAULT_CACHE_SIZE_GIB, DEFAULT_CACHE_TTL_S, DEFAULT_VOLUME_TYPE, VOLUME_TYPES

DAY = 86_400


# effective_cache_policy


def test_no_groups_means_no_cache() -> None:
    assert effective_cache_policy([]) == CachePolicy()
    assert not effective_cache_policy([]).enabled


def test_all_groups_off_means_no_cache_whatever_their_other_terms() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=False, cache_ttl_s=30 * DAY, cache_size_gib=500),
        GroupProperties(ebs_cache_enabled=False),
    ]
    assert effective_cache_policy(groups) == CachePolicy(enabled=False)


def test_one_group_on_turns_the_cache_on_with_that_groups_terms() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=False, cache_ttl_s=30 * DAY, cache_size_gib=500, volume_type="io2"),
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=DAY, cache_size_gib=20, volume_type="gp3"),
    ]
    # The group that has the cache off does not lend its larger TTL or size.
    assert effective_cache_policy(groups) == CachePolicy(enabled=True, ttl_s=DAY, size_gib=20, volume_type="gp3")


def test_largest_ttl_and_largest_size_win_among_groups_with_the_cache_on() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=7 * DAY, cache_size_gib=10, volume_type="gp2"),
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=DAY, cache_size_gib=100, volume_type="io1"),
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=3 * DAY, cache_size_gib=50, volume_type="st1"),
    ]
    policy = effective_cache_policy(groups)
    assert policy.enabled
    assert policy.ttl_s == 7 * DAY
    assert policy.size_gib == 100
    # The volume type goes with the largest size.
    assert policy.volume_type == "io1"


def test_effective_policy_does_not_depend_on_the_order_of_the_groups() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=60, cache_size_gib=30, volume_type="gp2"),
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=90, cache_size_gib=30, volume_type="gp3"),
    ]
    assert effective_cache_policy(groups) == effective_cache_policy(reversed(groups))


def test_effective_policy_reads_a_generator_once() -> None:
    groups = (GroupProperties(ebs_cache_enabled=on, cache_ttl_s=ttl) for on, ttl in [(True, 60), (True, 120)])
    assert effective_cache_policy(groups) == CachePolicy(enabled=True, ttl_s=120)


# CachePolicy as service labels


@pytest.mark.parametrize(
    "policy",
    [
        CachePolicy(enabled=True),
        CachePolicy(enabled=True, ttl_s=0, size_gib=1, volume_type="gp2"),
        CachePolicy(enabled=True, ttl_s=30 * DAY, size_gib=16_384, volume_type="io2"),
        CachePolicy(enabled=True, size_gib=20, max_size_gib=500),
        CachePolicy(enabled=False),
    ],
    ids=repr,
)
def test_cache_policy_round_trips_through_service_labels(policy: CachePolicy) -> None:
    assert CachePolicy.from_labels(policy.to_labels()) == policy


def test_cache_policy_labels_are_the_contracts_keys() -> None:
    labels = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3", warm_ttl_s=900).to_labels()
    assert labels == {
        SERVICE_LABEL_CACHE_ENABLED: "true",
        SERVICE_LABEL_CACHE_TTL_S: "3600",
        SERVICE_LABEL_CACHE_SIZE_GIB: "20",
        SERVICE_LABEL_CACHE_VOLUME_TYPE: "gp3",
        SERVICE_LABEL_WARM_TTL_S: "900",
        SERVICE_LABEL_RECYCLE_MACHINES: "false",
        SERVICE_LABEL_ACCEPT_RECYCLED: "false",
    }
    machine_terms = {SERVICE_LABEL_WARM_TTL_S, SERVICE_LABEL_RECYCLE_MACHINES, SERVICE_LABEL_ACCEPT_RECYCLED}
    assert all(key.startswith("warmswarm.cache.") for key in labels if key not in machine_terms)


# Recycling (recycle_machines, accept_recycled): off by default, granted by any group, cache or not; on the labels


def test_recycling_is_off_unless_a_group_grants_it() -> None:
    assert GroupProperties().recycle_machines is False
    assert GroupProperties().accept_recycled is False
    policy = effective_cache_policy([GroupProperties(), GroupProperties(ebs_cache_enabled=True)])
    assert (policy.recycle_machines, policy.accept_recycled) == (False, False)


def test_any_group_granting_recycling_grants_it_with_or_without_the_cache() -> None:
    groups = [
        GroupProperties(recycle_machines=True),
        GroupProperties(ebs_cache_enabled=True, accept_recycled=True),
        GroupProperties(),
    ]
    policy = effective_cache_policy(groups)
    assert (policy.enabled, policy.recycle_machines, policy.accept_recycled) == (True, True, True)
    without_cache = effective_cache_policy(groups[:1])
    assert (without_cache.enabled, without_cache.recycle_machines, without_cache.accept_recycled) == (
        False,
        True,
        False,
    )


@pytest.mark.parametrize("enabled", [True, False])
def test_recycling_survives_the_labels(enabled: bool) -> None:
    policy = CachePolicy(enabled=enabled, recycle_machines=True, accept_recycled=False)
    assert CachePolicy.from_labels(policy.to_labels()) == policy
    assert CachePolicy.from_labels({SERVICE_LABEL_ACCEPT_RECYCLED: "TRUE"}).accept_recycled is True


def test_a_recycling_label_that_is_not_a_boolean_is_refused_by_name() -> None:
    with pytest.raises(InvalidCachePolicy, match=SERVICE_LABEL_RECYCLE_MACHINES):
        CachePolicy.from_labels({SERVICE_LABEL_RECYCLE_MACHINES: "yes"})


# The warm tier (warm_ttl_s): from any group, cache or not; on the service's labels; bounded to a week


def test_warm_tier_is_the_largest_of_all_groups_with_or_without_the_cache() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=False, warm_ttl_s=3600),
        GroupProperties(ebs_cache_enabled=True, cache_ttl_s=DAY, warm_ttl_s=600),
    ]
    assert effective_cache_policy(groups).warm_ttl_s == 3600
    assert effective_cache_policy(groups[:1]) == CachePolicy(enabled=False, warm_ttl_s=3600)
    assert effective_cache_policy([GroupProperties()]).warm_ttl_s == 0


@pytest.mark.parametrize("enabled", [True, False])
def test_warm_tier_reads_back_from_the_labels_whether_or_not_the_cache_is_on(enabled: bool) -> None:
    policy = CachePolicy(enabled=enabled, warm_ttl_s=7 * DAY)
    assert CachePolicy.from_labels(policy.to_labels()).warm_ttl_s == 7 * DAY


@pytest.mark.parametrize("raw", ["-1", "604801", "soon"])
def test_unreadable_warm_tier_label_is_an_error_that_names_it(raw: str) -> None:
    with pytest.raises(InvalidCachePolicy, match=SERVICE_LABEL_WARM_TTL_S):
        CachePolicy.from_labels({SERVICE_LABEL_CACHE_ENABLED: "false", SERVICE_LABEL_WARM_TTL_S: raw})


def test_warm_tier_group_property_is_bounded_to_a_week() -> None:
    with pytest.raises(ValidationError):
        GroupProperties(warm_ttl_s=7 * DAY + 1)
    with pytest.raises(ValidationError):
        GroupProperties(warm_ttl_s=-1)
    assert GroupProperties(warm_ttl_s=7 * DAY).warm_ttl_s == 7 * DAY


def test_disabled_policy_reads_back_as_disabled_whatever_its_other_terms() -> None:
    policy = CachePolicy(enabled=False, ttl_s=5, size_gib=99, volume_type="io1")
    assert not CachePolicy.from_labels(policy.to_labels()).enabled


@pytest.mark.parametrize("labels", [{}, {"com.example.other": "x"}, {SERVICE_LABEL_CACHE_TTL_S: "60"}])
def test_service_without_the_enabled_label_has_no_cache(labels: dict[str, str]) -> None:
    assert CachePolicy.from_labels(labels) == CachePolicy()


def test_enabled_label_only_takes_the_defaults() -> None:
    assert CachePolicy.from_labels({SERVICE_LABEL_CACHE_ENABLED: "true"}) == CachePolicy(
        enabled=True, ttl_s=DEFAULT_CACHE_TTL_S, size_gib=DEFAULT_CACHE_SIZE_GIB, volume_type=DEFAULT_VOLUME_TYPE
    )


@pytest.mark.parametrize(("raw", "enabled"), [("TRUE", True), (" true ", True), ("False", False)])
def test_enabled_label_ignores_case_and_surrounding_spaces(raw: str, enabled: bool) -> None:
    assert CachePolicy.from_labels({SERVICE_LABEL_CACHE_ENABLED: raw}).enabled is enabled


def test_labels_of_a_disabled_cache_are_not_checked() -> None:
    labels = {SERVICE_LABEL_CACHE_ENABLED: "false", SERVICE_LABEL_CACHE_TTL_S: "abc"}
    assert CachePolicy.from_labels(labels) == CachePolicy()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (SERVICE_LABEL_CACHE_ENABLED, "yes"),
        (SERVICE_LABEL_CACHE_ENABLED, "1"),
        (SERVICE_LABEL_CACHE_TTL_S, "abc"),
        (SERVICE_LABEL_CACHE_TTL_S, "1.5"),
        (SERVICE_LABEL_CACHE_TTL_S, "-1"),
        (SERVICE_LABEL_CACHE_TTL_S, str(10 * 365 * DAY + 1)),
        (SERVICE_LABEL_CACHE_SIZE_GIB, "0"),
        (SERVICE_LABEL_CACHE_SIZE_GIB, "16385"),
        (SERVICE_LABEL_CACHE_SIZE_GIB, ""),
        (SERVICE_LABEL_CACHE_VOLUME_TYPE, "gp9"),
        (SERVICE_LABEL_CACHE_VOLUME_TYPE, ""),
    ],
)
def test_malformed_cache_label_is_rejected_naming_the_label_and_its_value(key: str, value: str) -> None:
    labels = {SERVICE_LABEL_CACHE_ENABLED: "true", key: value}
    with pytest.raises(InvalidCachePolicy) as raised:
        CachePolicy.from_labels(labels)
    message = str(raised.value)
    assert key in message
    assert value.strip() in message


def test_invalid_cache_policy_is_a_value_error() -> None:
    # Callers that handle bad input as ValueError (pydantic validators, the director's API) keep working.
    assert issubclass(InvalidCachePolicy, ValueError)


# GroupProperties


def test_group_properties_default_to_no_cache() -> None:
    assert GroupProperties() == GroupProperties(
        ebs_cache_enabled=False,
        cache_ttl_s=DEFAULT_CACHE_TTL_S,
        cache_size_gib=DEFAULT_CACHE_SIZE_GIB,
        volume_type=DEFAULT_VOLUME_TYPE,
    )


@pytest.mark.parametrize("volume_type", VOLUME_TYPES)
def test_group_properties_accept_every_ebs_volume_type(volume_type: str) -> None:
    assert GroupProperties.model_validate({"volume_type": volume_type}).volume_type == volume_type


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cache_ttl_s", -1),
        ("cache_ttl_s", 10 * 365 * DAY + 1),
        ("cache_size_gib", 0),
        ("cache_size_gib", -5),
        ("cache_size_gib", 16_385),
        ("volume_type", "gp9"),
        ("volume_type", "GP3"),
        ("ebs_cache_enabled", "maybe"),
    ],
)
def test_group_properties_reject_values_ebs_cannot_honour(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as raised:
        GroupProperties.model_validate({field: value})
    assert field in str(raised.value)


def test_group_properties_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError, match="cache_ttl"):
        GroupProperties.model_validate({"cache_ttl": 60})


def test_group_properties_accept_the_edges_of_their_ranges() -> None:
    low = GroupProperties(cache_ttl_s=0, cache_size_gib=1)
    high = GroupProperties(cache_ttl_s=10 * 365 * DAY, cache_size_gib=16_384)
    assert (low.cache_ttl_s, low.cache_size_gib) == (0, 1)
    assert (high.cache_ttl_s, high.cache_size_gib) == (10 * 365 * DAY, 16_384)


def test_group_properties_are_frozen() -> None:
    props = GroupProperties()
    with pytest.raises(ValidationError):
        props.cache_ttl_s = 5


# Expiry timestamps


def test_timestamp_is_iso_8601_utc_in_whole_seconds() -> None:
    assert format_timestamp(1_700_000_000) == "2023-11-14T22:13:20Z"
    assert format_timestamp(1_700_000_000.9) == "2023-11-14T22:13:20Z"
    assert format_timestamp(0) == "1970-01-01T00:00:00Z"


@pytest.mark.parametrize("epoch_s", [0, 1_700_000_000, 1_700_000_000 + 86_400 * 365, 4_102_444_800])
def test_timestamp_round_trips(epoch_s: int) -> None:
    assert parse_timestamp(format_timestamp(epoch_s)) == epoch_s


@pytest.mark.parametrize("local_zone", ["UTC", "America/New_York", "Asia/Kolkata"])
def test_timestamps_are_utc_whatever_the_local_zone(local_zone: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Read or written as local time anywhere but UTC, an expiry would be hours off.
    monkeypatch.setenv("TZ", local_zone)
    time.tzset()
    try:
        assert parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000
        assert format_timestamp(1_700_000_000) == "2023-11-14T22:13:20Z"
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    "text",
    ["", "abc", "1700000000", "2023-11-14", "2023-11-14T22:13:20", "2023-11-14T22:13:20+00:00", "2023-13-01T00:00:00Z"],
)
def test_text_that_is_not_a_timestamp_of_ours_parses_to_none(text: str) -> None:
    assert parse_timestamp(text) is None


# Growth (cache_max_size_gib)


def test_growth_is_off_unless_a_group_sets_a_larger_size() -> None:
    policy = effective_cache_policy([GroupProperties(ebs_cache_enabled=True, cache_size_gib=20)])

    assert (policy.max_size_gib, policy.grow_limit_gib) == (None, 0)  # issue 42: not even up to cache_size_gib
    assert SERVICE_LABEL_CACHE_MAX_SIZE_GIB not in policy.to_labels()  # older services' labels stay as they were


def test_the_largest_max_size_among_groups_with_the_cache_on_wins() -> None:
    groups = [
        GroupProperties(ebs_cache_enabled=True, cache_size_gib=20, cache_max_size_gib=100),
        GroupProperties(ebs_cache_enabled=True, cache_size_gib=10, cache_max_size_gib=300),
        GroupProperties(ebs_cache_enabled=False, cache_max_size_gib=9000),  # no cache: its terms do not apply
    ]

    policy = effective_cache_policy(groups)

    assert (policy.size_gib, policy.max_size_gib, policy.grow_limit_gib) == (20, 300, 300)
    assert CachePolicy.from_labels(policy.to_labels()) == policy


def test_a_max_size_below_the_size_means_no_growth() -> None:
    assert CachePolicy(enabled=True, size_gib=50, max_size_gib=10).grow_limit_gib == 0
    assert CachePolicy(enabled=True, size_gib=50, max_size_gib=50).grow_limit_gib == 0


@pytest.mark.parametrize("raw", ["0", "16385", "big", "-1"])
def test_an_unreadable_max_size_label_is_refused_by_name(raw: str) -> None:
    labels = {**CachePolicy(enabled=True).to_labels(), SERVICE_LABEL_CACHE_MAX_SIZE_GIB: raw}

    with pytest.raises(InvalidCachePolicy, match=SERVICE_LABEL_CACHE_MAX_SIZE_GIB):
        CachePolicy.from_labels(labels)


@pytest.mark.parametrize("value", [0, 16_385])
def test_the_max_size_property_is_bounded_by_ebs(value: int) -> None:
    with pytest.raises(ValidationError):
        GroupProperties(cache_max_size_gib=value)
