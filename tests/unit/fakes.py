"""In-memory fakes of our own ports for the tests: plain state, no mocks.

FakeSwarm and FakeEc2 (and ClusterEc2, which answers for its own cluster only, and AwsTypesEc2, which refuses
unknown instance types as AWS does) keep the world as lists the test edits between cycles and record what the
autoscaler asked of them, for the loop, API and metrics tests. Recorder is both ports at once for apply's tests,
recording every call; RefusingClient stands for an aiobotocore client that AWS refuses, under the real adapter.
FakeLock is the lock store, FakeReservations the reservations' (it fails on demand); FakeClock, FakeTerm and
lease_on are the lease's tests' monotonic clock, stand-in term of leadership and lease.
"""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Final

from botocore.exceptions import ClientError
from warmswarm_autoscaling.actions import Action
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.apply import apply
from warmswarm_autoscaling.lease import Lease
from warmswarm_autoscaling.metrics import Metrics
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import (
    Ec2Error,
    JoinInfo,
    LaunchRequest,
    LockError,
    ReservationStoreError,
    UnknownInstanceTypes,
    VolumeRequest,
)
from warmswarm_autoscaling.readings import read_instance, read_node, read_volume
from warmswarm_autoscaling.reconciler import LoopTiming, Reconciler
from warmswarm_autoscaling.requests import LaunchTemplate
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Task, Volume
from warmswarm_autoscaling.wiring import build_reconciler
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, ENGINE_LABEL_SCRUBBED
from warmswarm_models.reservation import Reservation

from .factories import CLUSTER, INSTANCE_TYPES, NOW, TEMPLATE, make_policy, settings_of


class FakeSwarm:
    def __init__(self, nodes: Sequence[Node] = (), tasks: Sequence[Task] = ()) -> None:
        self.nodes = list(nodes)
        self.tasks = list(tasks)
        self.updates: list[tuple[str, dict[str, str] | None, str | None]] = []
        # (node id, the label keys an update removed), for the updates that removed any
        self.label_removals: list[tuple[str, tuple[str, ...]]] = []
        self.removed: list[str] = []
        self.node_reads = 0  # list_nodes calls: one per cycle (EC2 is not read every cycle: ec2_book.py)

    async def list_nodes(self) -> list[Node]:
        self.node_reads += 1
        return list(self.nodes)

    async def list_tasks(self) -> list[Task]:
        return list(self.tasks)

    async def join_info(self) -> JoinInfo:
        return JoinInfo("10.0.0.1:2377", "SWMTKN-1-test")

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        self.updates.append((node_id, dict(labels) if labels is not None else None, availability))
        if remove_labels:
            self.label_removals.append((node_id, tuple(remove_labels)))
        for i, node in enumerate(self.nodes):
            if node.id == node_id:
                # As the adapter: the removals, then the merge, in one update.
                kept = {key: value for key, value in node.labels.items() if key not in remove_labels}
                engine_labels = {ENGINE_LABEL_INSTANCE_ID: node.engine_instance_id or ""}
                if node.scrubbed is not None:
                    engine_labels[ENGINE_LABEL_SCRUBBED] = str(node.scrubbed)  # the daemon's, untouched by an update
                self.nodes[i] = read_node(
                    id=node.id,
                    hostname=node.hostname,
                    state=node.state,
                    availability=availability or node.availability,
                    role=node.role,
                    resources=node.resources,
                    labels={**kept, **(labels or {})},
                    engine_labels=engine_labels,
                )

    async def remove_node(self, node_id: str) -> None:
        self.removed.append(node_id)
        self.nodes = [n for n in self.nodes if n.id != node_id]

    async def events(self) -> AsyncIterator[str]:
        await asyncio.Event().wait()  # no events: the tests drive cycles themselves
        yield "node"


