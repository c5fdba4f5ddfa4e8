"""The modelled world's numbers as typed values, read from model.toml (the one file that holds them)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from warmswarm_ec2rules.throttling import BucketSize
from warmswarm_models import GPU, Resources

GIB = 2**30


@dataclass(frozen=True, slots=True)
class InstanceTypeSpec:
    name: str
    vcpus: int
    memory_gib: float
    price_per_hour: float
    gpus: int = 0

    @property
    def resources(self) -> Resources:
        return Resources(float(self.vcpus), int(self.memory_gib * GIB), {GPU: self.gpus} if self.gpus else {})


@dataclass(frozen=True, slots=True)
class Ec2Timing:
    pending_s: float
    boot_to_join_s: float
    start_pending_s: float
    restart_boot_s: float
    # A boot that owes a recycled machine's scrub (tag warmswarm:scrub=pending-<n>) takes this much longer.
    scrub_s: float
    stop_s: float
    shutdown_s: float
    root_volume_gib: int


@dataclass(frozen=True, slots=True)
class EbsTiming:
    create_s: float
    attach_s: float
    detach_s: float
    mount_s: float
    # A hot attach: the attached device seen by the running machine -> checked, mounted, and the daemon's reloaded
    # label seen by the manager (node_cache.sh's hot mode).
    hot_mount_s: float = 5.0


@dataclass(frozen=True, slots=True)
class SwarmTiming:
    scheduler_delay_s: float
    node_down_after_s: float
    image_pull_s: float
    container_start_s: float
    node_memory_share: float


@dataclass(frozen=True, slots=True)
class PlatformOverhead:
    """The room every machine keeps for the platform itself, whichever policy launched it."""

    overhead_cpus: float
    overhead_memory_gib: float


@dataclass(frozen=True, slots=True)
class ApiLatency:
    describe_s: float
    mutating_s: float
    run_instances_s: float
    docker_s: float

    def of(self, operation: str) -> float:
        if operation == "RunInstances":
            return self.run_instances_s
        return self.describe_s if operation.startswith("Describe") else self.mutating_s


@dataclass(frozen=True, slots=True)
class Throttling:
    # Per-API request buckets: an API named here has its own figures, others those of their category
    # (warmswarm_ec2rules.throttling: "describe", "mutating").
    request: Mapping[str, BucketSize]
    resource: Mapping[str, BucketSize]  # per API, counted in instances


@dataclass(frozen=True, slots=True)
class Outage:
    """No capacity for these types in this zone between from_s and to_s (seconds since the day's midnight)."""

    instance_types: tuple[str, ...]
    availability_zone: str
    from_s: float
    to_s: float


@dataclass(frozen=True, slots=True)
class Prices:
    gp3_per_gb_month: float
    hours_per_month: float
    instance_minimum_s: float

    @property
    def gp3_per_gb_s(self) -> float:
        return self.gp3_per_gb_month / (self.hours_per_month * 3600.0)


@dataclass(frozen=True, slots=True)
class DataWrites:
    """What sessions write to their owner's cache (model.toml [data]): each owner's rate, drawn once, and the steps in
    which a node reports its volume's fill. A zero median writes nothing (the data stays what was downloaded)."""

    write_gb_per_h_median: float = 0.0
    write_gb_per_h_sigma: float = 0.0
    write_gb_per_h_max: float = 0.0
    fill_step_percent: int = 5


@dataclass(frozen=True, slots=True)
class Model:
    day_epoch_s: float
    availability_zones: tuple[str, ...]
    instance_types: Mapping[str, InstanceTypeSpec]
    ec2: Ec2Timing
    ebs: EbsTiming
    swarm: SwarmTiming
    api: ApiLatency
    throttling: Throttling
    prices: Prices
    download_mb_per_s: float
    platform: PlatformOverhead = PlatformOverhead(0.1, 0.25)
    outages: tuple[Outage, ...] = ()
    raw_day: Mapping[str, Any] = field(default_factory=dict)  # the [day] tables, read by the generator
    writes: DataWrites = DataWrites()

    @property
    def price_per_hour(self) -> dict[str, float]:
        return {name: spec.price_per_hour for name, spec in self.instance_types.items()}


def _bucket_size(*, capacity: float, refill_per_s: float) -> BucketSize:
    """A bucket of model.toml's [throttling]: its capacity is the bucket's size (AWS's "bucket size", its burst)."""
    return BucketSize(burst=capacity, refill_per_s=refill_per_s)


def clock_s(text: str) -> float:
    """Seconds since midnight of "HH:MM" or "HH:MM:SS"."""
    parts = [int(p) for p in text.split(":")]
    if len(parts) not in (2, 3) or not 0 <= parts[0] <= 48 or any(not 0 <= p < 60 for p in parts[1:]):
        raise ValueError(f"{text!r} is not a time of day (HH:MM or HH:MM:SS)")
    hours, minutes, seconds = (*parts, 0)[:3]
    return float(hours * 3600 + minutes * 60 + seconds)


def default_model_path() -> Path:
    return Path(str(resources.files("warmswarm_simulator").joinpath("model.toml")))


def load_model(path: Path | None = None) -> Model:
    with (path or default_model_path()).open("rb") as file:
        raw = tomllib.load(file)
    return model_from(raw)


def model_from(raw: Mapping[str, Any]) -> Model:
    types = {
        name: InstanceTypeSpec(
            name=name,
            vcpus=int(spec["vcpus"]),
            memory_gib=float(spec["memory_gib"]),
            price_per_hour=float(spec["price_per_hour"]),
            gpus=int(spec.get("gpus", 0)),
        )
        for name, spec in raw["instance_types"].items()
    }
    throttling = raw["throttling"]
    outages = tuple(
        Outage(
            instance_types=tuple(o["instance_types"]),
            availability_zone=str(o["availability_zone"]),
            from_s=clock_s(o["from"]),
            to_s=clock_s(o["to"]),
        )
        for o in raw.get("capacity", {}).get("outage", [])
    )
    return Model(
        day_epoch_s=float(raw["clock"]["day_epoch_s"]),
        availability_zones=tuple(raw["clock"]["availability_zones"]),
        instance_types=types,
        ec2=Ec2Timing(**raw["ec2"]),
        ebs=EbsTiming(**raw["ebs"]),
        swarm=SwarmTiming(**raw["swarm"]),
        api=ApiLatency(**raw["api"]),
        throttling=Throttling(
            request={k: _bucket_size(**v) for k, v in throttling["request"].items()},
            resource={k: _bucket_size(**v) for k, v in throttling["resource"].items()},
        ),
        prices=Prices(**raw["prices"]),
        download_mb_per_s=float(raw["data"]["download_mb_per_s"]),
        platform=PlatformOverhead(**raw["platform"]),
        outages=outages,
        raw_day=raw.get("day", {}),
        writes=DataWrites(**{k: v for k, v in raw["data"].items() if k != "download_mb_per_s"}),
    )
