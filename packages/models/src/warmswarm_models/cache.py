"""The EBS cache contract: group properties ops set, a request's effective policy, and how both are written."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from warmswarm_models.keys import (
    SERVICE_LABEL_ACCEPT_RECYCLED,
    SERVICE_LABEL_CACHE_ENABLED,
    SERVICE_LABEL_CACHE_MAX_SIZE_GIB,
    SERVICE_LABEL_CACHE_SIZE_GIB,
    SERVICE_LABEL_CACHE_TTL_S,
    SERVICE_LABEL_CACHE_VOLUME_TYPE,
    SERVICE_LABEL_RECYCLE_MACHINES,
    SERVICE_LABEL_WARM_TTL_S,
)

DEFAULT_CACHE_TTL_S: Final = 86_400  # one day
DEFAULT_CACHE_SIZE_GIB: Final = 10
DEFAULT_VOLUME_TYPE: Final = "gp3"
VolumeType = Literal["gp2", "gp3", "io1", "io2", "st1", "sc1", "standard"]
VOLUME_TYPES: Final = ("gp2", "gp3", "io1", "io2", "st1", "sc1", "standard")
MAX_VOLUME_SIZE_GIB: Final = 16_384  # EBS's limit for gp2/gp3
# Ten years: longer than any cache is worth keeping; a larger figure is a typo, not a policy.
MAX_CACHE_TTL_S: Final = 10 * 365 * 86_400
# A week: an idle owner's machine kept stopped (the warm tier) costs its disks; longer is a forgotten machine.
MAX_WARM_TTL_S: Final = 7 * 86_400


class InvalidCachePolicy(ValueError):
    """Cache labels on a service that cannot be read; the message names the label."""


class GroupProperties(BaseModel):
    """What ops set for a group of users; stored by the director, read for every request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ebs_cache_enabled: bool = False
    cache_ttl_s: int = Field(default=DEFAULT_CACHE_TTL_S, ge=0, le=MAX_CACHE_TTL_S)
    cache_size_gib: int = Field(default=DEFAULT_CACHE_SIZE_GIB, ge=1, le=MAX_VOLUME_SIZE_GIB)
    volume_type: VolumeType = DEFAULT_VOLUME_TYPE
    # The largest an owner's cache volume may grow to, online, as its data fills it (docs/operations.md, "Cache
    # volumes that grow"). None (the default): no growth, the volume stays at cache_size_gib. Growth is opt-in
    # because it cannot be undone: EBS volumes never shrink, so every GiB grown is billed until the volume is
    # deleted. A value at or below cache_size_gib also means no growth.
    cache_max_size_gib: int | None = Field(default=None, ge=1, le=MAX_VOLUME_SIZE_GIB)
    # How long an idle owner's machine is kept stopped (root disk, pulled images and cache volume attached)
    # before it is terminated; 0: terminated once idle, as without the warm tier.
    warm_ttl_s: int = Field(default=0, ge=0, le=MAX_WARM_TTL_S)
    # Recycling (docs/operations.md): may the group's owners' idle machines be scrubbed and serve other owners, and
    # may its owners receive such machines. Both off by default: a recycled root disk is the one path by which one
    # owner's leftovers could reach another, so ops opt a group in.
    recycle_machines: bool = False
    accept_recycled: bool = False


