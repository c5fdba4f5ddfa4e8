"""The ports the autoscaler talks through (swarm, EC2, the lock, the reservations), in our own types and errors."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from warmswarm_models.reservation import Reservation

from warmswarm_autoscaling.snapshot import Instance, InstanceType, Node, Task, Volume


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


class TokenSpent(Ec2Error):
    """The client token's first use is over: AWS answered with what it made then, which is gone for good
    (an instance terminated, a volume deleted), or refused it as first used with other arguments
    (IdempotentParameterMismatch: a changed size, type or zone). The decision needs the next generation's token."""

    def __init__(
        self, operation: str, token: str, made: str, state: str, *, code: str = "TokenSpent", message: str = ""
    ) -> None:
        super().__init__(operation, code, message or f"client token {token} made {made}, which is {state} now")
        self.token = token

    @classmethod
    def reused(cls, operation: str, token: str, aws_message: str) -> TokenSpent:
        """AWS's IdempotentParameterMismatch: the token's first use was for another decision's arguments."""
        message = (
            f"{aws_message} (client token {token} was first used with other arguments, for a decision since"
            " changed: it is spent, and the decision takes the next generation's token)"
        )
        return cls(operation, token, "", "", code="IdempotentParameterMismatch", message=message)


class UnknownInstanceTypes(Ec2Error):
    """EC2 does not know (in this region) one or more of the instance types asked about: it refuses the whole
    DescribeInstanceTypes call, and names the unknown ones only in its message."""


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
    count: int = 1  # machines of one call, alike in all but their ids (a batch)


@dataclass(frozen=True, slots=True)
class VolumeRequest:
    availability_zone: str
    size_gib: int
    volume_type: str
    tags: Mapping[str, str]
    client_token: str  # a retried CreateVolume returns the same volume


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
        remove_labels: Sequence[str] = (),
    ) -> None:
        """Merge `labels` into the node's labels, remove the keys `remove_labels` names (absent ones are no error),
        and/or set its availability; retries stale versions."""
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

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        """Of these ids, the instances list_instances would list (this cluster's, not terminated): an id that is gone,
        terminated or not this cluster's is absent from the answer, never an error."""
        ...

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        """The named types' figures. Raises UnknownInstanceTypes when EC2 knows one of them not (AWS refuses the
        whole call), or Ec2Error."""
        ...

    async def run_instance(self, request: LaunchRequest) -> str:
        """Launch one instance; returns its id. Raises InsufficientCapacity, TokenSpent or Ec2Error."""
        ...

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        """Launch up to request.count instances in one call (at least one, as capacity allows); returns the
        ids of those live. Raises InsufficientCapacity, TokenSpent (none of a replayed call's is live) or Ec2Error."""
        ...

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None: ...

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        """DeleteTags of these keys (whatever their values); a key the instance does not carry is no error."""
        ...

    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        """Terminate; ids already gone are not an error."""
        ...

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        """Stop (EBS volumes stay attached). Raises Ec2Error (IncorrectInstanceState while not running)."""
        ...

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        """Start stopped instances. Raises InsufficientCapacity (no capacity to start them now) or Ec2Error."""
        ...

    async def list_volumes(self, cluster: str) -> list[Volume]:
        """Cache volumes of this cluster (tagged warmswarm:cluster=<cluster> and warmswarm:role=cache)."""
        ...

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        """Of these ids, the volumes list_volumes would list: an id that is gone or not this cluster's cache volume is
        absent from the answer, never an error."""
        ...

    async def create_volume(self, request: VolumeRequest) -> str:
        """Create an encrypted volume; returns its id. Raises TokenSpent or Ec2Error."""
        ...

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None: ...

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None: ...

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None: ...

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        """Grow the volume to `size_gib`, online (ModifyVolume). Raises Ec2Error: a smaller size
        (InvalidParameterValue), a modification still under way (IncorrectModificationState), one within six hours
        of the last (VolumeModificationRateExceeded)."""
        ...

    async def delete_volume(self, volume_id: str) -> None:
        """Delete; a volume already gone is not an error; one in use raises Ec2Error (VolumeInUse)."""
        ...

    async def describe_volume(self, volume_id: str) -> Volume | None:
        """The volume as EC2 has it now (None when it is gone), for a re-read right before an irreversible call."""
        ...

    def aws_clock(self) -> float | None:
        """AWS's clock now, as its last answer's Date plus the time since (monotonic), epoch s; None before the first
        answer. A cycle that calls no EC2 at all still reads AWS's clock as it runs on, not as it was."""
        ...


# -- leader election ------------------------------------------------------------------------------


class LockError(PortError):
    """The lock store did not answer (down, timeout): whether we still hold the lock is unknown."""


class Lock(Protocol):
    """A named lock with an expiry, held by one owner id at a time (Redis: one key holding the owner's id).

    Every call is one attempt: retrying is the caller's business, because only the caller knows
    how long its lease can still be trusted. Failures to reach the store raise LockError.
    """

    async def acquire(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Take the lock if nobody holds it, expiring ttl_ms after the store sets it; True when we got it."""
        ...

    async def renew(self, key: str, owner: str, ttl_ms: int) -> bool:
        """Reset the expiry to ttl_ms from now if `owner` still holds the lock; False when it does not."""
        ...

    async def release(self, key: str, owner: str) -> bool:
        """Delete the lock if `owner` holds it; True when it did (another owner's lock is left alone)."""
        ...

    async def holder(self, key: str) -> str | None:
        """The owner id holding the lock now, None when free; for logs and status only, never for decisions."""
        ...


# -- reservations ---------------------------------------------------------------------------------


class ReservationStoreError(PortError):
    """The reservation store did not answer, or holds a record that cannot be read; the message says which."""


class ReservationStore(Protocol):
    """Ops' reservations of one cluster, kept where a restart or a new leader finds them (Redis: one hash)."""

    async def list(self) -> list[Reservation]:
        """Every stored reservation (unreadable records are skipped and named by `unreadable`)."""
        ...

    async def add(self, reservation: Reservation) -> None: ...

    async def delete(self, reservation_id: str) -> bool:
        """Remove it; False when there was none of that id."""
        ...

    @property
    def unreadable(self) -> tuple[str, ...]:
        """Ids of records the last list could not read (a hand edit, a newer writer): never planned from."""
        ...
