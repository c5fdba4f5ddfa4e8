"""Each family's candidates for the fair comparison, every buffer stated in machines in the cluster.

warmswarm keeps its buffers per type and zone, the baseline (osparc's hot_buffer_count, buffer_count) per type for
the whole cluster. The day has ZONES zones, so the baseline's sizes are warmswarm's per-zone sizes x ZONES (a hot
buffer of 2 + 1 a zone is 6 + 3 in the cluster) and the names give both in the cluster's machines: the grids line
up. Every knob that a pick sat at the end of is tried past that end (the baseline's drained wind-down, its poll
and its empty-to-drain interval; warmswarm's grace, warm tier, the warm buffer's t3.large and the hot buffer behind
no warm buffer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.policies import PolicySpec

# The day's availability zones (model.toml's availability_zones; a test holds them equal).
ZONES = 3
_GROUPS = ("lab", "guests", "compute", "course")


def in_cluster(per_zone: Mapping[str, int]) -> dict[str, int]:
    """A per-zone buffer's machines in the whole cluster."""
    return {t: n * ZONES for t, n in per_zone.items()}


def buffer_text(cluster: Mapping[str, int]) -> str:
    """A buffer in the cluster's machines, t3.medium first: '6 + 3 large', '3', 'none'."""
    medium, large = cluster.get("t3.medium", 0), cluster.get("t3.large", 0)
    if not medium and not large:
        return "none"
    return f"{medium} + {large} large" if large else f"{medium}"


def _baseline(name: str, **settings: Any) -> PolicySpec:
    return PolicySpec(name, "baseline", name, settings=settings)


def _hot_baseline(per_zone: Mapping[str, int], **knobs: Any) -> PolicySpec:
    """The baseline with a hot buffer of warmswarm's `per_zone` size x ZONES, named by its machines in the cluster."""
    cluster = in_cluster(per_zone)
    words = [f"{k.removesuffix('_s').replace('_', ' ')} {v:g} s" for k, v in knobs.items()]
    name = ", ".join([f"hot {buffer_text(cluster)}", *words])
    return _baseline(name, hot_buffers=cluster, **knobs)


def _warmswarm(name: str, warm_ttl_s: int, **settings: Any) -> PolicySpec:
    groups = {g: {"warm_ttl_s": warm_ttl_s} for g in _GROUPS} if warm_ttl_s else {}
    return PolicySpec(name, "warmswarm", name, settings=settings, groups=groups)


def _buffered(
    warm: Mapping[str, int], *, warm_ttl_s: int = 7200, idle_grace_s: float = 120.0, suffix: str = ""
) -> PolicySpec:
    """warmswarm with a grace, the warm tier when warm_ttl_s (no cap below the fleet's on stopped machines), and a
    warm buffer of `warm` machines per type and zone, the session image pulled into it."""
    settings: dict[str, Any] = {"idle_grace_s": idle_grace_s}
    if warm_ttl_s:
        settings["max_stopped_instances"] = 200
    settings.update(warm_buffer=dict(warm), buffer_images=[SESSION_IMAGE])
    return _warmswarm(f"warm {buffer_text(in_cluster(warm))}{suffix}", warm_ttl_s, **settings)


# warmswarm-best's warm buffer per zone (24 + 12 in the cluster), which the hot families keep unless told otherwise.
_WARM_BEST = {"t3.medium": 8, "t3.large": 4}


def _hot(hot: Mapping[str, int], warm: Mapping[str, int] | None = None) -> PolicySpec:
    """warmswarm-best (grace 120 s, warm tier 2 h, its warm buffer unless `warm`) plus a hot buffer of `hot` running,
    joined, pulled machines per type and zone."""
    warm = _WARM_BEST if warm is None else warm
    spec = _buffered(warm)
    name = f"hot {buffer_text(in_cluster(hot))}, warm {buffer_text(in_cluster(warm))}"
    return replace(spec, name=name, label=name, settings={**spec.settings, "hot_buffer": dict(hot)})