class FakeEc2:
    """This cluster's EC2: instances, volumes, the types; counts calls like the aiobotocore adapter does."""

    def __init__(
        self,
        instances: Sequence[Instance] = (),
        volumes: Sequence[Volume] = (),
        types: Mapping[str, InstanceType] = INSTANCE_TYPES,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.instances = list(instances)
        # AWS's clock (its launch times, its Date): the autoscaler's own when `autoscaler()` wires one and no clock
        # was given here, as in production, where both read true time; NOW until then.
        self.follows_autoscaler = clock is None
        self.volumes = list(volumes)
        self.types = dict(types)
        self.clock: Callable[[], float] = clock or (lambda: NOW)
        self.launched: list[LaunchRequest] = []
        self.terminated: list[str] = []
        self.stopped: list[str] = []
        self.started: list[str] = []
        self.tag_calls: list[tuple[str, dict[str, str], tuple[str, ...]]] = []
        self.modified: list[tuple[str, int]] = []  # (volume id, size GiB) of each ModifyVolume
        # operation -> the error code the next calls of it fail with
        self.failing: dict[str, str] = {}
        # How far AWS's clock is behind the autoscaler's (positive: the autoscaler's runs ahead).
        self.aws_behind_s = 0.0
        self.call_counts: Counter[tuple[str, str]] = Counter()
        # Each read of instances or volumes, in order: ("list_instances", ()) or ("describe_instances", the ids asked).
        self.reads: list[tuple[str, tuple[str, ...]]] = []

    def _count(self, operation: str) -> None:
        code = self.failing.get(operation)
        if code is not None:
            self.call_counts[(operation, code)] += 1
            raise Ec2Error(operation, code, "injected by the test")
        self.call_counts[(operation, "ok")] += 1

    async def list_instances(self, cluster: str) -> list[Instance]:
        self._count("DescribeInstances")
        self.reads.append(("list_instances", ()))
        return [i for i in self.instances if i.state != "terminated"]

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        self._count("DescribeInstances")
        self.reads.append(("describe_instances", tuple(instance_ids)))
        return [i for i in self.instances if i.state != "terminated" and i.id in instance_ids]

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        self._count("DescribeInstanceTypes")
        return [self.types[n] for n in names if n in self.types]

    async def run_instance(self, request: LaunchRequest) -> str:
        [instance_id] = await self.run_instances(dataclasses.replace(request, count=1))
        return instance_id

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._count("RunInstances")
        made: list[str] = []
        for _ in range(request.count):
            self.launched.append(request)
            instance_id = f"i-{len(self.launched):08x}"
            made.append(instance_id)
            self.instances.append(
                read_instance(
                    id=instance_id,
                    instance_type=request.instance_type,
                    availability_zone=request.availability_zone,
                    state="pending",
                    launched_at=self.clock(),
                    tags=request.tags,
                )
            )
        return made

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        self._count("CreateTags")
        self._retag(instance_id, {**self._tags_of(instance_id), **tags})

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        self._count("DeleteTags")
        self._retag(instance_id, {k: v for k, v in self._tags_of(instance_id).items() if k not in keys})

    def _tags_of(self, instance_id: str) -> Mapping[str, str]:
        return next((i.tags for i in self.instances if i.id == instance_id), {})

    def _retag(self, instance_id: str, tags: Mapping[str, str]) -> None:
        """The instance read again with `tags` as all its tags, as DescribeInstances would show it after."""
        self.instances = [
            read_instance(
                id=i.id,
                instance_type=i.instance_type,
                availability_zone=i.availability_zone,
                state=i.state,
                launched_at=i.launched_at,
                tags=tags,
                private_ip=i.private_ip,
            )
            if i.id == instance_id
            else i
            for i in self.instances
        ]

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        self._count("TerminateInstances")
        self.terminated.extend(instance_ids)
        self.instances = [
            dataclasses.replace(i, state="shutting-down") if i.id in instance_ids else i for i in self.instances
        ]

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        self._count("StopInstances")
        self.stopped.extend(instance_ids)
        self.instances = [
            dataclasses.replace(i, state="stopping") if i.id in instance_ids else i for i in self.instances
        ]

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        self._count("StartInstances")
        self.started.extend(instance_ids)
        self.instances = [
            dataclasses.replace(i, state="pending") if i.id in instance_ids else i for i in self.instances
        ]

    async def list_volumes(self, cluster: str) -> list[Volume]:
        self._count("DescribeVolumes")
        self.reads.append(("list_volumes", ()))
        return list(self.volumes)

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        self._count("DescribeVolumes")
        self.reads.append(("describe_volumes", tuple(volume_ids)))
        return [v for v in self.volumes if v.id in volume_ids]

    async def create_volume(self, request: VolumeRequest) -> str:
        self._count("CreateVolume")
        raise AssertionError("no test here creates volumes")

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None:
        self._count("AttachVolume")

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None:
        self._count("DetachVolume")

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None:
        self._count("CreateTags")
        self.tag_calls.append((volume_id, dict(set_tags), tuple(remove_keys)))
        for i, volume in enumerate(self.volumes):
            if volume.id == volume_id:
                tags = {k: v for k, v in {**volume.tags, **set_tags}.items() if k not in remove_keys}
                self.volumes[i] = read_volume(
                    id=volume.id,
                    availability_zone=volume.availability_zone,
                    state=volume.state,
                    size_gib=volume.size_gib,
                    volume_type=volume.volume_type,
                    created_at=volume.created_at,
                    tags=tags,
                    attachments=volume.attachments,
                )

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        self._count("ModifyVolume")
        self.modified.append((volume_id, size_gib))
        for i, volume in enumerate(self.volumes):
            if volume.id == volume_id:
                if size_gib < volume.size_gib:
                    raise Ec2Error("ModifyVolume", "InvalidParameterValue", "New size cannot be smaller")
                self.volumes[i] = dataclasses.replace(volume, size_gib=size_gib)

    async def delete_volume(self, volume_id: str) -> None:
        self._count("DeleteVolume")
        self.volumes = [v for v in self.volumes if v.id != volume_id]

    async def describe_volume(self, volume_id: str) -> Volume | None:
        self._count("DescribeVolumes")
        return next((v for v in self.volumes if v.id == volume_id), None)

    def aws_clock(self) -> float | None:
        return self.clock() - self.aws_behind_s


class Clock:
    """Epoch seconds that move only when the test says so."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def autoscaler(
    swarm: FakeSwarm,
    ec2: FakeEc2,
    *,
    policy: Policy | None = None,
    clock: Callable[[], float] | None = None,
    timing: LoopTiming | None = None,
    dry_run: bool = False,
    lease_valid: Callable[[], bool] = lambda: True,
    max_plan_age_s: float = float("inf"),
    metrics: Metrics | None = None,
    reservations: FakeReservations | None = None,
    first_cycle_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Reconciler:
    """A Reconciler over the fakes, wired by the function that wires the real one (wiring.build_reconciler); its
    reservations in a FakeReservations of its own unless one is given."""
    settings = settings_of(policy or make_policy(), timing=timing or LoopTiming(), dry_run=dry_run)
    clock = clock or Clock()
    if getattr(ec2, "follows_autoscaler", False):
        ec2.clock = clock
    return build_reconciler(
        settings,
        swarm=swarm,
        ec2=ec2,
        clock=clock,
        lease_valid=lease_valid,
        max_plan_age_s=max_plan_age_s,
        metrics=metrics,
        reservations=reservations if reservations is not None else FakeReservations(),
        first_cycle_scope=first_cycle_scope,
    )


class FakeReservations:
    """The reservation store in memory; `failing` makes every call raise as a Redis that does not answer would."""

    def __init__(self, *stored: Reservation) -> None:
        self.stored: dict[str, Reservation] = {r.id: r for r in stored}
        self.failing = False
        self.unreadable: tuple[str, ...] = ()

    def _check(self) -> None:
        if self.failing:
            raise ReservationStoreError("cannot read the reservations in Redis: Connection refused")

    async def list(self) -> list[Reservation]:
        self._check()
        return sorted(self.stored.values(), key=lambda r: (r.at, r.id))

    async def add(self, reservation: Reservation) -> None:
        self._check()
        self.stored[reservation.id] = reservation

    async def delete(self, reservation_id: str) -> bool:
        self._check()
        return self.stored.pop(reservation_id, None) is not None


def status_json(scaler: Reconciler) -> dict[str, Any]:
    """What GET /v1/status answers for `scaler` now, as JSON: the view the API asks for, at the fake clock's time."""
    return scaler.status(NOW).model_dump(mode="json")


@dataclass
class FakeLock:
    """ports.Lock in memory: one holder per key with an expiry on the fake clock, like Redis SET NX PX."""

    clock: Callable[[], float]  # the store's clock: a test's fake one, or time.monotonic
    entries: dict[str, tuple[str, float]] = field(default_factory=dict)
    down: bool = False  # every call raises LockError, as with Redis unreachable
    hang: bool = False  # every call waits forever, as with a Redis that accepts and never answers
    cut_off: set[str] = field(default_factory=set)  # owners whose calls fail (a partitioned replica)
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def _gate(self, operation: str, owner: str) -> None:
        self.calls.append((operation, owner))
        if self.hang:
            await asyncio.get_running_loop().create_future()
        if self.down or owner in self.cut_off:
            raise LockError(f"fake lock store unreachable for {operation}")

    def _holder(self, key: str) -> str | None:
        entry = self.entries.get(key)
        if entry is None or entry[1] <= self.clock():
            self.entries.pop(key, None)
            return None
        return entry[0]

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        await self._gate("acquire", owner)
        if self._holder(key) is not None:
            return False
        self.entries[key] = (owner, self.clock() + ttl_ms / 1000)
        return True

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        await self._gate("renew", owner)
        if self._holder(key) != owner:
            return False
        self.entries[key] = (owner, self.clock() + ttl_ms / 1000)
        return True

    async def release(self, key: str, owner: str) -> bool:
        await self._gate("release", owner)
        if self._holder(key) != owner:
            return False
        del self.entries[key]
        return True

    async def holder(self, key: str) -> str | None:
        await self._gate("holder", "")
        return self._holder(key)

    def expiry_of(self, key: str) -> float | None:
        entry = self.entries.get(key)
        return None if entry is None else entry[1]


class AwsTypesEc2(FakeEc2):
    """DescribeInstanceTypes as AWS answers it: one name it does not know refuses the whole call."""

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        unknown = sorted(set(names) - set(self.types))
        if unknown:
            self.call_counts[("DescribeInstanceTypes", "InvalidInstanceType")] += 1
            message = f"The following supplied instance types do not exist: [{', '.join(unknown)}]"
            raise UnknownInstanceTypes("DescribeInstanceTypes", "InvalidInstanceType", message)
        return await super().describe_instance_types(names)


class RefusingClient:
    """An aiobotocore EC2 client, as far as the adapter uses one, that refuses each call named in `refusals` (its
    method, e.g. "start_instances") with that AWS code, as botocore raises it: the real adapter's reading of AWS's
    refusals, without a network. `calls` records each call's method and parameters."""

    meta = SimpleNamespace(endpoint_url="https://ec2.eu-central-1.amazonaws.com")

    def __init__(self, refusals: Mapping[str, str]) -> None:
        self.refusals = dict(refusals)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, method: str) -> Callable[..., Awaitable[dict[str, Any]]]:
        if method not in self.refusals:
            raise AttributeError(method)

        async def call(**params: Any) -> dict[str, Any]:
            self.calls.append((method, params))
            operation = "".join(word.title() for word in method.split("_"))
            error = {"Code": self.refusals[method], "Message": f"{operation} refused by the test"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation)

        return call


