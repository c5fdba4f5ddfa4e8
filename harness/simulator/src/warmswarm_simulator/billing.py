"""The bill, metered as the model's instances and disks change state; AWS's billing rules are warmswarm_ec2rules'
(instance-seconds while running, 60 s minimum a period; GB-months of every disk), the figures model.toml's."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from warmswarm_ec2rules.billing import billed_s, ebs_usd, gb_months, gib_s, instance_usd

from warmswarm_simulator.config import Prices

ROOT = "root"
CACHE = "cache"


@dataclass(frozen=True, slots=True)
class Bill:
    instance_usd: float
    instance_hours: float
    instance_hours_by_type: dict[str, float]
    root_gb_months: float
    cache_gb_months: float
    root_usd: float
    cache_usd: float

    @property
    def ebs_usd(self) -> float:
        return self.root_usd + self.cache_usd

    @property
    def total_usd(self) -> float:
        return self.instance_usd + self.ebs_usd


@dataclass(slots=True)
class Meter:
    """Opened and closed by the cloud model at each state change; `bill` closes what is still open."""

    prices: Prices
    price_per_hour: dict[str, float]
    _running_since: dict[str, tuple[str, float]] = field(default_factory=dict)  # instance -> (type, since s)
    _disk_since: dict[str, tuple[str, int, float]] = field(default_factory=dict)  # disk -> (kind, GiB, since s)
    _billed_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # type -> billed s
    _used_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # type -> running s
    _gib_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # kind -> GiB-seconds

    def instance_running(self, instance_id: str, instance_type: str, now_s: float) -> None:
        self._running_since.setdefault(instance_id, (instance_type, now_s))

    def instance_not_running(self, instance_id: str, now_s: float) -> None:
        """Billing stops when the instance leaves "running" (stopping or shutting-down)."""
        opened = self._running_since.pop(instance_id, None)
        if opened is None:
            return
        instance_type, since_s = opened
        used_s = now_s - since_s
        self._used_s[instance_type] += used_s
        self._billed_s[instance_type] += billed_s(used_s, minimum_s=self.prices.instance_minimum_s)

    def disk_created(self, disk_id: str, kind: str, size_gib: int, now_s: float) -> None:
        self._disk_since.setdefault(disk_id, (kind, size_gib, now_s))

    def disk_deleted(self, disk_id: str, now_s: float) -> None:
        opened = self._disk_since.pop(disk_id, None)
        if opened is not None:
            kind, size_gib, since_s = opened
            self._gib_s[kind] += gib_s(size_gib, since_s, now_s)

    def bill(self, now_s: float) -> Bill:
        """What the run cost up to now_s, counting what is still running or provisioned until then."""
        billed = dict(self._billed_s)
        used_s = dict(self._used_s)
        for instance_type, since_s in self._running_since.values():
            used_s[instance_type] = used_s.get(instance_type, 0.0) + now_s - since_s
            billed[instance_type] = billed.get(instance_type, 0.0) + billed_s(
                now_s - since_s, minimum_s=self.prices.instance_minimum_s
            )
        disks_gib_s = dict(self._gib_s)
        for kind, size_gib, since_s in self._disk_since.values():
            disks_gib_s[kind] = disks_gib_s.get(kind, 0.0) + gib_s(size_gib, since_s, now_s)
        hours_per_month = self.prices.hours_per_month
        root_gb_months = gb_months(disks_gib_s.get(ROOT, 0.0), hours_per_month=hours_per_month)
        cache_gb_months = gb_months(disks_gib_s.get(CACHE, 0.0), hours_per_month=hours_per_month)
        return Bill(
            instance_usd=sum(instance_usd(s, self.price_per_hour[t]) for t, s in sorted(billed.items())),
            instance_hours=sum(used_s.values()) / 3600.0,
            instance_hours_by_type={t: s / 3600.0 for t, s in sorted(used_s.items())},
            root_gb_months=root_gb_months,
            cache_gb_months=cache_gb_months,
            root_usd=ebs_usd(root_gb_months, self.prices.gp3_per_gb_month),
            cache_usd=ebs_usd(cache_gb_months, self.prices.gp3_per_gb_month),
        )
