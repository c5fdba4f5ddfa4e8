"""Observation: reads swarm and EC2 into one Snapshot; read-only, and all-or-nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from warmswarm_autoscaling.ports import Ec2, PortError, Swarm
from warmswarm_autoscaling.snapshot import Carried, InstanceType, Snapshot


class ObservationFailed(Exception):
    """A read failed: the cycle must not act on a partial view of the world."""


class InstanceCatalogue:
    """DescribeInstanceTypes for the allowed types, cached: the figures change with AWS releases, not by the minute."""

    def __init__(self, ec2: Ec2, names: Sequence[str], ttl_s: float) -> None:
        self._ec2 = ec2
        self._names = list(names)
        self._ttl_s = ttl_s
        self._types: dict[str, InstanceType] = {}
        self._fetched_at = float("-inf")

    async def get(self, now: float) -> Mapping[str, InstanceType]:
        if now - self._fetched_at >= self._ttl_s or not self._types:
            found = await self._ec2.describe_instance_types(self._names)
            self._types = {t.name: t for t in found}
            self._fetched_at = now
        return self._types


async def observe(
    swarm: Swarm,
    ec2: Ec2,
    catalogue: InstanceCatalogue,
    cluster: str,
    now: float,
    carried: Carried,
) -> Snapshot:
    try:
        nodes, tasks, instances, volumes, types = await asyncio.gather(
            swarm.list_nodes(),
            swarm.list_tasks(),
            ec2.list_instances(cluster),
            ec2.list_volumes(cluster),
            catalogue.get(now),
        )
    except PortError as error:
        raise ObservationFailed(str(error)) from error
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        tasks=tuple(tasks),
        instances=tuple(instances),
        instance_types=types,
        volumes=tuple(volumes),
        carried=carried,
        aws_now=ec2.aws_clock(),
    )
