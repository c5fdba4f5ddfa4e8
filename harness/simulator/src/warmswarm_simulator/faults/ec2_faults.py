"""The EC2 port with faults: SimEc2 behind AWS's error answers, lost answers and half-applied decisions.

Each call may be refused before it takes effect (the codes AWS documents for that call, with their HTTP status),
or take effect and lose its answer (a timeout, a 500). Refusals become the port's exceptions as the adapter makes
them (warmswarm_autoscaling.refusals, the same function). A call that names an id AWS does not know answers
NotFound, which the adapter takes for "gone" where it does so (TerminateInstances, DeleteVolume, a re-read before a
delete). Every mutating call that reaches the world is recorded, with the time it took effect, for the invariants
and the history.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, TypeVar

from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, LaunchRequest, TokenSpent, VolumeRequest
from warmswarm_autoscaling.refusals import refusal
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Volume
from warmswarm_models import INSTANCE_BUFFER_TAG, INSTANCE_CLAIMED_AT_TAG, INSTANCE_WARM_UNTIL_TAG, OWNER_KEYS

from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.history import Call
from warmswarm_simulator.simports import SimEc2
from warmswarm_simulator.world import World

T = TypeVar("T")
# Called before a mutating call reaches the world: (replica, operation, target ids); the invariants watch evictions.
Watch = Callable[[str, str, tuple[str, ...]], None]

MISMATCH: Final = "IdempotentParameterMismatch"
_READS: Final = ("DescribeInstances", "DescribeVolumes", "DescribeInstanceTypes")
_INSTANCE_CALLS: Final = ("StopInstances", "StartInstances", "TerminateInstances")
# The codes AWS answers each call with, by fault kind (EC2 API Reference, "Error codes for the Amazon EC2 API").
_REFUSALS: Final[Mapping[str, Mapping[str, tuple[str, ...]]]] = {
    "capacity": {
        "RunInstances": ("InsufficientInstanceCapacity",),
        "StartInstances": ("InsufficientInstanceCapacity",),
    },
    "state": {
        "StopInstances": ("IncorrectInstanceState",),
        "StartInstances": ("IncorrectInstanceState",),
        "AttachVolume": ("VolumeInUse", "IncorrectState", "IncorrectInstanceState"),
        "DetachVolume": ("IncorrectState",),
        "DeleteVolume": ("VolumeInUse",),
        "ModifyVolume": ("IncorrectModificationState", "VolumeModificationRateExceeded"),
    },
    "idempotent": {"RunInstances": (MISMATCH,), "CreateVolume": (MISMATCH,)},
    # Recycling's detach of a stopped machine's volume refused (the volume busy in AWS's view a while longer).
    "detach": {"DetachVolume": ("IncorrectState",)},
}
_STATUS: Final = {"capacity": 500, "throttle": 503, "unauthorized": 403}
_NOT_FOUND_OPS: Final = frozenset(
    {"CreateTags", "DeleteTags", "AttachVolume", "DetachVolume", "DeleteVolume", "ModifyVolume", *_INSTANCE_CALLS}
)
# The adapter takes NotFound for "already gone" here: the call answers as a success that did nothing.
_GONE_IS_DONE: Final = frozenset({"TerminateInstances", "DeleteVolume"})


_OUTAGES_S: Final = (30.0, 120.0, 600.0)  # how long an offering AWS refused for capacity stays out (or to the calm)


class AwsState:
    """What AWS remembers across calls and replicas once a fault made it so: offerings out of capacity for a while
    (a capacity refusal is an outage of the offering, not of one call), and tokens known with other arguments."""

    def __init__(self) -> None:
        self.outages: dict[tuple[str, str], float] = {}  # (type, zone) -> until (virtual s)
        self.mismatched: set[tuple[str, str]] = set()  # (operation, token)


class _Gone(Exception):
    """AWS answered NotFound where the adapter takes that for "already gone": the call returns as done."""


class FaultyEc2:
    """Implements ports.Ec2 over `inner` for one replica; `dice` decides the faults."""

    def __init__(
        self,
        inner: SimEc2,
        cloud: Cloud,
        world: World,
        dice: Dice,
        aws: AwsState,
        *,
        replica: str,
        known_types: frozenset[str],
        latency: Callable[[str], float],
        watch: Watch | None = None,
    ) -> None:
        self._inner = inner
        self._cloud = cloud
        self._world = world
        self._dice = dice
        self._replica = replica
        self._known_types = known_types
        self._latency = latency
        self._watch = watch
        self._counts: Counter[str] = Counter()
        self._counted_cycle = -1
        self._partial: dict[str, str] = {}  # instance id -> the part of its decision that fails ("first"/"second")
        self._aws = aws

    # -- the faults ------------------------------------------------------------------------------------------------

    def _site(self, operation: str) -> str:
        if self._counted_cycle != self._dice.cycle:
            self._counts.clear()
            self._counted_cycle = self._dice.cycle
        self._counts[operation] += 1
        return f"{self._replica} {operation}#{self._counts[operation]}"

    def _refusal(
        self, operation: str, site: str, target: str, token: str | None, offering: tuple[str, str] | None = None
    ) -> tuple[str, str] | None:
        """(kind, code) of a refusal injected at this call, if any (or one AWS still answers from an earlier one)."""
        aws, now_s = self._aws, self._world.now_s
        if token is not None and (operation, token) in aws.mismatched:
            return "idempotent", MISMATCH
        if offering is not None and self._dice.on and aws.outages.get(offering, float("-inf")) > now_s:
            return "capacity", "InsufficientInstanceCapacity"
        kinds = [(kind, codes) for kind, by_operation in _REFUSALS.items() if (codes := by_operation.get(operation))]
        if operation in _NOT_FOUND_OPS:
            code = "InvalidVolume.NotFound" if target.startswith("vol-") else "InvalidInstanceID.NotFound"
            kinds.append(("notfound", (code,)))
        kinds += [("throttle", ("RequestLimitExceeded",)), ("unauthorized", ("UnauthorizedOperation",))]
        for kind, codes in kinds:
            code = self._dice.pick(codes, f"c{self._dice.cycle} {site} {kind} code")
            detail = f"{self._replica} {operation} {target}: refused {code}"
            if kind == "capacity" and offering is not None:
                lasts_s = self._dice.pick(_OUTAGES_S, f"c{self._dice.cycle} {site} capacity outage")
                detail += f" ({offering[0]} in {offering[1]} out for {lasts_s:g} s)"
            else:
                lasts_s = 0.0
            if self._dice.fires(kind, site, detail):
                if kind == "idempotent" and token is not None:
                    aws.mismatched.add((operation, token))
                if kind == "capacity" and offering is not None:
                    aws.outages[offering] = now_s + lasts_s
                return kind, code
        return None

    async def _refuse(self, operation: str, target: str, kind: str, code: str, token: str | None) -> Ec2Error:
        await asyncio.sleep(self._latency(operation))
        self._record(operation, target, f"refused {code}")
        status = _STATUS.get(kind, 400)
        return refusal(operation, code, f"(HTTP {status}) injected by the fault campaign", client_token=token)

    def _record(self, operation: str, target: str, outcome: str) -> None:
        if operation in _READS:
            return
        call = Call(self._dice.cycle, self._replica, self._world.now_s, operation, target, outcome)
        self._dice.history.calls.append(call)

    async def _mutate(
        self,
        operation: str,
        target: str,
        call: Callable[[], Awaitable[T]],
        *,
        ids: tuple[str, ...] = (),
        token: str | None = None,
        part: tuple[str, str] | None = None,
        offering: tuple[str, str] | None = None,
    ) -> T:
        """One mutating call: refused, or made (and maybe its answer lost), recorded either way. `part`: (instance id,
        "first" or "second") when the call is one of a two-call decision on that instance."""
        site = self._site(operation)
        refused = self._refusal(operation, site, target, token, offering)
        if refused is None and part is not None and self._partial.get(part[0]) == part[1]:
            del self._partial[part[0]]
            refused = ("partial", "InternalError")
        if refused is not None:
            kind, code = refused
            refused_at_s = self._world.now_s
            if kind == "notfound" and operation in _GONE_IS_DONE:
                await asyncio.sleep(self._latency(operation))
                self._record(operation, target, f"refused {code} (the adapter takes it for gone)")
                raise _Gone(code)
            error = await self._refuse(operation, target, kind, code, token)
            self._note_capacity(error, offering, refused_at_s)
            raise error
        if self._watch is not None:
            self._watch(self._replica, operation, ids)
        try:
            result = await call()
        except Ec2Error as error:
            self._record(operation, target, f"error {error.code}")
            if isinstance(error, TokenSpent):
                raise  # AWS answered with what the token made, now gone
            # SimEc2 makes a capacity code InsufficientCapacity for every call: the adapter, for a launch or a start.
            message = str(error).split(": ", 1)[-1]
            mapped = refusal(operation, error.code, message, client_token=token)
            self._note_capacity(mapped, offering, self._world.now_s)
            raise mapped from error
        code = self._dice.pick(("ConnectionError", "InternalError"), f"c{self._dice.cycle} {site} lost code")
        lost = f"{self._replica} {operation} {target}: took effect, answer lost ({code})"
        # The "detach" kind loses a DetachVolume's answer too (its own key: "lost" campaigns keep their draws).
        if self._dice.fires("lost", site, lost) or (
            operation == "DetachVolume" and self._dice.fires("detach", f"{site} lost", lost)
        ):
            self._record(operation, target, f"lost {code}")
            raise refusal(operation, code, "the answer was lost (injected)", client_token=token)
        self._record(operation, target, "ok")
        return result

    def _note_capacity(self, error: Ec2Error, offering: tuple[str, str] | None, at_s: float) -> None:
        """A refusal the autoscaler reads as "this offering is full" (as its adapter does) is a cause to avoid it."""
        if isinstance(error, InsufficientCapacity) and offering is not None:
            self._dice.history.refused_offerings.append((at_s, *offering))

    async def _read(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        site = self._site(operation)
        refused = self._refusal(operation, site, "", None)
        if refused is not None:
            raise await self._refuse(operation, "", *refused, None)
        return await call()

    def _decision(self, instance_id: str, what: str) -> None:
        """A decision of two calls on `instance_id` begins: the "partial" fault may fail one of them."""
        site = f"{self._replica} {what} {instance_id}"
        part = self._dice.pick(("first", "second"), f"c{self._dice.cycle} {site} partial part")
        failing = "its tag" if part == "first" else "its second call"
        if self._dice.fires(
            "partial", site, f"{self._replica} {what} of {instance_id}: {failing} fails, not the other"
        ):
            self._partial[instance_id] = part

    # -- ports.Ec2 -------------------------------------------------------------------------------------------------

    async def list_instances(self, cluster: str) -> list[Instance]:
        return await self._read("DescribeInstances", lambda: self._inner.list_instances(cluster))

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        return await self._read("DescribeInstances", lambda: self._inner.describe_instances(cluster, instance_ids))

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        unknown = sorted(set(names) - self._known_types)
        if unknown:  # AWS refuses the whole call, and names the unknown types in its message only
            site = self._site("DescribeInstanceTypes")
            await asyncio.sleep(self._latency("DescribeInstanceTypes"))
            self._dice.history.notes.append((self._dice.cycle, f"{site}: refused InvalidInstanceType {unknown}"))
            message = f"The following supplied instance types do not exist: {unknown}"
            raise refusal("DescribeInstanceTypes", "InvalidInstanceType", message)
        return await self._read("DescribeInstanceTypes", lambda: self._inner.describe_instance_types(names))

    async def run_instance(self, request: LaunchRequest) -> str:
        target = f"{request.instance_type} in {request.availability_zone} for {_whose(request.tags)}"
        return await self._mutate(
            "RunInstances",
            target,
            lambda: self._inner.run_instance(request),
            token=request.client_token,
            offering=(request.instance_type, request.availability_zone),
        )

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        target = f"{request.count} x {request.instance_type} in {request.availability_zone} (batch)"
        return await self._mutate(
            "RunInstances",
            target,
            lambda: self._inner.run_instances(request),
            token=request.client_token,
            offering=(request.instance_type, request.availability_zone),
        )

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        part: tuple[str, str] | None = None
        # A warm claim and a stop carry a warm-until; a hot claim carries none, but its moment (claimed-at): its
        # second call is the attach of the owner's volume to the running machine.
        if INSTANCE_WARM_UNTIL_TAG in tags or INSTANCE_CLAIMED_AT_TAG in tags:
            self._decision(instance_id, "claim" if any(k in tags for k in OWNER_KEYS) else "stop")
            part = (instance_id, "first")
        target = f"{instance_id} {sorted(tags)}"
        await self._mutate(
            "CreateTags", target, lambda: self._inner.tag_instance(instance_id, tags), ids=(instance_id,), part=part
        )

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        if not keys:
            return  # no call, as the adapter makes none
        # Refused (NotFound, throttled, unauthorized) or taking effect with its answer lost, like a CreateTags.
        await self._mutate(
            "DeleteTags",
            f"{instance_id} -{sorted(keys)}",
            lambda: self._inner.untag_instance(instance_id, keys),
            ids=(instance_id,),
        )

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        ids = tuple(sorted(set(instance_ids)))
        try:
            await self._mutate(
                "TerminateInstances", " ".join(ids), lambda: self._inner.terminate_instances(ids), ids=ids
            )
        except _Gone:
            return

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        ids = tuple(instance_ids)
        part = (ids[0], "second") if len(ids) == 1 else None
        await self._mutate("StopInstances", " ".join(ids), lambda: self._inner.stop_instances(ids), ids=ids, part=part)

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        ids = tuple(instance_ids)
        instance = self._cloud.instances.get(ids[0]) if ids else None
        offering = (instance.instance_type, instance.availability_zone) if instance is not None else None
        await self._mutate(
            "StartInstances", " ".join(ids), lambda: self._inner.start_instances(ids), ids=ids, offering=offering
        )

    async def list_volumes(self, cluster: str) -> list[Volume]:
        return await self._read("DescribeVolumes", lambda: self._inner.list_volumes(cluster))

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        return await self._read("DescribeVolumes", lambda: self._inner.describe_volumes(cluster, volume_ids))

    async def create_volume(self, request: VolumeRequest) -> str:
        target = f"{request.size_gib} GiB in {request.availability_zone} for {_whose(request.tags)}"
        return await self._mutate(
            "CreateVolume", target, lambda: self._inner.create_volume(request), token=request.client_token
        )

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None:
        instance = self._cloud.instances.get(instance_id)
        buffered = instance is not None and instance.tags.get(INSTANCE_BUFFER_TAG) == "true"
        part = (instance_id, "second") if buffered else None
        await self._mutate(
            "AttachVolume",
            f"{instance_id} {volume_id}",
            lambda: self._inner.attach_volume(volume_id, instance_id, device),
            ids=(volume_id, instance_id),
            part=part,
        )

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None:
        await self._mutate(
            "DetachVolume",
            f"{volume_id} from {instance_id}",
            lambda: self._inner.detach_volume(volume_id, instance_id, force=force),
            ids=(volume_id, instance_id),
        )

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None:
        # Two calls, as the adapter makes them: each may fail on its own.
        if set_tags:
            await self._mutate(
                "CreateTags",
                f"{volume_id} {sorted(set_tags)}",
                lambda: self._inner.tag_volume(volume_id, set_tags, ()),
                ids=(volume_id,),
            )
        if remove_keys:
            await self._mutate(
                "DeleteTags",
                f"{volume_id} -{sorted(remove_keys)}",
                lambda: self._inner.tag_volume(volume_id, {}, remove_keys),
                ids=(volume_id,),
            )

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        await self._mutate(
            "ModifyVolume",
            f"{volume_id} to {size_gib} GiB",
            lambda: self._inner.modify_volume(volume_id, size_gib),
            ids=(volume_id,),
        )

    async def delete_volume(self, volume_id: str) -> None:
        try:
            await self._mutate(
                "DeleteVolume", volume_id, lambda: self._inner.delete_volume(volume_id), ids=(volume_id,)
            )
        except _Gone:
            return

    async def describe_volume(self, volume_id: str) -> Volume | None:
        """The re-read before a delete: NotFound (a view not caught up yet) is "gone" to the adapter, so None."""
        site = self._site("DescribeVolumes")
        detail = f"{self._replica} DescribeVolumes {volume_id}: refused InvalidVolume.NotFound (read as gone)"
        if self._dice.fires("notfound", site, detail):
            await asyncio.sleep(self._latency("DescribeVolumes"))
            return None
        refused = self._refusal("DescribeVolumes", site, volume_id, None)
        if refused is not None:
            raise await self._refuse("DescribeVolumes", volume_id, *refused, None)
        return await self._inner.describe_volume(volume_id)

    def aws_clock(self) -> float | None:
        return self._inner.aws_clock()


def _whose(tags: Mapping[str, str]) -> str:
    if tags.get(INSTANCE_BUFFER_TAG) == "true":
        return "the buffer"
    owner = ",".join(f"{k}={tags[k]}" for k in OWNER_KEYS if k in tags)
    return owner or "nobody"