@dataclass(frozen=True, slots=True)
class CachePolicy:
    """Whether an owner's data is kept on an EBS volume between sessions, and how; and whether the owner's
    idle machine is kept stopped (warm) for a while, which holds with or without the cache."""

    enabled: bool = False
    ttl_s: int = DEFAULT_CACHE_TTL_S
    size_gib: int = DEFAULT_CACHE_SIZE_GIB
    volume_type: str = DEFAULT_VOLUME_TYPE
    warm_ttl_s: int = 0
    # Whether the owner's machine is recycled once idle (instead of terminated), and whether the owner may be given a
    # recycled machine; both hold with or without the cache.
    recycle_machines: bool = False
    accept_recycled: bool = False
    # The largest the owner's volume may grow to (GiB); None: it never grows beyond size_gib.
    max_size_gib: int | None = None

    @property
    def grow_limit_gib(self) -> int:
        """The size the owner's volume may grow to: max_size_gib where it is above size_gib; else 0, no growth at all
        (not even a volume made under an earlier, smaller size_gib grows to today's)."""
        if self.max_size_gib is None or self.max_size_gib <= self.size_gib:
            return 0
        return self.max_size_gib

    def to_labels(self) -> dict[str, str]:
        """Service labels the director writes and the autoscaler reads."""
        labels = {
            SERVICE_LABEL_CACHE_ENABLED: "true" if self.enabled else "false",
            SERVICE_LABEL_CACHE_TTL_S: str(self.ttl_s),
            SERVICE_LABEL_CACHE_SIZE_GIB: str(self.size_gib),
            SERVICE_LABEL_CACHE_VOLUME_TYPE: self.volume_type,
            SERVICE_LABEL_WARM_TTL_S: str(self.warm_ttl_s),
            SERVICE_LABEL_RECYCLE_MACHINES: _flag(self.recycle_machines),
            SERVICE_LABEL_ACCEPT_RECYCLED: _flag(self.accept_recycled),
        }
        # Only when set: a service made before growth existed, or for a group without it, keeps its labels as they were.
        if self.max_size_gib is not None:
            labels[SERVICE_LABEL_CACHE_MAX_SIZE_GIB] = str(self.max_size_gib)
        return labels

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> CachePolicy:
        """The policy a service's labels declare; no cache labels means no cache."""
        enabled = _bool_label(labels, SERVICE_LABEL_CACHE_ENABLED)
        warm_ttl_s = _int_label(labels, SERVICE_LABEL_WARM_TTL_S, 0, 0, MAX_WARM_TTL_S)
        recycle = _bool_label(labels, SERVICE_LABEL_RECYCLE_MACHINES)
        accept = _bool_label(labels, SERVICE_LABEL_ACCEPT_RECYCLED)
        if not enabled:
            return cls(warm_ttl_s=warm_ttl_s, recycle_machines=recycle, accept_recycled=accept)
        volume_type = labels.get(SERVICE_LABEL_CACHE_VOLUME_TYPE, DEFAULT_VOLUME_TYPE)
        if volume_type not in VOLUME_TYPES:
            raise InvalidCachePolicy(
                f"label {SERVICE_LABEL_CACHE_VOLUME_TYPE}={volume_type!r} is not one of {VOLUME_TYPES}"
            )
        ttl_s = _int_label(labels, SERVICE_LABEL_CACHE_TTL_S, DEFAULT_CACHE_TTL_S, 0, MAX_CACHE_TTL_S)
        size_gib = _int_label(labels, SERVICE_LABEL_CACHE_SIZE_GIB, DEFAULT_CACHE_SIZE_GIB, 1, MAX_VOLUME_SIZE_GIB)
        max_size_gib = (
            _int_label(labels, SERVICE_LABEL_CACHE_MAX_SIZE_GIB, 1, 1, MAX_VOLUME_SIZE_GIB)
            if SERVICE_LABEL_CACHE_MAX_SIZE_GIB in labels
            else None
        )
        return cls(
            True,
            ttl_s,
            size_gib,
            volume_type,
            warm_ttl_s,
            recycle_machines=recycle,
            accept_recycled=accept,
            max_size_gib=max_size_gib,
        )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _bool_label(labels: Mapping[str, str], key: str) -> bool:
    raw = labels.get(key, "false").strip().lower()
    if raw not in ("true", "false"):
        raise InvalidCachePolicy(f"label {key}={raw!r} must be 'true' or 'false'")
    return raw == "true"


def _int_label(labels: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    raw = labels.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidCachePolicy(f"label {key}={raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise InvalidCachePolicy(f"label {key}={value} is outside {low}..{high}")
    return value


def effective_cache_policy(groups: Iterable[GroupProperties]) -> CachePolicy:
    """Cache on if any group has it on; TTL, size and the volume type from the groups that have it on.

    TTL and size are the largest among those groups (a user in a generous group keeps the generous
    terms); the volume type is that of the group with the largest size, ties broken by name. The size a volume may
    grow to is likewise the largest cache_max_size_gib among them (None when none sets one: no growth). The warm
    tier is the largest `warm_ttl_s` of all the groups, cache or not. Recycling follows the same rule as the cache:
    a property any of the owner's groups grants holds (ops grant it per group; a user in several gets the union).
    """
    groups = list(groups)
    warm_ttl_s = max((g.warm_ttl_s for g in groups), default=0)
    recycle = any(g.recycle_machines for g in groups)
    accept = any(g.accept_recycled for g in groups)
    enabling = [g for g in groups if g.ebs_cache_enabled]
    if not enabling:
        return CachePolicy(warm_ttl_s=warm_ttl_s, recycle_machines=recycle, accept_recycled=accept)
    largest = max(enabling, key=lambda g: (g.cache_size_gib, g.volume_type))
    max_sizes = [g.cache_max_size_gib for g in enabling if g.cache_max_size_gib is not None]
    return CachePolicy(
        enabled=True,
        ttl_s=max(g.cache_ttl_s for g in enabling),
        size_gib=largest.cache_size_gib,
        volume_type=largest.volume_type,
        warm_ttl_s=warm_ttl_s,
        recycle_machines=recycle,
        accept_recycled=accept,
        max_size_gib=max(max_sizes) if max_sizes else None,
    )


def format_timestamp(epoch_s: float) -> str:
    """The form expiry tags are written in: ISO 8601, UTC, whole seconds (readable in the console)."""
    return datetime.fromtimestamp(int(epoch_s), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str) -> float | None:
    """Epoch seconds of a tag written by format_timestamp; None when it is not one."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None
