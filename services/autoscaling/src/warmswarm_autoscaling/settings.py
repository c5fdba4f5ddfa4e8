"""The autoscaler's settings, read from the environment once, at the wiring point; every knob carries its unit."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from warmswarm_models import DEFAULT_NODE_CACHE_PATH, Resources
from warmswarm_runtime.settings import long_enough

from warmswarm_autoscaling.policy import BufferSizing, Policy
from warmswarm_autoscaling.userdata import DEFAULT_CACHE_FILL_PERIOD_S, boot_scripts_digest

# On-demand Linux prices in USD per hour (us-east-1, published list prices); only the order
# matters to the planner. Override with AUTOSCALING_PRICE_PER_HOUR='{"t3.medium": 0.05}'.
DEFAULT_PRICE_PER_HOUR: dict[str, float] = {
    "t3.medium": 0.0416,
    "t3.large": 0.0832,
    "t3.xlarge": 0.1664,
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
    "c5.xlarge": 0.17,
    "c5.2xlarge": 0.34,
    "r5.large": 0.126,
    "r5.xlarge": 0.252,
    "g4dn.xlarge": 0.526,
    "g4dn.2xlarge": 0.752,
}


def _csv(value: object) -> object:
    # "a,b,c" in the environment; a JSON list also works.
    if isinstance(value, str) and not value.lstrip().startswith("["):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, str):
        return json.loads(value)
    return value


class AutoscalingSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUTOSCALING_", frozen=True, extra="ignore")

    cluster: str = Field(
        default="warmswarm",
        min_length=1,
        max_length=64,
        validation_alias=AliasChoices("WARMSWARM_CLUSTER", "AUTOSCALING_CLUSTER"),
        description="Value of the warmswarm:cluster tag on everything this autoscaler creates and manages.",
    )
    docker_host: str = Field(
        default="unix:///var/run/docker.sock", validation_alias=AliasChoices("DOCKER_HOST", "AUTOSCALING_DOCKER_HOST")
    )
    ec2_endpoint_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("EC2_ENDPOINT_URL", "AUTOSCALING_EC2_ENDPOINT_URL"),
        description="Unset for real AWS; the sandbox's moto server otherwise.",
    )
    aws_region: str = Field(default="us-east-1", validation_alias=AliasChoices("AWS_REGION", "AUTOSCALING_AWS_REGION"))
    availability_zones: Annotated[list[str], NoDecode] = Field(default_factory=list)
    image_id: str = Field(min_length=1, description="AMI of the worker nodes: Docker installed, user data run at boot.")
    subnet_ids: dict[str, str] = Field(default_factory=dict, description="Availability zone -> subnet id.")
    security_group_ids: Annotated[list[str], NoDecode] = Field(default_factory=list)
    iam_instance_profile: str | None = None
    key_name: str | None = None
    allowed_instance_types: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(DEFAULT_PRICE_PER_HOUR))
    price_per_hour: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_PRICE_PER_HOUR))
    node_overhead_cpus: float = Field(default=0.1, ge=0)
    node_overhead_memory_bytes: int = Field(default=256 * 2**20, ge=0)
    max_instances: int = Field(default=10, ge=0)
    max_stopped_instances: int = Field(
        default=20,
        ge=0,
        description="Idle owners' machines kept stopped (the warm tier), at most; past it, idle ones are terminated.",
    )
    warm_buffer: Annotated[dict[str, Annotated[int, Field(ge=0, le=100)]], NoDecode] = Field(
        default_factory=dict,
        description=(
            'The warm buffer, JSON: instance type -> stopped, never-used machines kept per zone, e.g. {"t3.medium": 1};'
            " an owner's first session claims one instead of a cold launch."
        ),
    )
    hot_buffer: Annotated[dict[str, Annotated[int, Field(ge=0, le=100)]], NoDecode] = Field(
        default_factory=dict,
        description=(
            "The hot buffer, JSON: instance type -> running, joined, drained, never-used machines kept per zone, e.g."
            ' {"t3.medium": 1}; a session claims one and gets its volume attached while it runs.'
        ),
    )
    buffer_sizing: BufferSizing = Field(
        default="fixed",
        description=(
            '"fixed": AUTOSCALING_HOT_BUFFER and AUTOSCALING_WARM_BUFFER are what each zone keeps; "demand": they are'
            " each type's maximum per zone, and the target follows the sessions that came in the last"
            " AUTOSCALING_BUFFER_WINDOW_S (0 when nobody came)."
        ),
    )
    buffer_window_s: float = Field(
        default=1800.0, gt=0, description="Demand sizing: the arrivals of this long before now set the buffers' rate."
    )
    buffer_refill_s: float = Field(
        default=240.0,
        gt=0,
        description=(
            "How long a refill takes (a buffer machine's launch, boot, image pull and join): demand sizing's W, and"
            " a reservation's lead time (× AUTOSCALING_RESERVATION_LEAD_MARGIN)."
        ),
    )
    buffer_headroom: float = Field(
        default=1.5, gt=0, description="Demand sizing: a factor over the arrivals a refill's time sees on average."
    )
    reservation_lead_margin: float = Field(
        default=2.0,
        ge=1.0,
        description=(
            "A reservation's hot machines are launched from AUTOSCALING_BUFFER_REFILL_S × this before its moment"
            " (the lead time): the margin over a refill's usual time."
        ),
    )
    buffer_daily_budget_usd: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Demand sizing: the hot buffer's running machines, at AUTOSCALING_PRICE_PER_HOUR for 24 h, cost at most"
            " this (USD); unset or empty: no budget."
        ),
    )
    hot_attach_s: float = Field(
        default=120.0,
        gt=0,
        description="How long a claimed hot machine has to say the owner's volume is mounted; past it, terminated.",
    )
    buffer_images: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Images a buffer machine pulls before it is stopped (comma-separated)."
    )
    max_launches_per_cycle: int = Field(default=5, ge=1, description="Machines launched per cycle, at most.")
    max_launch_calls_per_cycle: int = Field(
        default=5,
        ge=1,
        description="RunInstances and CreateVolume calls per cycle, at most (one call may start several machines).",
    )
    idle_grace_s: float = Field(default=300.0, ge=0)
    max_start_s: float = Field(default=600.0, gt=0)
    capacity_backoff_s: float = Field(default=600.0, ge=0)
    attach_timeout_s: float = Field(default=120.0, gt=0, description="An attach stuck this long is retried.")
    cache_grow_at_percent: int = Field(
        default=80,
        ge=1,
        le=100,
        description="A cache volume whose node reports its file system this full (percent used) is grown, where its"
        " owner's groups allow a larger one (cache_max_size_gib).",
    )
    cache_grow_factor: float = Field(
        default=2.0,
        gt=1.0,
        le=16.0,
        allow_inf_nan=False,
        description="A growing cache volume's new size: its size times this (at least 1 GiB more, at most the"
        " owner's cache_max_size_gib). AWS allows one growth per volume in six hours.",
    )
    max_clock_skew_s: float = Field(
        default=60.0,
        gt=0,
        description="The janitor deletes no volume while this replica's clock is further ahead of AWS's than this.",
    )
    node_cache_path: str = Field(
        default=DEFAULT_NODE_CACHE_PATH,
        pattern=r"^/[A-Za-z0-9._/-]*$",
        validation_alias=AliasChoices("NODE_CACHE_PATH", "AUTOSCALING_NODE_CACHE_PATH"),
        description="Where a node mounts its owner's cache volume (the director mounts it into services).",
    )
    device_wait_s: int = Field(default=300, ge=1, description="How long a booting node waits for its volume.")
    cache_fill_period_s: int = Field(
        default=DEFAULT_CACHE_FILL_PERIOD_S,
        ge=1,
        le=3600,
        description="How often a node reports its cache volume's fill (the label growth reads) and grows its"
        " filesystem to a grown disk (seconds; a node's boot takes it).",
    )
    recycle_max_age_s: float = Field(
        default=7 * 86_400.0,
        gt=0,
        description="A recycled machine older than this (from its launch) is terminated instead of recycled again.",
    )
    recycle_max_owners: int = Field(
        default=20, ge=1, description="A machine that served this many owners is terminated instead of recycled again."
    )
    resync_interval_s: float = Field(default=30.0, gt=0)
    busy_resync_interval_s: float = Field(
        default=3.0, gt=0, description="Resync period while tasks wait or machines are on their way."
    )
    debounce_s: float = Field(default=0.5, ge=0)
    failure_backoff_s: float = Field(
        default=5.0, gt=0, description="After a cycle that failed or crashed, how long before the next."
    )
    instance_types_ttl_s: float = Field(default=3600.0, gt=0)
    ec2_full_listing_interval_s: float = Field(
        default=120.0,
        gt=0,
        description="How often a cycle lists every instance and cache volume of the cluster (seconds); in between it"
        " describes by id only those that can move, so a tag changed by hand on a steady machine, or a volume made by"
        " hand, is seen this late.",
    )
    ec2_max_attempts: int = Field(
        default=5, ge=1, description="Attempts per EC2 call but RunInstances (tried once; the next cycle retries)."
    )
    node_join_addr: str | None = Field(
        default=None, description="host:port workers join; default: the swarm leader's own address."
    )
    http_host: str = "0.0.0.0"
    http_port: int = Field(default=8000, ge=0, le=65535)
    log_json: bool = False
    dry_run: bool = Field(
        default=False,
        description="Observe, plan and report (each decision logged as 'would …'), and apply nothing.",
    )
    ops_token: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("AUTOSCALING_OPS_TOKEN", "OPS_TOKEN"),
        description=(
            "Bearer token ops (and the director) present to read /v1/status and /v1/volumes, which name every"
            " owner, and to expire a cache volume early; unset: those routes answer 403."
        ),
    )

    @field_validator(
        "availability_zones", "security_group_ids", "allowed_instance_types", "buffer_images", mode="before"
    )
    @classmethod
    def _split_csv(cls, value: object) -> object:
        return _csv(value)

    @field_validator("warm_buffer", "hot_buffer", mode="before")
    @classmethod
    def _json_or_empty(cls, value: object) -> object:
        # Empty (the stack's default when unset) is no buffer; anything else must be a JSON object.
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("buffer_daily_budget_usd", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # Empty (the stack's default when unset) is no budget.
        return None if isinstance(value, str) and not value.strip() else value

    _ops_token_long_enough = field_validator("ops_token")(long_enough)

    @model_validator(mode="after")
    def _check_consistency(self) -> AutoscalingSettings:
        unpriced = [t for t in self.allowed_instance_types if t not in self.price_per_hour]
        if unpriced:
            raise ValueError(f"AUTOSCALING_PRICE_PER_HOUR has no price for allowed type(s) {unpriced}")
        if not self.allowed_instance_types:
            raise ValueError("AUTOSCALING_ALLOWED_INSTANCE_TYPES is empty: nothing could ever be launched")
        for name, buffer in (("WARM", self.warm_buffer), ("HOT", self.hot_buffer)):
            unbuffered = sorted(t for t in buffer if t not in self.allowed_instance_types)
            if unbuffered:
                raise ValueError(
                    f"AUTOSCALING_{name}_BUFFER names type(s) {unbuffered} not in AUTOSCALING_ALLOWED_INSTANCE_TYPES"
                )
        foreign = [z for z in self.zones() if not z.startswith(self.aws_region)]
        if foreign:
            raise ValueError(f"AUTOSCALING_AVAILABILITY_ZONES {foreign} are not in AWS_REGION {self.aws_region}")
        return self

    def zones(self) -> list[str]:
        return self.availability_zones or [f"{self.aws_region}a", f"{self.aws_region}b", f"{self.aws_region}c"]

    def policy(self) -> Policy:
        return Policy(
            cluster=self.cluster,
            allowed_instance_types=tuple(self.allowed_instance_types),
            price_per_hour=dict(self.price_per_hour),
            availability_zones=tuple(self.zones()),
            node_overhead=Resources(self.node_overhead_cpus, self.node_overhead_memory_bytes),
            max_instances=self.max_instances,
            max_stopped_instances=self.max_stopped_instances,
            warm_buffer={t: n for t, n in self.warm_buffer.items() if n > 0},
            hot_buffer={t: n for t, n in self.hot_buffer.items() if n > 0},
            buffer_sizing=self.buffer_sizing,
            buffer_window_s=self.buffer_window_s,
            buffer_refill_s=self.buffer_refill_s,
            buffer_headroom=self.buffer_headroom,
            reservation_lead_margin=self.reservation_lead_margin,
            buffer_daily_budget_usd=self.buffer_daily_budget_usd,
            hot_attach_s=self.hot_attach_s,
            max_launches_per_cycle=self.max_launches_per_cycle,
            max_launch_calls_per_cycle=self.max_launch_calls_per_cycle,
            idle_grace_s=self.idle_grace_s,
            max_start_s=self.max_start_s,
            capacity_backoff_s=self.capacity_backoff_s,
            attach_timeout_s=self.attach_timeout_s,
            cache_grow_at_percent=self.cache_grow_at_percent,
            cache_grow_factor=self.cache_grow_factor,
            max_clock_skew_s=self.max_clock_skew_s,
            recycle_max_age_s=self.recycle_max_age_s,
            recycle_max_owners=self.recycle_max_owners,
            launch_settings=self.launch_settings_digest(),
        )

    def launch_settings_digest(self) -> str:
        """What a machine booted with, as 16 hex digits: the AMI, where and as whom it runs, what its boot does (the
        scripts' text, the cache path, the images it pulls). A recycled machine whose digest is not today's is stale."""
        booted_with = {
            "image_id": self.image_id,
            "subnet_ids": self.subnet_ids,
            "security_group_ids": sorted(self.security_group_ids),
            "iam_instance_profile": self.iam_instance_profile,
            "key_name": self.key_name,
            "node_cache_path": self.node_cache_path,
            "device_wait_s": self.device_wait_s,
            "cache_fill_period_s": self.cache_fill_period_s,
            "buffer_images": sorted(self.buffer_images),
            "scripts": boot_scripts_digest(),
        }
        text = json.dumps(booted_with, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # -- leader election (lease.py, adapters/lock_redis.py) -------------------------------------
    # Kept together at the end of the class: several replicas may run, the holder of a Redis
    # lock is the only one that acts.
    leader_lock_ttl_s: float = Field(
        default=15.0,
        gt=0,
        description="Lock expiry: a dead leader is replaced within about this long.",
    )
    leader_renew_interval_s: float = Field(
        default=3.0,
        gt=0,
        description="How often the leader renews the lock (and followers try to take it); below a third of the ttl.",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        min_length=1,
        validation_alias=AliasChoices("REDIS_URL", "AUTOSCALING_REDIS_URL"),
        description="The Redis that holds the leader lock and the reservations.",
    )
    leader_lock_key: str | None = Field(
        default=None,
        min_length=1,
        description="Redis key of the lock; default warmswarm:autoscaling:<cluster>:leader.",
    )

    @model_validator(mode="after")
    def _check_leader_timing(self) -> AutoscalingSettings:
        if self.leader_renew_interval_s >= self.leader_lock_ttl_s / 3:
            raise ValueError(
                f"AUTOSCALING_LEADER_RENEW_INTERVAL_S ({self.leader_renew_interval_s:g}) must be below a third of"
                f" AUTOSCALING_LEADER_LOCK_TTL_S ({self.leader_lock_ttl_s:g}): one failed renewal must not cost"
                " the leadership"
            )
        return self

    def lock_key(self) -> str:
        return self.leader_lock_key or f"warmswarm:autoscaling:{self.cluster}:leader"

    def reservations_key(self) -> str:
        """The Redis hash of this cluster's reservations (id -> JSON): one key per cluster."""
        return f"warmswarm:autoscaling:{self.cluster}:reservations"