def _demand(hot: Mapping[str, int], warm: Mapping[str, int] | None = None, **knobs: float) -> PolicySpec:
    """_hot with both buffers sized by demand: the counts become each type's maximum per zone, `knobs` (the demand
    rule's buffer_window_s, buffer_headroom) differ from the settings' defaults (30 min, x1.5)."""
    spec = _hot(hot, warm)
    window_s, headroom = knobs.get("buffer_window_s", 1800.0), knobs.get("buffer_headroom", 1.5)
    name = f"demand {window_s / 60:g} min x{headroom:g}, max {spec.name}"
    return replace(spec, name=name, label=name, settings={**spec.settings, "buffer_sizing": "demand", **knobs})


def _reserved(spec: PolicySpec) -> PolicySpec:
    """`spec` with the day's classes declared as reservations ahead of their start (reserved.py)."""
    name = f"{spec.name}, class reserved"
    return replace(spec, name=name, label=name, reserve_classes=True)


def _recycling(spec: PolicySpec) -> PolicySpec:
    """`spec` with every group's idle machines recycled (scrubbed into the buffer instead of terminated) and every
    group accepting recycled machines (plan/recycle.py)."""
    name = f"{spec.name}, recycled"
    groups = {g: {**spec.groups.get(g, {}), "recycle_machines": True, "accept_recycled": True} for g in _GROUPS}
    return replace(spec, name=name, label=name, groups=groups)


def _growing(spec: PolicySpec, start_gib: int, max_gib: int, compute: tuple[int, int] = (64, 128)) -> PolicySpec:
    """`spec` with cache volumes that start small and grow with their data (plan/grow.py, issue 34): the 20 GiB
    groups (lab, course) start at `start_gib` and may grow to `max_gib`; the compute group's 100 GiB by `compute`,
    (start, max)."""
    sizes = {"lab": (start_gib, max_gib), "course": (start_gib, max_gib), "compute": compute}
    name = f"{spec.name}, cache {start_gib}->{max_gib} GiB (compute {compute[0]}->{compute[1]})"
    groups = {g: dict(spec.groups.get(g, {})) for g in _GROUPS}
    for group, (size_gib, limit_gib) in sizes.items():
        groups[group].update(cache_size_gib=size_gib, cache_max_size_gib=limit_gib)
    return replace(spec, name=name, label=name, groups={g: v for g, v in groups.items() if v})


_T3 = {"t3.medium": 1}
_T3_21 = {"t3.medium": 2, "t3.large": 1}
_T3_31 = {"t3.medium": 3, "t3.large": 1}
_T3_42 = {"t3.medium": 4, "t3.large": 2}
_T3_63 = {"t3.medium": 6, "t3.large": 3}
_T3_84 = {"t3.medium": 8, "t3.large": 4}
_NONE: dict[str, int] = {}

