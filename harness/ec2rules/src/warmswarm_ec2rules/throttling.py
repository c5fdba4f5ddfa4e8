"""EC2's API throttling: a token bucket per API (request rate limiting) and, for the APIs that have one, a bucket
counted in instances (resource rate limiting), with AWS's documented default sizes.

AWS, EC2 Developer Guide, "Request throttling for the Amazon EC2 API"
https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html : "each API is evaluated individually"; a
request takes one token from its API's bucket, which refills continuously up to its size; the bucket's size and
refill rate are those of the API's category (non-mutating Describe*, Get*, List*, Search*; mutating: the others)
unless the API has its own. RunInstances, TerminateInstances, StartInstances and StopInstances also take one token
per instance from a resource bucket. An empty bucket answers RequestLimitExceeded (request) or
RequestResourceCountExceeded (resource); a throttled request does nothing, so here it takes no token either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from warmswarm_ec2rules.refusals import THROTTLED_STATUS, Refusal

DESCRIBE: Final = "describe"
MUTATING: Final = "mutating"
REQUEST_LIMIT_EXCEEDED: Final = "RequestLimitExceeded"
RESOURCE_COUNT_EXCEEDED: Final = "RequestResourceCountExceeded"
THROTTLE_CODES: Final = frozenset({REQUEST_LIMIT_EXCEEDED, RESOURCE_COUNT_EXCEEDED})


class BucketSize(NamedTuple):
    burst: float  # the bucket's size: tokens a burst may take at once
    refill_per_s: float


# AWS's documented per-account defaults: request buckets by category, RunInstances' own, and the resource buckets
# (tokens are instances).
DEFAULT_REQUEST_SIZES: Final[Mapping[str, BucketSize]] = {
    DESCRIBE: BucketSize(burst=100, refill_per_s=20),
    MUTATING: BucketSize(burst=50, refill_per_s=5),
    "RunInstances": BucketSize(burst=5, refill_per_s=2),
}
DEFAULT_RESOURCE_SIZES: Final[Mapping[str, BucketSize]] = {
    "RunInstances": BucketSize(burst=1000, refill_per_s=2),
    "TerminateInstances": BucketSize(burst=1000, refill_per_s=20),
    "StartInstances": BucketSize(burst=1000, refill_per_s=2),
    "StopInstances": BucketSize(burst=1000, refill_per_s=20),
}


def request_category(action: str) -> str:
    """The category whose request bucket size an API has when it has none of its own."""
    return DESCRIBE if action.startswith(("Describe", "Get", "List", "Search")) else MUTATING


@dataclass(slots=True)
class TokenBucket:
    """Holds up to `burst` tokens, refilled continuously at `refill_per_s`; a call takes its tokens or is refused."""

    burst: float
    refill_per_s: float
    tokens: float
    updated_s: float = 0.0

    @classmethod
    def full(cls, size: BucketSize, now_s: float = 0.0) -> TokenBucket:
        return cls(size.burst, size.refill_per_s, size.burst, now_s)

    def level(self, now_s: float) -> float:
        """The tokens at `now_s`; a time before the last update refills nothing."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now_s - self.updated_s) * self.refill_per_s)
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
    """One account's buckets: each API's request bucket and resource bucket, made full at the API's first call."""

    def __init__(
        self,
        request_sizes: Mapping[str, BucketSize] = DEFAULT_REQUEST_SIZES,
        resource_sizes: Mapping[str, BucketSize] = DEFAULT_RESOURCE_SIZES,
    ) -> None:
        """`request_sizes` by API name or category (DESCRIBE, MUTATING, which it must hold); `resource_sizes` by
        API name."""
        self._request_sizes = dict(request_sizes)
        self._resource_sizes = dict(resource_sizes)
        self._requests: dict[str, TokenBucket] = {}
        self._resources: dict[str, TokenBucket] = {}
        self.refused: Counter[str] = Counter()

    def refusal(self, action: str, now_s: float, resources: int = 0) -> Refusal | None:
        """Takes a call's tokens (one request token, and `resources` instances from its resource bucket if it
        has one), or answers AWS's throttling error and takes none."""
        request = self._requests.get(action)
        if request is None:
            request = self._requests[action] = TokenBucket.full(self._request_size(action), now_s)
        resource = self._resource_bucket(action, now_s) if resources else None
        if not request.can_take(now_s):
            self.refused[action] += 1
            return Refusal(REQUEST_LIMIT_EXCEEDED, "Request limit exceeded.", THROTTLED_STATUS)
        if resource is not None and not resource.can_take(now_s, resources):
            self.refused[action] += 1
            refused = f"Request of {resources} instances exceeds the resource rate limit of {action}."
            return Refusal(RESOURCE_COUNT_EXCEEDED, refused, THROTTLED_STATUS)
        request.take(now_s)
        if resource is not None:
            resource.take(now_s, resources)
        return None

    def request_sizes(self) -> dict[str, BucketSize]:
        return dict(self._request_sizes)

    def resource_sizes(self) -> dict[str, BucketSize]:
        return dict(self._resource_sizes)

    def tokens(self) -> dict[str, dict[str, float]]:
        """The tokens each bucket held at its last call: {"request": {API: tokens}, "resource": {API: tokens}}."""
        return {
            "request": {action: bucket.tokens for action, bucket in self._requests.items()},
            "resource": {action: bucket.tokens for action, bucket in self._resources.items()},
        }

    def resize_request(self, key: str, size: BucketSize) -> None:
        """A new size for an API's request bucket, or a category's: the buckets it sizes are full again."""
        self._request_sizes[key] = size
        self._requests = {a: b for a, b in self._requests.items() if self._request_key(a) != key}

    def resize_resource(self, action: str, size: BucketSize) -> None:
        self._resource_sizes[action] = size
        self._resources.pop(action, None)

    def refill(self) -> None:
        """Every bucket full again."""
        self._requests.clear()
        self._resources.clear()

    def _request_key(self, action: str) -> str:
        return action if action in self._request_sizes else request_category(action)

    def _request_size(self, action: str) -> BucketSize:
        return self._request_sizes[self._request_key(action)]

    def _resource_bucket(self, action: str, now_s: float) -> TokenBucket | None:
        size = self._resource_sizes.get(action)
        if size is None:
            return None
        bucket = self._resources.get(action)
        if bucket is None:
            bucket = self._resources[action] = TokenBucket.full(size, now_s)
        return bucket