def refusing_adapter(method: str, code: str) -> AiobotocoreEc2:
    """The real EC2 adapter over a client that refuses `method` with AWS's `code`."""
    return AiobotocoreEc2(RefusingClient({method: code}))


class ClusterEc2(FakeEc2):
    """Answers for its own cluster only, as the tags filter EC2's answers."""

    async def list_instances(self, cluster: str) -> list[Instance]:
        assert cluster == CLUSTER, cluster
        return await super().list_instances(cluster)

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        assert cluster == CLUSTER, cluster
        return await super().describe_instances(cluster, instance_ids)

    async def list_volumes(self, cluster: str) -> list[Volume]:
        assert cluster == CLUSTER, cluster
        return await super().list_volumes(cluster)

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        assert cluster == CLUSTER, cluster
        return await super().describe_volumes(cluster, volume_ids)


# -- apply's ports, recorded ------------------------------------------------------------------------------

JOIN = JoinInfo("10.1.2.3:2377", "SWMTKN-1-abc-def")


class Recorder:
    """Both ports at once: every call is recorded as (operation, arguments...); `fail` maps an operation to the
    error its calls raise."""

    def __init__(self, join: JoinInfo = JOIN) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.launches: list[LaunchRequest] = []
        self.volume_requests: list[VolumeRequest] = []
        self.fail: dict[str, Exception] = {}
        self.join = join
        self.volumes: dict[str, Volume] = {}

    def _call(self, operation: str, *args: Any) -> None:
        self.calls.append((operation, *args))
        if operation in self.fail:
            raise self.fail[operation]

    # Swarm
    async def list_nodes(self) -> list[Node]:
        return []

    async def list_tasks(self) -> list[Task]:
        return []

    async def join_info(self) -> JoinInfo:
        self._call("join_info")
        return self.join

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        recorded = None if labels is None else dict(labels)
        # The removed keys only when there are some: every other update is recorded as it always was.
        if remove_labels:
            self._call("update_node", node_id, recorded, availability, tuple(remove_labels))
        else:
            self._call("update_node", node_id, recorded, availability)

    async def remove_node(self, node_id: str) -> None:
        self._call("remove_node", node_id)

    async def events(self) -> AsyncIterator[str]:
        yield "node"

    # Ec2
    async def list_instances(self, cluster: str) -> list[Instance]:
        return []

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        return []

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        return []

    async def run_instance(self, request: LaunchRequest) -> str:
        self._call("run_instance", request.client_token)
        self.launches.append(request)
        return "i-0000000000000001"

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        self._call("run_instances", request.client_token, request.count)
        self.launches.append(request)
        return [f"i-{n:016x}" for n in range(1, request.count + 1)]

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        self._call("tag_instance", instance_id, dict(tags))

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        self._call("untag_instance", instance_id, tuple(keys))

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        self._call("terminate_instances", list(instance_ids))

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        self._call("stop_instances", list(instance_ids))

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        self._call("start_instances", list(instance_ids))

    async def list_volumes(self, cluster: str) -> list[Volume]:
        return list(self.volumes.values())

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        return [v for v in self.volumes.values() if v.id in volume_ids]

    async def create_volume(self, request: VolumeRequest) -> str:
        self._call("create_volume", request.client_token)
        self.volume_requests.append(request)
        return "vol-0000000000000001"

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None:
        self._call("attach_volume", volume_id, instance_id, device)

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None:
        self._call("detach_volume", volume_id, instance_id, force)

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None:
        self._call("tag_volume", volume_id, dict(set_tags), tuple(remove_keys))

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        self._call("modify_volume", volume_id, size_gib)

    async def delete_volume(self, volume_id: str) -> None:
        self._call("delete_volume", volume_id)

    async def describe_volume(self, volume_id: str) -> Volume | None:
        self._call("describe_volume", volume_id)
        return self.volumes.get(volume_id)

    def aws_clock(self) -> float | None:
        return None