# Each family's candidates. Buffers in the names: machines in the cluster (t3.medium + t3.large).
CANDIDATES: Mapping[str, tuple[PolicySpec, ...]] = {
    "baseline": (
        _baseline("fresh"),
        # Its hot buffer at warmswarm's per-zone sizes x 3 zones.
        _hot_baseline(_T3),
        _hot_baseline(_T3_21),
        _hot_baseline(_T3_31),
        _hot_baseline(_T3_42),
        _hot_baseline(_T3_63),
        _hot_baseline(_T3_84),
        # The former pick (2 + 1 in the whole cluster, drained 300 s): not a whole number a zone, kept as evidence.
        _baseline("hot 2 + 1 large, drained to terminating 300 s", hot_buffers=_T3_21, drained_to_terminating_s=300.0),
        # The drained wind-down was tried at 60 and 300 s and its pick sat at 300: past that edge.
        _hot_baseline(_T3_21, drained_to_terminating_s=300.0),
        _hot_baseline(_T3_21, drained_to_terminating_s=600.0),
        _hot_baseline(_T3_21, drained_to_terminating_s=1200.0),
        _baseline("drained to terminating 600 s", drained_to_terminating_s=600.0),
        # Its poll (10 s) and empty-to-drain (10 s) were never varied: both sides of each.
        _hot_baseline(_T3_21, poll_interval_s=2.0),
        _hot_baseline(_T3_21, poll_interval_s=5.0),
        _hot_baseline(_T3_21, poll_interval_s=20.0),
        _hot_baseline(_T3_21, empty_to_drain_s=0.0),
        _hot_baseline(_T3_21, empty_to_drain_s=60.0),
        _hot_baseline(_T3_21, empty_to_drain_s=300.0),
        # osparc's warm buffer at warmswarm-best's size (8 + 4 a zone), behind the hot buffer.
        _baseline(
            "hot 6 + 3 large, warm 24 + 12 large", hot_buffers=in_cluster(_T3_21), warm_buffers=in_cluster(_T3_84)
        ),
    ),
    "warmswarm": (
        _warmswarm("fresh", 0),
        _warmswarm("grace 120 s", 0, idle_grace_s=120.0),
        _buffered({"t3.medium": 8}),
        _buffered({"t3.medium": 16}),
        _buffered(_T3_84),  # the former pick
        # The former pick sat on the edges of the warm buffer's t3.large (4 a zone), the grace (120 s) and the warm
        # tier (2 h): past each.
        _buffered({"t3.medium": 16, "t3.large": 8}),
        _buffered(_T3_84, idle_grace_s=60.0, suffix=", grace 60 s"),
        _buffered(_T3_84, warm_ttl_s=4 * 3600, suffix=", warm tier 4 h"),
    ),
    # warmswarm-best plus a hot buffer: its size and mix, and behind it the warm buffer of warmswarm-best or none (the
    # former pick had none, the smallest tried: bigger hot buffers on none, past that edge).
    "warmswarm-hot": (
        _hot(_T3),
        _hot(_T3_21),
        _hot(_T3_63),
        _hot(_T3_21, _NONE),  # the former pick
        _hot(_T3_42, _NONE),
        _hot(_T3_63, _NONE),
    ),
    # Both buffers sized by demand (plan/demand.py): ceil(arrivals / window x refill x headroom), hot first; the counts
    # are the maxima. No daily budget.
    "warmswarm-hot-demand": (
        _demand(_T3_21),
        _demand(_T3_21, buffer_headroom=3.0),  # the former pick
        _demand(_T3_42, buffer_headroom=6.0),
    ),
    # Recycling (issue 33) on the other families' picks: every group recycles its idle machines into the buffers and
    # accepts recycled ones, so a machine an owner leaves serves the next owner once scrubbed instead of a launch.
    "warmswarm-recycle": (
        _recycling(_buffered(_T3_84)),
        _recycling(_hot(_T3_21, _NONE)),
        _recycling(_demand(_T3_21, buffer_headroom=3.0)),
        # A machine recycles only into a buffer with room: bigger hot buffers take more of them (and more first
        # sessions hot), at the price of the machines they hold.
        _recycling(_hot(_T3_42, _NONE)),
        _recycling(_hot(_T3_63, _NONE)),
    ),
    # Cache volumes that start small and grow (issue 34 part 3): the start size, tried on the recycled hot pick on
    # seed 1 only (`choose`-like, docs/simulation.md, "Volumes that grow"), beside today's fixed volumes.
    "warmswarm-grow-choice": (
        _recycling(_hot(_T3_21, _NONE)),
        _growing(_recycling(_hot(_T3_21, _NONE)), 4, 40),
        _growing(_recycling(_hot(_T3_21, _NONE)), 6, 40),
        _growing(_recycling(_hot(_T3_21, _NONE)), 8, 40),
        _growing(_recycling(_hot(_T3_21, _NONE)), 6, 40, (32, 128)),
    ),
    # The held-out comparison: both hot picks with today's fixed volumes and with the start chosen on seed 1.
    "warmswarm-grow": (
        _hot(_T3_21, _NONE),
        _growing(_hot(_T3_21, _NONE), 6, 40, (32, 128)),
        _recycling(_hot(_T3_21, _NONE)),
        _growing(_recycling(_hot(_T3_21, _NONE)), 6, 40, (32, 128)),
    ),
    # The day's class declared as a reservation (the autoscaler's API: its group, 100 sessions of the notebook size at
    # 10:00) on top of the other families' picks: the hot buffer raised for it from its lead time.
    "warmswarm-reserved": (
        _reserved(_warmswarm("grace 120 s", 0, idle_grace_s=120.0)),
        _reserved(_buffered(_T3_84)),
        _reserved(_hot(_T3_21, _NONE)),
    ),
}
