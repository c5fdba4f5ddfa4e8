"""The allowed instance types, each one's room after the per-node overhead, and which fit a demand.

Computed once per plan, and once per distinct demand: pending tasks mostly ask for the same few sizes, and
checking every type for every task would cost tasks × types each cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from warmswarm_models import Resources

from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import InstanceType

_DemandKey = tuple[float, int, tuple[tuple[str, int], ...]]


class Offerings:
    def __init__(self, types: Mapping[str, InstanceType], policy: Policy) -> None:
        self._types = types
        known = [t for t in policy.allowed_instance_types if t in types]
        self._rooms = {name: types[name].resources.minus(policy.node_overhead) for name in known}
        priced = [t for t in known if t in policy.price_per_hour]
        self._by_price = sorted(priced, key=lambda t: (policy.price_per_hour[t], t))
        self._fitting: dict[_DemandKey, list[str]] = {}
        self._fits_any: dict[_DemandKey, bool] = {}

    @property
    def by_price(self) -> tuple[str, ...]:
        """The types the autoscaler launches (allowed, known to EC2, priced), cheapest first."""
        return tuple(self._by_price)

    def room_of(self, name: str) -> Resources:
        return self._rooms[name]

    def rooms(self) -> Mapping[str, Resources]:
        return self._rooms

    def fits_any(self, demand: Resources) -> bool:
        """Whether some allowed, known type has room for `demand` on a fresh node."""
        key = _key(demand)
        known = self._fits_any.get(key)
        if known is None:
            known = self._fits_any[key] = any(demand.fits_in(room) for room in self._rooms.values())
        return known

    def cheapest(
        self,
        demand: Resources,
        unavailable: Mapping[tuple[str, str], float],
        per_zone: Mapping[str, int],
        allowed_zones: tuple[str, ...],
    ) -> tuple[InstanceType, str] | None:
        """The cheapest priced type that fits, in the allowed zone with the fewest of our machines."""
        key = _key(demand)
        fitting = self._fitting.get(key)
        if fitting is None:
            fitting = self._fitting[key] = [name for name in self._by_price if demand.fits_in(self._rooms[name])]
        # Within a type, the zone with the fewest of our machines: spreads the cluster across zones.
        zones = sorted(allowed_zones, key=lambda z: (per_zone.get(z, 0), allowed_zones.index(z)))
        for name in fitting:
            for zone in zones:
                if (name, zone) not in unavailable:
                    return self._types[name], zone
        return None


def unknown_types_notices(types: Mapping[str, InstanceType], allowed: Sequence[str]) -> list[str]:
    """The notice (none or one) naming the allowed types EC2 does not know: they are never launched, the others are."""
    unknown = [name for name in dict.fromkeys(allowed) if name not in types]
    if not unknown:
        return []
    rest = "the other types are" if len(unknown) < len(set(allowed)) else "no other type is allowed"
    return [
        f"AUTOSCALING_ALLOWED_INSTANCE_TYPES names {', '.join(unknown)}, which EC2 does not know in this region"
        f" (a typo, or a type the region lacks): {'it is' if len(unknown) == 1 else 'they are'} never launched;"
        f" {rest}"
    ]


def _key(demand: Resources) -> _DemandKey:
    return (demand.cpus, demand.memory_bytes, tuple(sorted(demand.generic.items())))
