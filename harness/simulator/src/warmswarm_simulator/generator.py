"""A realistic day of sessions from a seed: the morning ramp, a class of 100 within two minutes, lunch-break returns,
returns later the same day and the next morning (some after their cache's TTL, some asking for more resources), and a
tail of large jobs. The same seed always gives the same trace."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_simulator.dayspec import ClassSpec, DaySpec, LargeSpec, Profile, RegularSpec
from warmswarm_simulator.workload import Session, ordered

# A session is planned to end this long after its duration: room for its wait, so that a return of the same owner
# is not planned to arrive while the first session may still run.
_WAIT_MARGIN_S = 900.0
_MIN_DURATION_S = 300.0
# What a reopen is planned after: the first session's own wait, about four minutes on a cold machine. A reopen that
# comes before the first session has ended waits for it (the platform defers it).
_TYPICAL_WAIT_S = 240.0


@dataclass(slots=True)
class _Day:
    spec: DaySpec
    rng: random.Random
    sessions: list[Session] = field(default_factory=list)
    busy: dict[tuple[str, str, str], list[tuple[float, float]]] = field(default_factory=dict)  # planned (start, end)
    data_gb: dict[tuple[str, str, str], float] = field(default_factory=dict)
    profiles: dict[tuple[str, str, str], str] = field(default_factory=dict)  # a regular owner's profile, by name

    def free(self, owner: tuple[str, str, str], start_s: float, duration_s: float, after_s: float) -> bool:
        """No session of this owner is planned within `after_s` before `start_s`, nor during the new session."""
        end_s = start_s + duration_s + _WAIT_MARGIN_S
        return all(end_s <= a or start_s >= b + after_s for a, b in self.busy.get(owner, []))

    def add(
        self,
        owner: tuple[str, str, str],
        start_s: float,
        duration_s: float,
        profile: Profile,
        group: str,
        after_s: float = _WAIT_MARGIN_S,
        latest_s: float | None = None,
    ) -> Session | None:
        """The session, or None when it would arrive after `latest_s` (the day's end of arrivals unless given) or
        while its owner may still work."""
        latest_s = self.spec.end_of_arrivals_s if latest_s is None else latest_s
        if start_s > latest_s or not self.free(owner, start_s, duration_s, after_s):
            return None
        self.busy.setdefault(owner, []).append((start_s, start_s + duration_s))
        user, project, node = owner
        session = Session(
            arrival_s=round(start_s, 1),
            user=user,
            project=project,
            node=node,
            cpus=profile.cpus,
            memory_gib=profile.memory_gib,
            gpus=profile.gpus,
            duration_s=round(duration_s),
            group=group,
            data_gb=round(self.data_gb[owner], 2),
        )
        self.sessions.append(session)
        return session


def generate_day(spec: DaySpec, seed: int) -> list[Session]:
    day = _Day(spec, random.Random(seed))
    _regular(day, spec.regular)
    _class(day, spec.klass)
    _large(day, spec.large)
    return ordered(day.sessions)


def _weighted(rng: random.Random, weights: Mapping[str, float]) -> str:
    names = sorted(weights)
    return rng.choices(names, weights=[weights[n] for n in names])[0]


def _lognormal(rng: random.Random, median: float, sigma: float, low: float, high: float) -> float:
    return min(high, max(low, median * math.exp(sigma * rng.gauss(0.0, 1.0))))


def _rate_at(points: tuple[tuple[float, float], ...], t_s: float) -> float:
    for (t0, r0), (t1, r1) in itertools.pairwise(points):
        if t0 <= t_s <= t1:
            return r0 + (r1 - r0) * (t_s - t0) / (t1 - t0) if t1 > t0 else r0
    return 0.0


def _arrival(rng: random.Random, points: tuple[tuple[float, float], ...]) -> float:
    """A time drawn from the relative rate profile (rejection sampling: deterministic for a seeded rng)."""
    start_s, end_s = points[0][0], points[-1][0]
    peak = max(r for _, r in points)
    while True:
        t_s = rng.uniform(start_s, end_s)
        if rng.uniform(0.0, peak) <= _rate_at(points, t_s):
            return t_s


def _regular(day: _Day, spec: RegularSpec) -> None:
    rng = day.rng
    users = [f"u{i:04d}" for i in range(1, spec.users + 1)]
    groups = {user: _weighted(rng, spec.groups) for user in users}
    for user in users:
        for node in ("n1", "n2"):
            day.data_gb[(user, f"p-{user}", node)] = _lognormal(
                rng, spec.data_median_gb, spec.data_sigma, spec.data_min_gb, spec.data_max_gb
            )
    arrivals = sorted(_arrival(rng, spec.rate) for _ in range(spec.first_sessions))
    for start_s in arrivals:
        duration_s = _lognormal(
            rng, spec.duration_median_s, spec.duration_sigma, spec.duration_min_s, spec.duration_max_s
        )
        drawn = _weighted(rng, spec.profiles)
        for _try in range(20):  # a user free at that time: their earlier session of this node is over
            user = rng.choice(users)
            node = "n2" if rng.random() < spec.second_node_share else "n1"
            owner = (user, f"p-{user}", node)
            if day.free(owner, start_s, duration_s, _WAIT_MARGIN_S):
                break
        else:
            continue
        # A node of a project is one service: it keeps its resources until its owner asks for more (_next_size).
        profile = day.spec.profiles[day.profiles.setdefault(owner, drawn)]
        lunch_stop_s = rng.uniform(*spec.lunch_stop_s)
        if start_s < lunch_stop_s - _MIN_DURATION_S < start_s + duration_s and rng.random() < spec.lunch_share:
            # Stops for lunch and comes back for the rest of the work.
            before_s = lunch_stop_s - start_s
            day.add(owner, start_s, before_s, profile, groups[user])
            back_s = lunch_stop_s + rng.uniform(spec.lunch_gap_min_s, spec.lunch_gap_max_s)
            day.add(owner, back_s, max(_MIN_DURATION_S, duration_s - before_s), profile, groups[user])
            last_end_s = back_s + duration_s - before_s
        else:
            day.add(owner, start_s, duration_s, profile, groups[user])
            last_end_s = start_s + duration_s
        if rng.random() < spec.reopen_share:
            # Closed and opened again minutes later (a restart, a second thought): planned after a typical wait.
            again_s = last_end_s + _TYPICAL_WAIT_S + rng.uniform(spec.reopen_gap_min_s, spec.reopen_gap_max_s)
            short_s = max(_MIN_DURATION_S, duration_s / 2)
            name = _next_size(day, owner, spec)
            reopened = day.add(owner, again_s, short_s, day.spec.profiles[name], groups[user], after_s=_TYPICAL_WAIT_S)
            if reopened is not None:
                day.profiles[owner] = name
                last_end_s = again_s + short_s
        if rng.random() < spec.return_share:
            back_s = last_end_s + _WAIT_MARGIN_S + rng.uniform(spec.return_gap_min_s, spec.return_gap_max_s)
            again_s = _lognormal(
                rng, spec.duration_median_s, spec.duration_sigma, spec.duration_min_s, spec.duration_max_s
            )
            name = _next_size(day, owner, spec)
            if day.add(owner, back_s, again_s, day.spec.profiles[name], groups[user]) is not None:
                day.profiles[owner] = name
    _next_morning(day, spec, groups)


def _next_size(day: _Day, owner: tuple[str, str, str], spec: RegularSpec) -> str:
    """The profile the owner's next session asks for: the next size up for `bigger_share` of them (kept from then on
    only if that session is added), else the one the node has."""
    name = day.profiles[owner]
    bigger = spec.bigger_profiles.get(name)
    if bigger is not None and day.rng.random() < spec.bigger_share:
        return bigger
    return name


def _next_morning(day: _Day, spec: RegularSpec, groups: Mapping[str, str]) -> None:
    """Owners of the day back the next working morning: after their lab cache's day for those who left early."""
    rng = day.rng
    for owner in list(day.profiles):  # the order the day first saw them in: the same on every run
        if not day.busy.get(owner) or rng.random() >= spec.next_morning_share:
            continue
        back_s = rng.uniform(*spec.next_morning_s)
        duration_s = _lognormal(
            rng, spec.duration_median_s, spec.duration_sigma, spec.duration_min_s, spec.duration_max_s
        )
        name = _next_size(day, owner, spec)
        profile = day.spec.profiles[name]
        if day.add(owner, back_s, duration_s, profile, groups[owner[0]], latest_s=spec.next_morning_s[1]) is not None:
            day.profiles[owner] = name


