"""The default day's parameters (model.toml's [day] tables) as typed values: groups, session profiles, arrivals."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from warmswarm_models import GroupProperties

from warmswarm_simulator.config import clock_s


@dataclass(frozen=True, slots=True)
class Profile:
    cpus: float
    memory_gib: float
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class RegularSpec:
    users: int
    first_sessions: int
    rate: tuple[tuple[float, float], ...]  # (day s, relative rate), linear in between
    profiles: Mapping[str, float]
    groups: Mapping[str, float]
    duration_median_s: float
    duration_sigma: float
    duration_min_s: float
    duration_max_s: float
    data_median_gb: float
    data_sigma: float
    data_min_gb: float
    data_max_gb: float
    second_node_share: float
    reopen_share: float
    reopen_gap_min_s: float
    reopen_gap_max_s: float
    return_share: float
    return_gap_min_s: float
    return_gap_max_s: float
    lunch_share: float
    lunch_stop_s: tuple[float, float]
    lunch_gap_min_s: float
    lunch_gap_max_s: float
    next_morning_share: float  # of the owners with a session today: back the next morning
    next_morning_s: tuple[float, float]  # the window, day seconds (past 86 400: the next day)
    bigger_share: float  # of reopens and returns: the owner asks for the next size up
    bigger_profiles: Mapping[str, str]  # profile -> the next size up (a profile without one stays as it is)


@dataclass(frozen=True, slots=True)
class ClassSpec:
    size: int
    at_s: float
    window_s: float
    duration_min_s: float
    duration_max_s: float
    profile: str
    group: str
    data_min_gb: float
    data_max_gb: float
    homework_share: float
    homework_from_s: float
    homework_to_s: float
    homework_duration_s: float


@dataclass(frozen=True, slots=True)
class LargeSpec:
    jobs: int
    from_s: float
    to_s: float
    profiles: Mapping[str, float]
    group: str
    duration_min_s: float
    duration_max_s: float
    data_min_gb: float
    data_max_gb: float
    return_share: float


@dataclass(frozen=True, slots=True)
class DaySpec:
    groups: Mapping[str, GroupProperties]
    profiles: Mapping[str, Profile]
    regular: RegularSpec
    klass: ClassSpec
    large: LargeSpec
    end_of_arrivals_s: float


def day_spec(raw: Mapping[str, Any]) -> DaySpec:
    regular = dict(raw["regular"])
    regular["rate"] = tuple((clock_s(t), float(r)) for t, r in regular["rate"])
    regular["lunch_stop_s"] = tuple(clock_s(t) for t in regular.pop("lunch_stop"))
    regular["next_morning_s"] = tuple(clock_s(t) for t in regular.pop("next_morning"))
    klass = dict(raw["class"])
    klass["at_s"] = clock_s(klass.pop("at"))
    klass["homework_from_s"] = clock_s(klass.pop("homework_from"))
    klass["homework_to_s"] = clock_s(klass.pop("homework_to"))
    large = dict(raw["large"])
    large["from_s"] = clock_s(large.pop("from"))
    large["to_s"] = clock_s(large.pop("to"))
    unknown = {p for pair in regular["bigger_profiles"].items() for p in pair} - set(raw["profiles"])
    if unknown:
        raise ValueError(f"[day.regular] bigger_profiles names profiles that [day.profiles] has not: {sorted(unknown)}")
    return DaySpec(
        groups={name: GroupProperties(**props) for name, props in raw["groups"].items()},
        profiles={name: Profile(**p) for name, p in raw["profiles"].items()},
        regular=RegularSpec(**regular),
        klass=ClassSpec(**klass),
        large=LargeSpec(**large),
        end_of_arrivals_s=clock_s(raw["end_of_arrivals"]),
    )


# The small day's cache TTLs are the day's over this: a day's cache kept 4 h, the course's 4 h kept 40 min, so that
# its returns, hours apart at most, come both within and after their TTL as the full day's do.
_SMALL_TTL_DIVISOR = 6


def small_day(spec: DaySpec) -> DaySpec:
    """A morning in miniature for the test suite: a few regular users, a class of 10, one large job, each rule of the
    full day present (ramp, class burst, lunch returns, returns, bigger returns, homework after its cache's TTL, a
    large job) but no night: its next-morning returns are the full day's alone."""
    regular = replace(
        spec.regular,
        users=12,
        first_sessions=14,
        rate=((8 * 3600.0, 0.0), (9 * 3600.0, 1.0), (11 * 3600.0, 1.0), (12 * 3600.0, 0.0)),
        return_gap_min_s=1800.0,
        return_gap_max_s=3600.0,
        next_morning_share=0.0,
        # A handful of returns: at the day's 15 % the small day might have none that asks for more.
        bigger_share=max(spec.regular.bigger_share, 0.5),
    )
    klass = replace(spec.klass, size=10, at_s=9.5 * 3600.0, homework_from_s=12.5 * 3600.0, homework_to_s=13.5 * 3600.0)
    large = replace(
        spec.large, jobs=1, from_s=9 * 3600.0, to_s=10 * 3600.0, duration_min_s=3600.0, duration_max_s=5400.0
    )
    groups = {
        name: g.model_copy(update={"cache_ttl_s": g.cache_ttl_s // _SMALL_TTL_DIVISOR})
        for name, g in spec.groups.items()
    }
    return replace(spec, regular=regular, klass=klass, large=large, groups=groups, end_of_arrivals_s=15 * 3600.0)
