"""The director's request bodies and the id rules they enforce (its answers are warmswarm_models.answers); no I/O."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator
from warmswarm_models import GroupProperties, InvalidOwner, Owner
from warmswarm_models.cache import MAX_CACHE_TTL_S, MAX_VOLUME_SIZE_GIB, MAX_WARM_TTL_S, VolumeType

# Group ids become part of a Redis key: a small, unambiguous alphabet keeps keys readable and unescaped.
GROUP_ID_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"
_GROUP_ID: Final = re.compile(GROUP_ID_PATTERN)
# The contract's rule for owner ids (warmswarm_models.Owner), written out for the OpenAPI document; a unit test
# holds the two together.
OWNER_ID_PATTERN: Final = r"^[a-z0-9][a-z0-9._-]{0,127}$"
# The platform sends ids as JSON integers (osparc does): 0 to 2^53 - 1, the largest integer every JSON parser
# (JavaScript's too) reads exactly; a larger one is sent as a string.
MAX_INTEGER_ID: Final = 2**53 - 1
IMAGE_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$"
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


def _whole_number(value: Any) -> Any:
    """A JSON number with no fraction (7, or 7.0, which JSON Schema also calls an integer) as an int; else as is."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _id_text(value: Any) -> Any:
    """An integer id as the text it becomes (swarm labels, EC2 tags and Redis keys are text); anything else as is."""
    value = _whole_number(value)
    # A bool is an int to Python, not an id: left as is, it is refused as "not a valid string".
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= MAX_INTEGER_ID:
            raise ValueError(f"an integer id is 0 to {MAX_INTEGER_ID}, not {value}")
        return str(value)
    return value


def _id_schema(pattern: str, description: str) -> WithJsonSchema:
    return WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_INTEGER_ID},
                {"type": "string", "pattern": pattern},
            ],
            "description": f"{description} A JSON integer is taken as its decimal text.",
        }
    )


_OWNER_ID_TEXT: Final = "1-128 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit."
_GROUP_ID_TEXT: Final = "1-64 letters, digits, '.', '_' or '-'."


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
# In a request body, where the platform may send an integer: the same rule, after the integer became text.
GroupIdIn = Annotated[
    str, BeforeValidator(_id_text), AfterValidator(check_group_id), _id_schema(GROUP_ID_PATTERN, _GROUP_ID_TEXT)
]
# In a path: always text, documented with its pattern (the validator keeps its own, clearer, message).
GroupIdPathText = Annotated[
    str, AfterValidator(check_group_id), WithJsonSchema({"type": "string", "pattern": GROUP_ID_PATTERN})
]
NodeIdPathText = Annotated[str, WithJsonSchema({"type": "string", "pattern": OWNER_ID_PATTERN})]

# Owner ids in a request body: an integer or a string, kept as text (the labels and tags are the text).
UserIdIn = Annotated[str, BeforeValidator(_id_text), _owner_id("user_id"), _id_schema(OWNER_ID_PATTERN, _OWNER_ID_TEXT)]
ProjectIdIn = Annotated[
    str, BeforeValidator(_id_text), _owner_id("project_id"), _id_schema(OWNER_ID_PATTERN, _OWNER_ID_TEXT)
]
NodeIdIn = Annotated[str, BeforeValidator(_id_text), _owner_id("node_id"), _id_schema(OWNER_ID_PATTERN, _OWNER_ID_TEXT)]


class ResourcesIn(BaseModel):
    # Strict: a number is a JSON number, never true, false or a string of digits (the document says so).
    model_config = ConfigDict(extra="forbid", strict=True)

    cpus: float = Field(ge=MIN_CPUS, le=MAX_CPUS, allow_inf_nan=False, description="CPUs reserved and allowed.")
    memory_bytes: int = Field(
        ge=MIN_MEMORY_BYTES, le=MAX_MEMORY_BYTES, description="Memory reserved and allowed, in bytes."
    )
    gpus: int = Field(default=0, ge=0, le=MAX_GPUS, description="GPUs reserved (swarm generic resource 'gpu').")

    _whole = field_validator("memory_bytes", "gpus", mode="before")(_whole_number)


class GroupPropertiesIn(GroupProperties):
    """PUT /v1/groups/{id}/properties: the properties as the contract has them, read strictly (true is not 1)."""

    model_config = ConfigDict(strict=True, title="GroupProperties")

    _whole = field_validator("cache_ttl_s", "cache_size_gib", "cache_max_size_gib", "warm_ttl_s", mode="before")(
        _whole_number
    )


class GroupPropertiesPatch(BaseModel):
    """PATCH /v1/groups/{id}/properties: the fields to change, as a JSON merge patch (RFC 7386).

    A field left out keeps its stored value; a field sent as null goes back to its default (for recycle_machines and
    accept_recycled: no opinion, which neither grants nor refuses; false stays a refusal). The same rules as
    GroupProperties, read as strictly as PUT reads them; a unit test holds the two field lists together.
    """

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    ebs_cache_enabled: bool | None = None
    cache_ttl_s: int | None = Field(default=None, ge=0, le=MAX_CACHE_TTL_S)
    cache_size_gib: int | None = Field(default=None, ge=1, le=MAX_VOLUME_SIZE_GIB)
    cache_max_size_gib: int | None = Field(default=None, ge=1, le=MAX_VOLUME_SIZE_GIB)
    volume_type: VolumeType | None = None
    warm_ttl_s: int | None = Field(default=None, ge=0, le=MAX_WARM_TTL_S)
    recycle_machines: bool | None = None
    accept_recycled: bool | None = None

    _whole = field_validator("cache_ttl_s", "cache_size_gib", "cache_max_size_gib", "warm_ttl_s", mode="before")(
        _whole_number
    )

    def applied_to(self, current: GroupProperties | None) -> GroupProperties:
        """The properties after this patch: `current` (the defaults when None) with the fields sent changed."""
        merged = current.model_dump() if current is not None else {}
        for name in self.model_fields_set:
            value = getattr(self, name)
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return GroupProperties.model_validate(merged)


class ServiceRequest(BaseModel):
    """What the platform asks for: one owner's service, with what it needs and the groups its user is in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    user_id: UserIdIn
    project_id: ProjectIdIn
    node_id: NodeIdIn
    # An image reference's alphabet (repository, tag, digest, a registry's host and port), ASCII only: the
    # document's pattern then means the same to every regex engine.
    image: str = Field(min_length=1, max_length=512, pattern=IMAGE_PATTERN)
    command: list[str] | None = None
    resources: ResourcesIn
    groups: list[GroupIdIn] = Field(min_length=1, max_length=MAX_GROUPS_PER_REQUEST)

    @property
    def owner(self) -> Owner:
        return Owner(self.user_id, self.project_id, self.node_id)