def _class(day: _Day, spec: ClassSpec) -> None:
    rng = day.rng
    profile = day.spec.profiles[spec.profile]
    for i in range(1, spec.size + 1):
        owner = (f"s{i:03d}", f"course-s{i:03d}", "n1")
        day.data_gb[owner] = rng.uniform(spec.data_min_gb, spec.data_max_gb)
        start_s = spec.at_s + rng.uniform(0.0, spec.window_s)
        day.add(owner, start_s, rng.uniform(spec.duration_min_s, spec.duration_max_s), profile, spec.group)
        if rng.random() < spec.homework_share:
            back_s = rng.uniform(spec.homework_from_s, spec.homework_to_s)
            day.add(owner, back_s, spec.homework_duration_s * rng.uniform(0.7, 1.3), profile, spec.group)


def _large(day: _Day, spec: LargeSpec) -> None:
    rng = day.rng
    for i in range(1, spec.jobs + 1):
        owner = (f"h{i:02d}", f"job-h{i:02d}", "n1")
        day.data_gb[owner] = rng.uniform(spec.data_min_gb, spec.data_max_gb)
        profile = day.spec.profiles[_weighted(rng, spec.profiles)]
        start_s = rng.uniform(spec.from_s, spec.to_s)
        duration_s = rng.uniform(spec.duration_min_s, spec.duration_max_s)
        day.add(owner, start_s, duration_s, profile, spec.group)
        if rng.random() < spec.return_share:
            back_s = start_s + duration_s + _WAIT_MARGIN_S + rng.uniform(3600.0, 4 * 3600.0)
            day.add(owner, back_s, rng.uniform(spec.duration_min_s, spec.duration_max_s) / 2, profile, spec.group)
