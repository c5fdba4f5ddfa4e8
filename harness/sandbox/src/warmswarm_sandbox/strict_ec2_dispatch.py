"""How the strict EC2 layer answers a call: an injected fault or AWS's throttling first, then its rule or moto."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from warmswarm_sandbox.strict_ec2_instances import InstanceRules
from warmswarm_sandbox.strict_ec2_state import Mirror
from warmswarm_sandbox.strict_ec2_upstream import Answer, Call, Upstream
from warmswarm_sandbox.strict_ec2_volumes import VolumeRules
from warmswarm_sandbox.strict_ec2_wire import param

# The resource bucket of RunInstances: one token per instance a call asks for (its MaxCount).
INSTANCES_BUCKET: Final = "run_instances_instances"


class BucketSize(NamedTuple):
    burst: float
    refill_per_s: float


# AWS's documented per-account defaults ("Request throttling for the Amazon EC2 API"): request buckets,
# and RunInstances' resource bucket, counted in instances ("resource rate limiting").
DEFAULT_BUCKETS: Final[Mapping[str, BucketSize]] = {
    "run_instances": BucketSize(burst=5, refill_per_s=2),
    "mutating": BucketSize(burst=50, refill_per_s=5),
    "describe": BucketSize(burst=100, refill_per_s=20),
    INSTANCES_BUCKET: BucketSize(burst=1000, refill_per_s=2),
}


def category(action: str) -> str:
    """The throttling bucket an action draws from: AWS counts non-mutating calls apart from mutating ones."""
    if action == "RunInstances":
        return "run_instances"
    if action.startswith(("Describe", "Get", "List", "Search")):
        return "describe"
    return "mutating"


class TokenBucket:
    """Refills continuously at `refill_per_s` up to `burst`; a call takes one token or is throttled."""

    def __init__(self, size: BucketSize, now_s: float) -> None:
        self.size = size
        self.tokens = float(size.burst)
        self._updated_s = now_s

    def take(self, now_s: float, count: int = 1) -> bool:
        elapsed_s = max(0.0, now_s - self._updated_s)
        self.tokens = min(float(self.size.burst), self.tokens + elapsed_s * self.size.refill_per_s)
        self._updated_s = now_s
        if self.tokens < count:
            return False
        self.tokens -= count
        return True


@dataclass
class Fault:
    action: str
    code: str
    status: int
    message: str
    times: int
    # The call takes effect, then its answer is lost on the way back (the caller sees this error): the
    # case a client token exists for.
    after_effect: bool = False

    def answer(self) -> Answer:
        return Answer.error(self.status, self.code, self.message)


class Dispatch:
    """Routes each EC2 call past the injected faults still to come and the token buckets to its action's rule."""

    def __init__(
        self,
        upstream: Upstream,
        mirror: Mirror,
        instances: InstanceRules,
        volumes: VolumeRules,
        buckets: Mapping[str, BucketSize] | None = None,
    ) -> None:
        self._upstream = upstream
        self._mirror = mirror
        now_s = time.monotonic()
        self._buckets = {
            name: TokenBucket(size, now_s) for name, size in {**DEFAULT_BUCKETS, **(buckets or {})}.items()
        }
        self.faults: list[Fault] = []
        self._rules: dict[str, Callable[[Call], Awaitable[Answer]]] = {
            "RunInstances": instances.run_instances,
            "CreateVolume": volumes.create_volume,
            "StartInstances": instances.start_instances,
            "DescribeInstances": instances.describe_instances,
            "TerminateInstances": instances.terminate_instances,
            "AttachVolume": volumes.attach_volume,
            "DetachVolume": volumes.detach_volume,
            "DeleteVolume": volumes.delete_volume,
            "DescribeVolumes": volumes.describe_volumes,
        }

    async def answer(self, call: Call, *, throttle: bool) -> Answer:
        """`call`'s answer: an injected fault's, a throttling error (if `throttle`), else its rule's or moto's."""
        now_s = time.monotonic()
        self._mirror.prune(now_s)
        fault = self.take_fault(call.action)
        if fault is not None and not fault.after_effect:
            return fault.answer()
        refused = self.throttled(call, now_s) if throttle else None
        if refused is not None:
            return refused
        rule = self._rules.get(call.action)
        # A DryRun only checks permissions on AWS: no state rule applies, and moto answers DryRunOperation.
        dry_run = (param(call.params, "DryRun") or "").lower() == "true"
        answer = await rule(call) if rule is not None and not dry_run else await self._upstream.forward(call)
        if fault is not None and answer.ok:
            return fault.answer()
        return answer

    def take_fault(self, action: str) -> Fault | None:
        """The first injected fault for `action`, counted as used (gone once used up)."""
        fault = next((one for one in self.faults if one.action == action), None)
        if fault is not None:
            fault.times -= 1
            if fault.times <= 0:
                self.faults.remove(fault)
        return fault

    def throttled(self, call: Call, now_s: float) -> Answer | None:
        """AWS's throttling error if `call` finds its bucket (or, for RunInstances, its instances) empty."""
        if not self._buckets[category(call.action)].take(now_s):
            return Answer.error(503, "RequestLimitExceeded", "Request limit exceeded.")
        if call.action == "RunInstances":
            asked = int(param(call.params, "MaxCount") or "1")
            if not self._buckets[INSTANCES_BUCKET].take(now_s, asked):
                refused = f"Request of {asked} instances exceeds the resource rate limit."
                return Answer.error(503, "RequestResourceCountExceeded", refused)
        return None

    def set_bucket(self, name: str, size: BucketSize) -> None:
        if name not in self._buckets:
            raise ValueError(f"unknown bucket {name!r}; one of {sorted(self._buckets)}")
        self._buckets[name] = TokenBucket(size, time.monotonic())

    def buckets(self) -> dict[str, dict[str, float]]:
        return {name: {**bucket.size._asdict(), "tokens": bucket.tokens} for name, bucket in self._buckets.items()}

    def reset(self) -> None:
        """No faults to come, every bucket full."""
        self.faults.clear()
        for name, bucket in self._buckets.items():
            self._buckets[name] = TokenBucket(bucket.size, time.monotonic())
