"""The ports the autoscaler talks through (swarm, EC2), in our own types and our own errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Task


class PortError(Exception):
    """A call to the swarm or to EC2 failed; the message says what and what to do next."""


class SwarmError(PortError):
    pass


class Ec2Error(PortError):
    def __init__(self, operation: str, code: str, message: str) -> None:
        super().__init__(f"EC2 {operation} failed with {code}: {message}")
        self.operation = operation
        self.code = code


class InsufficientCapacity(Ec2Error):
    """AWS has no capacity for this instance type in this availability zone right now."""


@dataclass(frozen=True, slots=True)
class JoinInfo:
    manager_addr: str  # host:port a worker joins
    worker_token: str


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    instance_type: str
    availability_zone: str
    image_id: str
    user_data: str
    tags: Mapping[str, str]
    client_token: str
    subnet_id: str | None = None
    security_group_ids: tuple[str, ...] = ()
    iam_instance_profile: str | None = None
    key_name: str | None = None


class Swarm(Protocol):
    async def list_nodes(self) -> list[Node]: ...

    async def list_tasks(self) -> list[Task]: ...

    async def join_info(self) -> JoinInfo: ...

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
    ) -> None:
        """Merge `labels` into the node's labels and/or set its availability; retries stale versions."""
        ...

    async def remove_node(self, node_id: str) -> None:
        """Force-remove the node; a node already gone is not an error."""
        ...

    def events(self) -> AsyncIterator[str]:
        """Yields the type ("node", "service") of each relevant swarm event, forever."""
        ...


class Ec2(Protocol):
    async def list_instances(self, cluster: str) -> list[Instance]:
        """Instances tagged for this cluster, in every state but terminated."""
        ...

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]: ...

    async def run_instance(self, request: LaunchRequest) -> str:
        """Launch one instance; returns its id. Raises InsufficientCapacity or Ec2Error."""
        ...

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        """Terminate; ids already gone are not an error."""
        ...
