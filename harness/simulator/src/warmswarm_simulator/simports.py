"""The autoscaler's own ports (ports.Ec2, ports.Swarm) over the modelled cloud and swarm, the way its adapters talk.

Each EC2 call takes its modelled latency, is admitted or throttled (RequestLimitExceeded) by the token buckets, and is
counted by operation and outcome like the aiobotocore adapter counts it. Throttled calls are not retried inside the
call: the next cycle retries (the real adapter's botocore retries of non-launch calls are not modelled).
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence

from warmswarm_autoscaling.ports import (
    Ec2Error,
    InsufficientCapacity,
    JoinInfo,
    LaunchRequest,
    SwarmError,
    TokenSpent,
    VolumeRequest,
)
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Task, Volume
from warmswarm_ec2rules.throttling import REQUEST_LIMIT_EXCEEDED
from warmswarm_models import CLUSTER_TAG, ROLE_CACHE, ROLE_TAG

from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_values import CloudError, SpentToken
from warmswarm_simulator.config import Model
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.world import World

THROTTLED = REQUEST_LIMIT_EXCEEDED  # what a call refused by its request bucket answers
_PAGE = 1000  # DescribeInstances' largest page; the adapter lets AWS choose, which is this
_FILTER_MAX_VALUES = 200  # ids per call of a describe by id (the adapter's chunks: AWS's limit of a filter's values)
_CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity"})
_TOKEN_MISMATCH = "IdempotentParameterMismatch"  # ec2rules/tokens.py: a token reused with other arguments


class SimEc2:
    """Implements ports.Ec2 (and a few calls the baseline makes) against the modelled cloud."""

    def __init__(self, world: World, model: Model, cloud: Cloud, throttle: Throttle) -> None:
        self._world = world
        self._model = model
        self._cloud = cloud
        self._throttle = throttle
        self.call_counts: Counter[tuple[str, str]] = Counter()
        self._volumes_seen: tuple[int, str, list[Volume]] = (-1, "", [])

    async def _call(self, operation: str, instances: int = 0) -> None:
        """Half the latency to reach AWS, the buckets' answer there; the caller acts, then awaits `_back`."""
        await asyncio.sleep(self._model.api.of(operation) / 2)
        throttled = self._throttle.refusal(operation, self._world.now_s, instances)
        if throttled is not None:
            self.call_counts[(operation, throttled.code)] += 1
            raise Ec2Error(operation, throttled.code, throttled.message)
        self.call_counts[(operation, "ok")] += 1

    async def _back(self, operation: str) -> None:
        await asyncio.sleep(self._model.api.of(operation) / 2)

    def _error(self, error: CloudError, token: str = "") -> Ec2Error:
        """The port's error for the cloud's refusal, as the adapter makes it (`token`: the call's client token)."""
        self.call_counts[(error.operation, "ok")] -= 1
        self.call_counts[(error.operation, error.code)] += 1
        if error.code in _CAPACITY_CODES:
            return InsufficientCapacity(error.operation, error.code, error.message)
        if error.code == _TOKEN_MISMATCH and token:
            # The token's first use was with other arguments (another size, type or zone): spent for this decision.
            return TokenSpent.reused(error.operation, token, error.message)
        return Ec2Error(error.operation, error.code, error.message)

    async def list_instances(self, cluster: str) -> list[Instance]:
        found = self._cloud.listed(cluster)
        for _ in range(max(1, math.ceil(len(found) / _PAGE))):
            await self._call("DescribeInstances")
        await self._back("DescribeInstances")
        return [i.value() for i in self._cloud.listed(cluster)]

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        wanted = set(instance_ids)
        for _ in range(max(1, math.ceil(len(wanted) / _FILTER_MAX_VALUES))):
            await self._call("DescribeInstances")
        await self._back("DescribeInstances")
        # As the filter answers: an id gone, terminated or not this cluster's is simply absent.
        return [i.value() for i in self._cloud.listed(cluster) if i.id in wanted]

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        unique = sorted(set(names))
        for _ in range(max(1, math.ceil(len(unique) / 100))):
            await self._call("DescribeInstanceTypes")
        await self._back("DescribeInstanceTypes")
        types = self._model.instance_types
        return [InstanceType(n, types[n].resources) for n in unique if n in types]

    async def run_instance(self, request: LaunchRequest) -> str:
        (instance_id,) = await self.run_batch(
            request.instance_type, request.availability_zone, 1, request.tags, request.client_token
        )
        state = self._cloud.instances[instance_id].state
        if state not in ("pending", "running"):
            # A replayed token answers with the instance it made the first time, as it is now.
            raise TokenSpent("RunInstances", request.client_token, instance_id, state)
        return instance_id

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        """One call for request.count machines alike; the ids of those live (a replayed token's may be gone)."""
        made = await self.run_batch(
            request.instance_type, request.availability_zone, request.count, request.tags, request.client_token
        )
        live = [i for i in made if self._cloud.instances[i].state in ("pending", "running")]
        if not live:
            raise TokenSpent("RunInstances", request.client_token, ",".join(made), "terminated")
        return live

    async def run_batch(
        self, instance_type: str, zone: str, count: int, tags: Mapping[str, str], token: str = ""
    ) -> list[str]:
        """RunInstances with MinCount = MaxCount = count (the baseline launches a type's batch in one call)."""
        await self._call("RunInstances", instances=count)
        try:
            made = self._cloud.run_instances(instance_type, zone, count, tags, token)
        except CloudError as error:
            raise self._error(error, token) from error
        await self._back("RunInstances")
        return made

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        await self._call("CreateTags")
        try:
            self._cloud.tag_instance(instance_id, tags)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("CreateTags")

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        if not keys:
            return  # as the adapter: no call for nothing to remove
        await self._call("DeleteTags")
        try:
            self._cloud.untag_instance(instance_id, keys)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("DeleteTags")

    def mark_for_meter(self, instance_id: str, *, buffer_member: bool) -> None:
        """The meter's note of whether a machine is a buffer's (billed by the buffers' rule) or a session's: the
        simulator's bookkeeping, not an EC2 call, so it costs the policy no modelled time and no token (osparc keeps
        no such tag; what it would pay for one is not what is compared)."""
        self._cloud.mark_for_meter(instance_id, buffer_member=buffer_member)

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        unique = sorted(set(instance_ids))
        for start in range(0, len(unique), 100):
            batch = unique[start : start + 100]
            await self._call("TerminateInstances", instances=len(batch))
            try:
                self._cloud.terminate_instances([i for i in batch if i in self._cloud.instances])
            except CloudError as error:
                raise self._error(error) from error
        await self._back("TerminateInstances")

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        await self._call("StopInstances", instances=len(instance_ids))
        try:
            self._cloud.stop_instances(instance_ids)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("StopInstances")

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        await self._call("StartInstances", instances=len(instance_ids))
        try:
            self._cloud.start_instances(instance_ids)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("StartInstances")

    async def list_volumes(self, cluster: str) -> list[Volume]:
        await self._call("DescribeVolumes")
        await self._back("DescribeVolumes")
        store = self._cloud.volumes
        version, seen_cluster, volumes = self._volumes_seen
        if version != store.version or seen_cluster != cluster:
            volumes = [
                v.value()
                for v in store.volumes.values()
                if v.tags.get(CLUSTER_TAG) == cluster and v.tags.get(ROLE_TAG) == ROLE_CACHE
            ]
            self._volumes_seen = (store.version, cluster, volumes)
        return list(volumes)

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        wanted = sorted(set(volume_ids))
        for _ in range(max(1, math.ceil(len(wanted) / _FILTER_MAX_VALUES))):
            await self._call("DescribeVolumes")
        await self._back("DescribeVolumes")
        found = (self._cloud.volumes.volumes.get(volume_id) for volume_id in wanted)
        return [
            v.value()
            for v in found
            if v is not None and v.tags.get(CLUSTER_TAG) == cluster and v.tags.get(ROLE_TAG) == ROLE_CACHE
        ]

    async def create_volume(self, request: VolumeRequest) -> str:
        await self._call("CreateVolume")
        try:
            volume_id = self._cloud.volumes.create(
                request.availability_zone, request.size_gib, request.volume_type, request.tags, request.client_token
            )
        except SpentToken as spent:
            # AWS answered (with the volume the token made, now deleted): a successful call.
            raise TokenSpent("CreateVolume", request.client_token, "a volume", "deleted") from spent
        except CloudError as error:
            raise self._error(error, request.client_token) from error
        await self._back("CreateVolume")
        return volume_id

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None:
        await self._call("AttachVolume")
        try:
            self._cloud.volumes.attach(volume_id, instance_id, device)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("AttachVolume")

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None:
        await self._call("DetachVolume")
        try:
            self._cloud.volumes.detach(volume_id, instance_id)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("DetachVolume")

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None:
        # As the adapter does: CreateTags for what is set, DeleteTags for what is removed.
        try:
            if set_tags:
                await self._call("CreateTags")
                self._cloud.volumes.set_tags(volume_id, set_tags)
                await self._back("CreateTags")
            if remove_keys:
                await self._call("DeleteTags")
                self._cloud.volumes.delete_tags(volume_id, remove_keys)
                await self._back("DeleteTags")
        except CloudError as error:
            raise self._error(error) from error

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        await self._call("ModifyVolume")
        try:
            self._cloud.volumes.modify(volume_id, size_gib)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("ModifyVolume")

    async def delete_volume(self, volume_id: str) -> None:
        await self._call("DeleteVolume")
        try:
            self._cloud.volumes.delete(volume_id)
        except CloudError as error:
            raise self._error(error) from error
        await self._back("DeleteVolume")

    async def describe_volume(self, volume_id: str) -> Volume | None:
        await self._call("DescribeVolumes")
        await self._back("DescribeVolumes")
        volume = self._cloud.volumes.get(volume_id)
        return volume.value() if volume is not None else None

    def aws_clock(self) -> float | None:
        return self._world.epoch()


