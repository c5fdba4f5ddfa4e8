"""The director's request bodies and the id rules they enforce (its answers are warmswarm_models.answers); no I/O."""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from warmswarm_models import InvalidOwner, Owner

# Group ids become part of a Redis key: a small, unambiguous alphabet keeps keys readable and unescaped.
GROUP_ID_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
_GROUP_ID: Final = re.compile(GROUP_ID_PATTERN)
# Bounds one request's Redis read; no real user is in this many groups.
MAX_GROUPS_PER_REQUEST: Final = 64
# swarmkit refuses reservations below these (a service create fails with "Must be at least ...").
MIN_CPUS: Final = 0.001
MIN_MEMORY_BYTES: Final = 4 * 2**20
# Far above any EC2 machine (the largest have 896 vCPUs, 32 TiB, 16 GPUs); they only keep the swarm's
# integer fields (NanoCPUs, MemoryBytes: int64) from overflowing.
MAX_CPUS: Final = 4096
MAX_MEMORY_BYTES: Final = 2**50
MAX_GPUS: Final = 64


class InvalidGroupId(ValueError):
    """A group id outside the allowed alphabet or length; the message says which rule it breaks."""


def check_group_id(value: str) -> str:
    if not _GROUP_ID.fullmatch(value):
        raise InvalidGroupId(
            f"group id {value!r} is not valid: use 1-64 characters of letters, digits, '.', '_' or '-'"
        )
    return value


def _owner_id(key: str) -> AfterValidator:
    # One rule for ids, the contract's: an id the director accepts is one the autoscaler can label a node with.
    def check(value: str) -> str:
        try:
            Owner(**{key: value})
        except InvalidOwner as error:
            raise ValueError(str(error)) from None
        return value

    return AfterValidator(check)


GroupId = Annotated[str, AfterValidator(check_group_id)]


class ResourcesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpus: float = Field(ge=MIN_CPUS, le=MAX_CPUS, allow_inf_nan=False, description="CPUs reserved and allowed.")
    memory_bytes: int = Field(
        ge=MIN_MEMORY_BYTES, le=MAX_MEMORY_BYTES, description="Memory reserved and allowed, in bytes."
    )
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS, description="GPUs reserved (swarm generic resource 'gpu').")


class ServiceRequest(BaseModel):
    """What the platform asks for: one owner's service, with what it needs and the groups its user is in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: Annotated[str, _owner_id("user_id")]
    project_id: Annotated[str, _owner_id("project_id")]
    node_id: Annotated[str, _owner_id("node_id")]
    image: str = Field(min_length=1, max_length=512, pattern=r"^\S+$")
    command: list[str] | None = None
    resources: ResourcesIn
    groups: list[GroupId] = Field(min_length=1, max_length=MAX_GROUPS_PER_REQUEST)

    @property
    def owner(self) -> Owner:
        return Owner(self.user_id, self.project_id, self.node_id)