async def one(action: Action, ports: Recorder, template: LaunchTemplate = TEMPLATE, **kwargs: Any) -> Outcome:
    outcomes = await apply((action,), ports, ports, template, clock=lambda: NOW, **kwargs)
    assert len(outcomes) == 1
    assert outcomes[0].action == action
    return outcomes[0]


# -- the lease's tests: a monotonic clock that moves when told, a stand-in term, a lease on them -------------

TTL_S: Final = 3.0
RENEW_S: Final = 0.5
STOP_GRACE_S: Final = 2.0  # how long lease_on's leases let a stopping term finish
KEY: Final = "warmswarm:autoscaling:unit:leader"


class FakeClock:
    """Monotonic seconds that move only when a test says so; sleepers wake in order as time passes."""

    def __init__(self) -> None:
        self.now_s = 1000.0
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def __call__(self) -> float:
        return self.now_s

    async def sleep(self, delay_s: float) -> None:
        if delay_s <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now_s + delay_s, next(self._order), wake))
        await wake

    async def advance(self, delta_s: float) -> None:
        """Move time forward by delta_s, waking every sleeper at its own instant and letting it run."""
        target_s = self.now_s + delta_s
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target_s:
            at_s, _, wake = heapq.heappop(self._sleepers)
            self.now_s = max(self.now_s, at_s)
            if not wake.done():
                wake.set_result(None)
            await settle()
        self.now_s = target_s
        await settle()

    async def run_for(self, duration_s: float, step_s: float, check: Callable[[], None]) -> None:
        """Advance in steps, calling `check` at every step."""
        end_s = self.now_s + duration_s
        while self.now_s < end_s:
            await self.advance(min(step_s, end_s - self.now_s))
            check()