class SimSwarmPort:
    """Implements ports.Swarm against the modelled swarm; `events` yields "node" and "service" as they happen."""

    def __init__(self, world: World, model: Model, swarm: Swarm) -> None:
        self._model = model
        self._swarm = swarm
        self.calls: Counter[str] = Counter()

    async def _call(self, name: str) -> None:
        self.calls[name] += 1
        await asyncio.sleep(self._model.api.docker_s)

    async def list_nodes(self) -> list[Node]:
        await self._call("list nodes")
        return [n.value() for n in self._swarm.nodes.values()]

    async def list_tasks(self) -> list[Task]:
        await self._call("list tasks")
        return [t.value() for t in self._swarm.tasks.values()]

    async def join_info(self) -> JoinInfo:
        await self._call("inspect the swarm")
        return JoinInfo("10.255.0.1:2377", "SWMTKN-1-simulated")

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        await self._call("update node")
        if node_id not in self._swarm.nodes:
            raise SwarmError(f"node {node_id} is gone (removed from the swarm)")
        self._swarm.update_node(node_id, labels, availability, remove_labels=tuple(remove_labels))

    async def remove_labels(self, node_id: str, keys: tuple[str, ...]) -> None:
        await self._call("update node")
        if node_id in self._swarm.nodes:
            self._swarm.remove_labels(node_id, keys)

    async def pre_pull(self, node_id: str, images: tuple[str, ...]) -> None:
        """The baseline's pre-pull on a hot-buffer node. osparc sends it as an SSM command (docker pull on the
        machine), not a swarm call; SSM's own latency, throttling and status polls are not modelled."""
        await self._call("pre-pull images")
        self._swarm.pre_pull(node_id, images)

    async def remove_node(self, node_id: str) -> None:
        await self._call("remove node")
        self._swarm.remove_node(node_id)

    async def events(self) -> AsyncIterator[str]:
        queue = self._swarm.subscribe()
        while True:
            yield await queue.get()
