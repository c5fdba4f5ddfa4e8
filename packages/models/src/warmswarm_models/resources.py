"""Resources: CPUs, memory and generic resources (GPUs), with the arithmetic placement needs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

# The generic-resource kind GPUs are advertised and reserved under (swarm `--generic-resource`).
GPU: Final = "gpu"

_NANO: Final = 1_000_000_000
_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Resources:
    """An amount of compute. `generic` holds discrete kinds such as {"gpu": 1}."""

    cpus: float = 0.0
    memory_bytes: int = 0
    generic: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if self.cpus < 0 or self.memory_bytes < 0 or (self.generic and min(self.generic.values()) < 0):
            raise ValueError(f"resources cannot be negative: {self}")

    @classmethod
    def from_nano_cpus(cls, nano_cpus: int, memory_bytes: int, generic: Mapping[str, int] | None = None) -> Resources:
        # Most machines and tasks have no generic resources: they share one empty mapping, not one each.
        return cls(nano_cpus / _NANO, memory_bytes, MappingProxyType(dict(generic)) if generic else _EMPTY)

    @property
    def nano_cpus(self) -> int:
        return round(self.cpus * _NANO)

    @property
    def gpus(self) -> int:
        return self.generic.get(GPU, 0)

    def __add__(self, other: Resources) -> Resources:
        generic = dict(self.generic)
        for kind, count in other.generic.items():
            generic[kind] = generic.get(kind, 0) + count
        return Resources(self.cpus + other.cpus, self.memory_bytes + other.memory_bytes, MappingProxyType(generic))

    def minus(self, other: Resources) -> Resources:
        """What is left of self after other; never below zero (an overcommitted node has no room)."""
        if not self.generic:  # most machines have no GPUs: nothing generic is left
            return Resources(max(0.0, self.cpus - other.cpus), max(0, self.memory_bytes - other.memory_bytes))
        generic = {k: max(0, v - other.generic.get(k, 0)) for k, v in self.generic.items()}
        return Resources(
            max(0.0, self.cpus - other.cpus),
            max(0, self.memory_bytes - other.memory_bytes),
            MappingProxyType(generic),
        )

    def fits_in(self, room: Resources) -> bool:
        # A tolerance of a milli-CPU absorbs float sums of nano-CPU values.
        return (
            self.cpus <= room.cpus + 1e-3
            and self.memory_bytes <= room.memory_bytes
            and all(count <= room.generic.get(kind, 0) for kind, count in self.generic.items() if count)
        )

    def describe(self) -> str:
        gib = self.memory_bytes / 2**30
        text = f"{self.cpus:g} CPU, {gib:.3g} GiB"
        for kind, count in sorted(self.generic.items()):
            if count:
                text += f", {count} {kind}"
        return text