async def finish(*tasks: asyncio.Task[None]) -> None:
    """Cancel lease loops and wait for them, in real time: a lease that cannot stop fails the test, not hangs it."""
    for task in tasks:
        task.cancel()
    async with asyncio.timeout(5.0):
        await asyncio.gather(*tasks, return_exceptions=True)


async def settle() -> None:
    # Enough loop iterations for a wake-up to run through the lease's awaits (call, wait, step down).
    for _ in range(20):
        await asyncio.sleep(0)


@dataclass
class FakeTerm:
    """A term of leadership (what the lease runs while it leads) that records what happened to it; `busy` makes it
    hang in the middle of a cycle."""

    started: int = 0
    running: int = 0
    cancelled: int = 0
    finished: int = 0
    busy: bool = False
    stops: list[asyncio.Event] = field(default_factory=list)

    async def __call__(self, stop: asyncio.Event) -> None:
        self.started += 1
        self.running += 1
        self.stops.append(stop)
        try:
            if self.busy:
                await asyncio.get_running_loop().create_future()  # an apply that never returns
            await stop.wait()  # between cycles until asked to stop
            self.finished += 1
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1


def lease_on(
    lock: FakeLock,
    clock: FakeClock,
    flags: list[bool] | None = None,
    *,
    name: str = "a",
    ttl_s: float = TTL_S,
    renew_s: float = RENEW_S,
    safety_margin_s: float | None = None,
    stop_grace_s: float = STOP_GRACE_S,
) -> Lease:
    """A lease on `lock` for replica `name`, timed by `clock`; `flags` receives each change of leadership."""
    return Lease(
        lock,
        key=KEY,
        replica=name,
        ttl_s=ttl_s,
        renew_interval_s=renew_s,
        safety_margin_s=safety_margin_s,
        stop_grace_s=stop_grace_s,
        on_change=None if flags is None else flags.append,
        clock=clock,
        sleep=clock.sleep,
    )
