"""The policies one run compares (policies.toml): each one's kind, knobs and group overrides, and how warmswarm's
knobs become the real autoscaler's settings (a fresh install's defaults, never the environment's)."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_models import GroupProperties

from warmswarm_simulator.config import GIB, PlatformOverhead

Kind = Literal["baseline", "warmswarm"]


class PolicyError(ValueError):
    """policies.toml names a knob or kind that does not exist; the message says which."""


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    kind: Kind
    label: str
    settings: Mapping[str, Any] = field(default_factory=dict)  # knobs that differ from the kind's defaults
    groups: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # group properties that differ
    note: str = ""
    # warmswarm only: the day's classes are declared as reservations ahead of their start (the engine is given
    # them with the day); a baseline has no such thing, as osparc has none.
    reserve_classes: bool = False

    def group_properties(self, day_groups: Mapping[str, GroupProperties]) -> dict[str, GroupProperties]:
        """The day's groups with this policy's overrides (a tuned cache TTL, say)."""
        merged = dict(day_groups)
        for name, changes in self.groups.items():
            base = merged.get(name, GroupProperties())
            merged[name] = base.model_copy(update=dict(changes))
        return merged


@dataclass(frozen=True, slots=True)
class Policies:
    max_instances: int  # the same fleet cap for every policy: the account's quota, not a policy
    specs: tuple[PolicySpec, ...]

    def named(self, name: str) -> PolicySpec:
        for spec in self.specs:
            if spec.name == name:
                return spec
        raise PolicyError(f"no policy {name!r}; policies.toml has {[s.name for s in self.specs]}")


def default_policies_path() -> Path:
    return Path(str(resources.files("warmswarm_simulator").joinpath("policies.toml")))


def load_policies(path: Path | None = None) -> Policies:
    with (path or default_policies_path()).open("rb") as file:
        raw = tomllib.load(file)
    specs = []
    for name, entry in raw["policies"].items():
        kind = entry.get("kind")
        if kind not in ("baseline", "warmswarm"):
            raise PolicyError(f"policy {name}: kind must be 'baseline' or 'warmswarm', not {kind!r}")
        specs.append(
            PolicySpec(
                name=name,
                kind=kind,
                label=str(entry.get("label", name)),
                settings=dict(entry.get("settings", {})),
                groups={g: dict(v) for g, v in entry.get("groups", {}).items()},
                note=str(entry.get("note", "")),
            )
        )
    for spec in specs:
        if spec.kind == "warmswarm":
            unknown = sorted(set(spec.settings) - set(AutoscalingSettings.model_fields))
            if unknown:
                raise PolicyError(f"policy {spec.name}: the autoscaler has no setting(s) {unknown}")
    return Policies(max_instances=int(raw["common"]["max_instances"]), specs=tuple(specs))


def warmswarm_settings(spec: PolicySpec, max_instances: int, platform: PlatformOverhead) -> AutoscalingSettings:
    """A fresh install's settings (the field defaults, not the environment's) with the policy's knobs applied; the
    node overhead is the platform's (model.toml [platform]), as every policy reserves it."""
    values: dict[str, Any] = {
        "image_id": "ami-0simulated0000000",
        "max_instances": max_instances,
        "node_overhead_cpus": platform.overhead_cpus,
        "node_overhead_memory_bytes": int(platform.overhead_memory_gib * GIB),
    }
    values.update(spec.settings)
    return AutoscalingSettings.model_construct(**values)
