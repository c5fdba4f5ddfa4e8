"""The planner's knobs as one frozen value (built from settings at the wiring point)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from warmswarm_models import Resources

BufferSizing = Literal["fixed", "demand"]


@dataclass(frozen=True, slots=True)
class Policy:
    cluster: str
    allowed_instance_types: tuple[str, ...]
    price_per_hour: Mapping[str, float]  # USD per instance-hour, by type
    availability_zones: tuple[str, ...]
    # What the OS, the Docker daemon and system services take from every node.
    node_overhead: Resources = field(default_factory=Resources)
    max_instances: int = 10
    # Stopped machines (the warm tier and the buffer) at most, apart from max_instances: they cost their disks.
    max_stopped_instances: int = 20
    # The warm buffer: instance type -> stopped, never-used machines kept in each availability zone.
    warm_buffer: Mapping[str, int] = field(default_factory=dict)
    # The hot buffer: instance type -> running, joined, drained, never-used machines kept in each zone.
    hot_buffer: Mapping[str, int] = field(default_factory=dict)
    # "fixed": the two maps above are what each zone keeps; "demand": they are each part's maximum, and the target
    # follows the recent arrivals (plan/demand.py: ceil(arrivals per s × refill_s × headroom), hot buffer first).
    buffer_sizing: BufferSizing = "fixed"
    buffer_window_s: float = 1800.0  # arrivals counted over this long
    buffer_refill_s: float = 240.0  # a buffer machine's launch, boot, pull and join
    buffer_headroom: float = 1.5  # a factor over the mean a refill's time sees arrive
    # A reservation's buffer fills from at - buffer_refill_s × this (plan/reservations.py: its lead time).
    reservation_lead_margin: float = 2.0
    # The hot buffer's running machines for a day at price_per_hour, at most (None: no budget; demand sizing only).
    buffer_daily_budget_usd: float | None = None
    # A machine claimed from the hot buffer has this long, from the claim, for its node to say the owner's volume
    # is mounted (attach, device, checks, mount, label reload); past it, it is terminated and the volume kept.
    hot_attach_s: float = 120.0
    max_launches_per_cycle: int = 5  # machines
    # RunInstances and CreateVolume calls: AWS's RunInstances bucket holds about 5 (and refills 2 a second).
    max_launch_calls_per_cycle: int = 5
    idle_grace_s: float = 300.0
    max_start_s: float = 600.0
    capacity_backoff_s: float = 600.0
    # An attach still "attaching" after this long is detached (forced) and tried again.
    attach_timeout_s: float = 120.0
    # A cache volume is grown (plan/grow.py) once its node reports it this full (percent of its file system used),
    # to its size times cache_grow_factor (at least 1 GiB more, at most its owner's policy's grow_limit_gib).
    cache_grow_at_percent: int = 80
    cache_grow_factor: float = 2.0
    # The janitor deletes nothing while this replica's clock is further ahead of AWS's than this.
    max_clock_skew_s: float = 60.0
    # Recycling (plan/recycle.py): a machine is terminated instead of recycled once it is this old (from its launch)
    # or has served this many owners; a buffer machine launched with other launch settings than `launch_settings`
    # (the digest of today's AMI, network, profile and boot scripts; settings.py) is never offered, and goes.
    recycle_max_age_s: float = 7 * 86_400.0
    recycle_max_owners: int = 20
    launch_settings: str = ""
