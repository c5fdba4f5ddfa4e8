"""EC2's API throttling as AWS documents it: a token bucket per API, plus resource buckets counted in instances."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from warmswarm_simulator.config import BucketSpec, Throttling


@dataclass(slots=True)
class TokenBucket:
    """Holds up to `capacity` tokens, refilled continuously at `refill_per_s`; a call takes its tokens or fails."""

    capacity: float
    refill_per_s: float
    tokens: float
    updated_s: float = 0.0

    @classmethod
    def full(cls, spec: BucketSpec, now_s: float = 0.0) -> TokenBucket:
        return cls(spec.capacity, spec.refill_per_s, spec.capacity, now_s)

    def level(self, now_s: float) -> float:
        self.tokens = min(self.capacity, self.tokens + max(0.0, now_s - self.updated_s) * self.refill_per_s)
        self.updated_s = max(self.updated_s, now_s)
        return self.tokens

    def can_take(self, now_s: float, count: float = 1.0) -> bool:
        return self.level(now_s) >= count

    def take(self, now_s: float, count: float = 1.0) -> bool:
        if not self.can_take(now_s, count):
            return False
        self.tokens -= count
        return True


class Throttle:
    """Admits or refuses each EC2 call (RequestLimitExceeded); a refused call takes no token."""

    def __init__(self, throttling: Throttling) -> None:
        self._spec = throttling
        self._requests: dict[str, TokenBucket] = {}
        self._resources: dict[str, TokenBucket] = {}
        self.refused: Counter[str] = Counter()

    def admit(self, operation: str, now_s: float, instances: int = 0) -> bool:
        """True when the call may go ahead (its tokens are taken), False when AWS would throttle it."""
        request = self._requests.get(operation)
        if request is None:
            request = self._requests[operation] = TokenBucket.full(self._spec.request_spec(operation), now_s)
        resource = self._resource_bucket(operation, now_s) if instances else None
        if not request.can_take(now_s) or (resource is not None and not resource.can_take(now_s, instances)):
            self.refused[operation] += 1
            return False
        request.take(now_s)
        if resource is not None:
            resource.take(now_s, instances)
        return True

    def _resource_bucket(self, operation: str, now_s: float) -> TokenBucket | None:
        spec = self._spec.resource.get(operation)
        if spec is None:
            return None
        bucket = self._resources.get(operation)
        if bucket is None:
            bucket = self._resources[operation] = TokenBucket.full(spec, now_s)
        return bucket
