"""How the strict EC2 layer answers a call: an injected fault or AWS's throttling first, then its rule or moto."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from warmswarm_ec2rules.throttling import BucketSize, Throttle

from warmswarm_sandbox.strict_ec2_instances import InstanceRules
from warmswarm_sandbox.strict_ec2_state import Mirror
from warmswarm_sandbox.strict_ec2_upstream import Answer, Call, Upstream
from warmswarm_sandbox.strict_ec2_volumes import VolumeRules
from warmswarm_sandbox.strict_ec2_wire import numbered, param

# The admin API's bucket names: a category's ("describe", "mutating"), an API's own request bucket in snake case
# ("run_instances"), and an API's resource bucket, counted in instances ("run_instances_instances").
_SNAKE: Final = re.compile(r"(?<!^)(?=[A-Z])")


def _bucket_names(throttle: Throttle) -> dict[str, tuple[Literal["request", "resource"], str]]:
    names: dict[str, tuple[Literal["request", "resource"], str]] = {}
    for key in throttle.request_sizes():
        names[_SNAKE.sub("_", key).lower()] = ("request", key)
    for action in throttle.resource_sizes():
        names[f"{_SNAKE.sub('_', action).lower()}_instances"] = ("resource", action)
    return names


def _instances_asked(call: Call) -> int:
    """How many instances a call counts against its API's resource bucket (0: none named)."""
    if call.action == "RunInstances":
        return int(param(call.params, "MaxCount") or "1")
    return len(numbered(call.params, "InstanceId"))


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
        # AWS's buckets (warmswarm_ec2rules.throttling), each API's made full at its first call.
        self._throttle = Throttle()
        for name, size in (buckets or {}).items():
            self.set_bucket(name, size)
        self.faults: list[Fault] = []
        self._rules: dict[str, Callable[[Call], Awaitable[Answer]]] = {
            "RunInstances": instances.run_instances,
            "CreateVolume": volumes.create_volume,
            "StartInstances": instances.start_instances,
            "StopInstances": instances.stop_instances,
            "DescribeInstances": instances.describe_instances,
            "TerminateInstances": instances.terminate_instances,
            "AttachVolume": volumes.attach_volume,
            "DetachVolume": volumes.detach_volume,
            "DeleteVolume": volumes.delete_volume,
            "DescribeVolumes": volumes.describe_volumes,
            "ModifyVolume": volumes.modify_volume,
            "DescribeVolumesModifications": volumes.describe_volumes_modifications,
        }
        # No rule for DescribeInstanceTypes: moto already answers as AWS does, refusing the whole call with HTTP 400
        # InvalidInstanceType (the unknown names in its message) when it does not know one of the types asked about.

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
        """AWS's throttling error if `call` finds its API's bucket (or its instances' bucket) empty."""
        refused = self._throttle.refusal(call.action, now_s, _instances_asked(call))
        return None if refused is None else Answer.refused(refused)

    def set_bucket(self, name: str, size: BucketSize) -> None:
        """A new size for the bucket the admin API calls `name`; the buckets it sizes are full again."""
        names = _bucket_names(self._throttle)
        if name not in names:
            raise ValueError(f"unknown bucket {name!r}; one of {sorted(names)}")
        kind, key = names[name]
        if kind == "request":
            self._throttle.resize_request(key, size)
        else:
            self._throttle.resize_resource(key, size)

    def buckets(self) -> dict[str, dict[str, float]]:
        """Each bucket's size by its admin name."""
        sizes = {"request": self._throttle.request_sizes(), "resource": self._throttle.resource_sizes()}
        return {name: sizes[kind][key]._asdict() for name, (kind, key) in _bucket_names(self._throttle).items()}

    def tokens(self) -> dict[str, dict[str, float]]:
        """The tokens of each API's buckets in use, at their last call."""
        return self._throttle.tokens()

    def reset(self) -> None:
        """No faults to come, every bucket full."""
        self.faults.clear()
        self._throttle.refill()
