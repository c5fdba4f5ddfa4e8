"""What one run measured: waits, the cache's hits, data downloaded, the bill, API calls, the fleet over time."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from warmswarm_ec2rules.throttling import THROTTLE_CODES

from warmswarm_simulator.billing import DAY_S, Bill
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.phases import PhaseSummary, SessionPhases, summarise
from warmswarm_simulator.platform import START_PATHS, Platform, SessionRecord
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.simports import SimEc2
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.workload import Session


@dataclass(frozen=True, slots=True)
class RunResult:
    name: str
    label: str
    kind: str
    sessions: int
    never_ran: int
    waits_s: tuple[float, ...]  # of the sessions that ran, ascending
    # Returns of owners whose groups keep a cache, by how long after their previous session ended they came back.
    returns_within_ttl: int
    hits_within_ttl: int
    returns_within_day: int
    hits_within_day: int
    # Every return of a cache owner, whatever its gap: those after the TTL too, where the cache can miss.
    returns_overall: int
    hits_overall: int
    # Returns of cache owners asking for more of a resource than the owner's previous session (another machine type,
    # the same data), and their waits, ascending: how the planner treats an owner who outgrew their machine.
    bigger_returns: int
    bigger_hits: int
    bigger_return_waits_s: tuple[float, ...]
    downloaded_gb: float
    bill: Bill
    api_calls: tuple[tuple[str, str, int], ...]  # (operation, outcome code, calls), sorted
    peak_machines: int
    machines_launched: int
    volumes_created: int
    interruptions: int
    deferred: int
    joined_without_cache: int
    # The warm tier: StopInstances and StartInstances that took, machine-hours stopping or stopped (disks billed,
    # no compute), the most machines stopped at once, and the waits of the sessions whose first run was on their
    # owner's machine started again for them (ascending).
    machines_stopped: int
    machines_resumed: int
    stopped_hours: float
    stopped_root_usd: float  # what the stopped machines' root disks cost while stopped: the warm tier's own bill
    peak_stopped: int
    resumed_waits_s: tuple[float, ...]
    # The warm buffer: its machines stopped once their images were pulled, those started for the owner who claimed
    # them, the waits of the sessions that first ran on a claimed buffer machine and how many of them were their
    # owner's first of the day, and the waits of every owner's first session of the day (ascending). Its bill is
    # bill.buffer_usd, for the day's 24 h (billing.py).
    buffer_stops: int
    buffer_starts: int
    buffer_waits_s: tuple[float, ...]
    buffer_first_sessions: int
    first_waits_s: tuple[float, ...]
    end_s: float  # when nothing but the standing warm buffer, if any, was left (day seconds)
    fleet_series: tuple[tuple[float, int, int], ...]  # (day s, machines pending or running, machines stopped)
    running_series: tuple[tuple[float, int], ...]  # (day s, sessions running)
    # Each session that ran: its wait cut into phases (phases.PHASES), in the trace's order.
    phases: tuple[SessionPhases, ...] = ()
    # (day s, hot buffer machines held, warm buffer machines held), nobody's yet: cloud.Cloud.buffer_series.
    buffer_series: tuple[tuple[float, int, int], ...] = ()
    # (start path, sessions), platform.START_PATHS' order: how each session that ran got its first machine.
    start_paths: tuple[tuple[str, int], ...] = ()
    # Cache volumes that fill (cache_writes.py): the sessions whose writes found their volume full, the hours they
    # waited for room, the ModifyVolume calls that took, and each owner's data on their volume when last seen, GB.
    full_sessions: int = 0
    full_hours: float = 0.0
    volumes_grown: int = 0
    owner_data_gb: tuple[float, ...] = ()

    def start_path_shares(self) -> dict[str, float]:
        """Each start path's share of the sessions that ran (they add up to 1; empty when none ran)."""
        total = sum(n for _, n in self.start_paths)
        return {path: n / total for path, n in self.start_paths} if total else {}

    def buffer_held_hours(self) -> tuple[float, float]:
        """Machine-hours the hot and the warm buffer held over the run (to end_s)."""
        ends = [t for t, _, _ in self.buffer_series[1:]] + [self.end_s]
        hot = sum((end - t) * n for (t, n, _), end in zip(self.buffer_series, ends, strict=True)) / 3600.0
        warm = sum((end - t) * n for (t, _, n), end in zip(self.buffer_series, ends, strict=True)) / 3600.0
        return hot, warm

    @property
    def first_phases(self) -> PhaseSummary:
        """The phases of owners' first sessions of the day."""
        return summarise(p for p in self.phases if p.first)

    @property
    def return_phases(self) -> PhaseSummary:
        """The phases of returns: an owner's later sessions of the day."""
        return summarise(p for p in self.phases if not p.first)

    @property
    def reused_across_owners(self) -> int:
        """Sessions that ran on a machine another owner's session had run on before."""
        return sum(1 for p in self.phases if p.reused_across_owners)

    @property
    def wait_p50_s(self) -> float:
        return percentile(self.waits_s, 50)

    @property
    def wait_p95_s(self) -> float:
        return percentile(self.waits_s, 95)

    @property
    def wait_max_s(self) -> float:
        return self.waits_s[-1] if self.waits_s else math.nan

    @property
    def resumed_wait_p50_s(self) -> float:
        return percentile(self.resumed_waits_s, 50)

    @property
    def buffer_wait_p50_s(self) -> float:
        return percentile(self.buffer_waits_s, 50)

    @property
    def first_wait_p50_s(self) -> float:
        return percentile(self.first_waits_s, 50)

    @property
    def hit_rate_within_ttl(self) -> float:
        return self.hits_within_ttl / self.returns_within_ttl if self.returns_within_ttl else math.nan

    @property
    def hit_rate_within_day(self) -> float:
        return self.hits_within_day / self.returns_within_day if self.returns_within_day else math.nan

    @property
    def hit_rate_overall(self) -> float:
        return self.hits_overall / self.returns_overall if self.returns_overall else math.nan

    @property
    def bigger_return_wait_p50_s(self) -> float:
        return percentile(self.bigger_return_waits_s, 50)

    @property
    def throttled(self) -> int:
        # Either bucket's refusal: the request bucket's or, for launches, stops and starts, the instances bucket's.
        return sum(n for _, code, n in self.api_calls if code in THROTTLE_CODES)

    def calls(self, operation: str) -> int:
        return sum(n for op, _, n in self.api_calls if op == operation)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _is_return(record: SessionRecord, window_s: float) -> bool:
    gap_s = record.gap_s
    return record.cache.enabled and gap_s is not None and gap_s <= window_s


