"""The bill, metered as the model's instances and disks change state; AWS's billing rules are warmswarm_ec2rules'
(instance-seconds while running, 60 s minimum a period; GB-months of every disk), the figures model.toml's.

A standing warm buffer is billed for exactly the 24 h of the day. Its machines exist around the clock (the buffer
refills behind every claim and is never emptied), so a run that lasted until they were gone would never end, and one
cut at some later hour would bill them for that many hours. Instead, a machine's time as a member of the buffer
(launched into it, not yet claimed by an owner) is billed only within the day, [0, day_s): its boots and pulls,
and its root disk while it waits stopped; one still in the buffer when the run ends is billed until day_s, even if
the run ended earlier (the buffer stands until midnight whatever the sessions do). The buffer at midnight is the
next day's, as the one this run launched at midnight stands for the one the day before left: each day owes 24 h
of it. A claimed machine is its owner's from the claim on and billed in full, as any other, for as long as it
lives. For a policy without a buffer nothing changes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from warmswarm_ec2rules.billing import billed_s, ebs_usd, gb_months, gib_s, instance_usd

from warmswarm_simulator.config import Prices

ROOT = "root"
CACHE = "cache"
BUFFER_ROOT = "buffer-root"  # the root disk of a machine while it is in the warm buffer: billed within the day
# The simulator's own mark (no AWS, warmswarm or osparc tag) of a baseline machine launched into one of osparc's
# buffers, hot or warm, so that the meter bills every policy's standing buffer by the same rule; "false" once the
# machine is claimed for a session.
BUFFER_MEMBER_TAG = "simulator:buffer-member"
DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Bill:
    instance_usd: float
    instance_hours: float
    instance_hours_by_type: dict[str, float]
    root_gb_months: float
    cache_gb_months: float
    root_usd: float
    cache_usd: float
    # What the warm buffer cost (already in the figures above): its machines' compute and root disks while they
    # were the buffer's, within the day; and how many machine-hours of the day it held (stopped or on its way).
    buffer_usd: float = 0.0
    buffer_hours: float = 0.0

    @property
    def ebs_usd(self) -> float:
        return self.root_usd + self.cache_usd

    @property
    def total_usd(self) -> float:
        return self.instance_usd + self.ebs_usd


@dataclass(slots=True)
class _Totals:
    """What the closed periods add up to (a bill adds the open ones to a copy)."""

    billed_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # type -> billed s
    used_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # type -> running s
    gib_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # kind -> GiB-seconds
    buffer_billed_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # type -> billed s
    buffer_s: float = 0.0  # machine-seconds in the buffer within the day (its root disks' time)

    def copy(self) -> _Totals:
        return _Totals(
            defaultdict(float, self.billed_s),
            defaultdict(float, self.used_s),
            defaultdict(float, self.gib_s),
            defaultdict(float, self.buffer_billed_s),
            self.buffer_s,
        )


@dataclass(slots=True)
class Meter:
    """Opened and closed by the cloud model at each state change; `bill` closes what is still open.

    The cloud says which instances are in the warm buffer (`buffer_joined` at launch, `buffer_left` at a claim):
    their periods are clipped to [0, day_s) (the module's docstring says why). A running period belongs to the
    buffer if it began there; a claim of a running machine (a hot buffer's) splits it there.
    """

    prices: Prices
    price_per_hour: dict[str, float]
    day_s: float = DAY_S
    # instance -> (type, since s, whether it began in the buffer)
    _running_since: dict[str, tuple[str, float, bool]] = field(default_factory=dict)
    _disk_since: dict[str, tuple[str, int, float]] = field(default_factory=dict)  # disk -> (kind, GiB, since s)
    _closed: _Totals = field(default_factory=_Totals)
    _buffer: set[str] = field(default_factory=set)  # instances in the warm buffer now

    def in_buffer(self, instance_id: str) -> bool:
        return instance_id in self._buffer

    def buffer_joined(self, instance_id: str) -> None:
        """Launched into the warm buffer: called before its root disk and its first running period open."""
        self._buffer.add(instance_id)

    def buffer_left(self, instance_id: str, root_disk_id: str, now_s: float) -> None:
        """Claimed by an owner: its root disk is the buffer's until now, the owner's (billed in full) after."""
        self._buffer.discard(instance_id)
        running = self._running_since.get(instance_id)
        if running is not None and running[2]:  # a hot buffer claimed while it runs: the owner's from now on
            self.instance_not_running(instance_id, now_s)
            self._running_since[instance_id] = (running[0], now_s, False)
        opened = self._disk_since.pop(root_disk_id, None)
        if opened is None:
            return
        kind, size_gib, since_s = opened
        self._close_disk(self._closed, kind, size_gib, since_s, now_s)
        self._disk_since[root_disk_id] = (ROOT, size_gib, now_s)

    def buffer_entered(self, instance_id: str, root_disk_id: str, now_s: float) -> None:
        """A machine that joins a buffer after its launch (a drained node osparc counts in its hot buffer): its
        running period and root disk are the buffer's from now on, billed within the day."""
        self._buffer.add(instance_id)
        running = self._running_since.get(instance_id)
        if running is not None and not running[2]:
            self.instance_not_running(instance_id, now_s)
            self._running_since[instance_id] = (running[0], now_s, True)
        opened = self._disk_since.pop(root_disk_id, None)
        if opened is None:
            return
        kind, size_gib, since_s = opened
        self._close_disk(self._closed, kind, size_gib, since_s, now_s)
        self._disk_since[root_disk_id] = (BUFFER_ROOT, size_gib, now_s)

    def instance_running(self, instance_id: str, instance_type: str, now_s: float) -> None:
        self._running_since.setdefault(instance_id, (instance_type, now_s, instance_id in self._buffer))

    def instance_not_running(self, instance_id: str, now_s: float) -> None:
        """Billing stops when the instance leaves "running" (stopping or shutting-down)."""
        opened = self._running_since.pop(instance_id, None)
        if opened is None:
            return
        instance_type, since_s, buffered = opened
        if buffered:
            since_s, now_s = self._in_day(since_s, now_s)
            if now_s <= since_s:
                return  # the buffer's after the day: the next day's
        used_s = now_s - since_s
        period_billed_s = billed_s(used_s, minimum_s=self.prices.instance_minimum_s)
        self._closed.used_s[instance_type] += used_s
        self._closed.billed_s[instance_type] += period_billed_s
        if buffered:
            self._closed.buffer_billed_s[instance_type] += period_billed_s

    def disk_created(self, disk_id: str, kind: str, size_gib: int, now_s: float) -> None:
        self._disk_since.setdefault(disk_id, (kind, size_gib, now_s))

    def disk_resized(self, disk_id: str, size_gib: int, now_s: float) -> None:
        """A grown volume: billed at its old size until now, at the new one after (EBS bills what is provisioned)."""
        opened = self._disk_since.pop(disk_id, None)
        if opened is None:
            return
        kind, old_gib, since_s = opened
        self._close_disk(self._closed, kind, old_gib, since_s, now_s)
        self._disk_since[disk_id] = (kind, size_gib, now_s)

    def disk_deleted(self, disk_id: str, now_s: float) -> None:
        opened = self._disk_since.pop(disk_id, None)
        if opened is not None:
            self._close_disk(self._closed, *opened, now_s)

    def _close_disk(self, totals: _Totals, kind: str, size_gib: int, since_s: float, until_s: float) -> None:
        if kind == BUFFER_ROOT:
            since_s, until_s = self._in_day(since_s, until_s)
            if until_s <= since_s:
                return
            totals.buffer_s += until_s - since_s
        totals.gib_s[kind] += gib_s(size_gib, since_s, until_s)

    def _in_day(self, since_s: float, until_s: float) -> tuple[float, float]:
        return min(since_s, self.day_s), min(until_s, self.day_s)

    def bill(self, now_s: float) -> Bill:
        """What the run cost up to now_s, counting what is still running or provisioned until then; what is still
        the buffer's until day_s instead (a standing buffer owes the whole day, the module's docstring says why)."""
        totals = self._closed.copy()
        billed, used_s = totals.billed_s, totals.used_s
        minimum_s = self.prices.instance_minimum_s
        for instance_type, since_s, buffered in self._running_since.values():
            until_s = now_s
            if buffered:
                since_s, until_s = self._in_day(since_s, self.day_s)
                if until_s <= since_s:
                    continue
                totals.buffer_billed_s[instance_type] += billed_s(until_s - since_s, minimum_s=minimum_s)
            used_s[instance_type] = used_s.get(instance_type, 0.0) + until_s - since_s
            billed[instance_type] = billed.get(instance_type, 0.0) + billed_s(until_s - since_s, minimum_s=minimum_s)
        for kind, size_gib, since_s in self._disk_since.values():
            self._close_disk(totals, kind, size_gib, since_s, self.day_s if kind == BUFFER_ROOT else now_s)
        disks_gib_s = totals.gib_s
        hours_per_month = self.prices.hours_per_month
        root_gib_s = disks_gib_s.get(ROOT, 0.0)
        buffer_gib_s = disks_gib_s.get(BUFFER_ROOT, 0.0)
        if buffer_gib_s:
            root_gib_s += buffer_gib_s  # added only if there is some: a policy without a buffer keeps its digits
        root_gb_months = gb_months(root_gib_s, hours_per_month=hours_per_month)
        cache_gb_months = gb_months(disks_gib_s.get(CACHE, 0.0), hours_per_month=hours_per_month)
        buffer_gb_months = gb_months(buffer_gib_s, hours_per_month=hours_per_month)
        buffer_compute_usd = sum(
            instance_usd(s, self.price_per_hour[t]) for t, s in sorted(totals.buffer_billed_s.items())
        )
        return Bill(
            instance_usd=sum(instance_usd(s, self.price_per_hour[t]) for t, s in sorted(billed.items())),
            instance_hours=sum(used_s.values()) / 3600.0,
            instance_hours_by_type={t: s / 3600.0 for t, s in sorted(used_s.items())},
            root_gb_months=root_gb_months,
            cache_gb_months=cache_gb_months,
            root_usd=ebs_usd(root_gb_months, self.prices.gp3_per_gb_month),
            cache_usd=ebs_usd(cache_gb_months, self.prices.gp3_per_gb_month),
            buffer_usd=buffer_compute_usd + ebs_usd(buffer_gb_months, self.prices.gp3_per_gb_month),
            buffer_hours=totals.buffer_s / 3600.0,
        )