def _bigger_returns(records: Sequence[SessionRecord]) -> list[SessionRecord]:
    """Returns of cache owners whose session asks for more CPUs, memory or GPUs than the owner's previous one."""
    previous: dict[tuple[str, str, str], Session] = {}
    bigger = []
    for record in sorted(records, key=lambda r: (r.session.arrival_s, r.session.owner)):
        session = record.session
        before = previous.get(session.owner)
        previous[session.owner] = session
        if before is None or not _is_return(record, math.inf):
            continue
        if session.cpus > before.cpus or session.memory_gib > before.memory_gib or session.gpus > before.gpus:
            bigger.append(record)
    return bigger


def collect(
    spec: PolicySpec, end_s: float, cloud: Cloud, swarm: Swarm, ec2: SimEc2, platform: Platform, machines: Machines
) -> RunResult:
    records = platform.records
    ran = [r for r in records if r.wait_s is not None]
    within_ttl = [r for r in records if _is_return(r, float(r.cache.ttl_s))]
    within_day = [r for r in records if _is_return(r, DAY_S)]
    overall = [r for r in records if _is_return(r, math.inf)]
    bigger = _bigger_returns(records)
    prices = cloud.meter.prices
    writer = platform.writer
    return RunResult(
        name=spec.name,
        label=spec.label,
        kind=spec.kind,
        sessions=len(records),
        never_ran=len(records) - len(ran),
        waits_s=tuple(sorted(r.wait_s for r in ran if r.wait_s is not None)),
        returns_within_ttl=len(within_ttl),
        hits_within_ttl=sum(1 for r in within_ttl if r.hit),
        returns_within_day=len(within_day),
        hits_within_day=sum(1 for r in within_day if r.hit),
        returns_overall=len(overall),
        hits_overall=sum(1 for r in overall if r.hit),
        bigger_returns=len(bigger),
        bigger_hits=sum(1 for r in bigger if r.hit),
        bigger_return_waits_s=tuple(sorted(r.wait_s for r in bigger if r.wait_s is not None)),
        downloaded_gb=sum(r.downloaded_gb for r in records),
        bill=cloud.meter.bill(end_s),
        api_calls=tuple(sorted((op, code, n) for (op, code), n in ec2.call_counts.items() if n)),
        peak_machines=cloud.peak_live,
        machines_launched=len(cloud.instances),
        volumes_created=cloud.volumes.created,
        interruptions=sum(r.interruptions for r in records),
        deferred=sum(1 for r in records if r.deferred),
        joined_without_cache=machines.joined_without_cache,
        machines_stopped=cloud.stops,
        machines_resumed=cloud.starts,
        stopped_hours=cloud.stopped_hours(end_s),
        stopped_root_usd=cloud.stopped_hours(end_s)
        * cloud.root_volume_gib
        * prices.gp3_per_gb_month
        / prices.hours_per_month,
        peak_stopped=max(stopped for _, _, stopped in cloud.fleet_series),
        resumed_waits_s=tuple(sorted(r.wait_s for r in ran if r.resumed and r.wait_s is not None)),
        buffer_stops=cloud.buffer_stops,
        buffer_starts=cloud.buffer_starts,
        buffer_waits_s=tuple(sorted(r.wait_s for r in ran if r.from_buffer and r.wait_s is not None)),
        buffer_first_sessions=sum(1 for r in ran if r.from_buffer and r.previous_end_s is None),
        first_waits_s=tuple(sorted(r.wait_s for r in ran if r.previous_end_s is None and r.wait_s is not None)),
        end_s=end_s,
        fleet_series=tuple(cloud.fleet_series),
        running_series=tuple(platform.running_series),
        buffer_series=tuple(cloud.buffer_series),
        start_paths=tuple((path, sum(1 for r in ran if r.start_path == path)) for path in START_PATHS),
        full_sessions=len(writer.full_sessions) if writer is not None else 0,
        full_hours=writer.full_s / 3600.0 if writer is not None else 0.0,
        volumes_grown=cloud.volumes.grown,
        owner_data_gb=tuple(sorted(writer.owner_data_gb.values())) if writer is not None else (),
        phases=tuple(
            SessionPhases(r.previous_end_s is None, r.reused_across_owners, r.marks.durations_s())
            for r in records
            if r.marks is not None
        ),
    )
