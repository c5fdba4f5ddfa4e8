"""The JSON answers both services give, as pydantic models: the APIs declare them, the director and the CLI parse them.

Readers ignore fields they do not know, and fields added after the first release have defaults, so a newer
service answers an older reader and the other way round.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from warmswarm_models.reservation import ReservationOut
from warmswarm_models.start import BufferKind, StartPath
from warmswarm_models.tier import Tier


class Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Problem(Answer):
    """An error answer: what happened and what to do next."""

    detail: str


class HealthOut(Answer):
    status: Literal["alive"] = "alive"


# -- the autoscaler ---------------------------------------------------------------------------------


class ReadyOut(Answer):
    """GET /ready of the leader: ready after a recent successful cycle."""

    ready: bool
    last_success_age_s: float | None
    # The allowed instance types EC2 does not know in this region (never launched; the others are). Left out of the
    # answer while there are none, so that it reads exactly as before.
    unknown_instance_types: list[str] = Field(default_factory=list, exclude_if=lambda names: not names)


class FollowerReadyOut(Answer):
    """GET /ready of a replica that follows: ready while the lock store answers, so it can take over."""

    ready: bool
    leader: Literal[False] = False
    lock_store_answers: bool
    leader_seen: str | None  # the replica last seen holding the lock


class CycleOut(Answer):
    started_at: float  # epoch s
    duration_s: float
    ok: bool
    error: str | None = None
    actions: int = 0


class NodeOut(Answer):
    node_id: str
    hostname: str
    role: str
    state: str  # swarm's: ready, down, unknown, disconnected
    availability: str  # active, pause, drain
    owner: dict[str, str]  # the owner labels as written (user_id, project_id, node_id), those present
    instance_id: str | None
    instance_type: str | None
    availability_zone: str | None
    idle_s: float | None


class PendingOut(Answer):
    task_id: str
    service: str = ""
    owner: dict[str, str] = Field(default_factory=dict)
    reason: str = ""
    unschedulable: bool = False  # no launch can help: the request (or the settings) must change
    starting: bool = False  # its machine is on the way


class LaunchOut(Answer):
    instance_id: str
    instance_type: str
    availability_zone: str
    state: str  # EC2's
    owner: dict[str, str]
    age_s: float


class InstanceOut(Answer):
    """One machine of the cluster and its tier: hot (running or starting), warm (stopped for its owner, until
    `tier_until`), cold (on its way out: shutting down, or stopped by someone else)."""

    instance_id: str
    instance_type: str
    availability_zone: str
    state: str  # EC2's
    owner: dict[str, str]
    tier: Tier
    tier_until: str | None = None  # ISO 8601 UTC: when a warm machine is terminated
    node_id: str | None = None  # its swarm node, once it joined
    # The facts a session's start path is told from (warmswarm_models.start), ISO 8601 UTC, AWS's clock.
    launched_at: str | None = None  # EC2's LaunchTime
    buffer_kind: BufferKind | None = None  # the buffer it was launched for; None: launched for an owner
    claimed_at: str | None = None  # when an owner claimed it from that buffer
    started_at: str | None = None  # when the autoscaler last started it from stopped
    volume_created_at: str | None = None  # when the cache volume it names was created


class DecisionOut(Answer):
    at: float  # epoch s
    kind: str  # launch, terminate, expire_volume, ... (the metric's action label)
    target: str  # the node, instance or volume id; "<type> in <zone>" for a launch
    action: str  # "<ActionClass> <target>", for people
    reason: str
    dry_run: bool = False  # decided but not applied
    error: str | None = None
    created: str | None = None  # the instance or volume id an action created


class BufferOut(Answer):
    """One part of the buffers: a type in a zone, hot (running, joined drained) or warm (stopped), its target and the
    unclaimed machines it holds (booting, running or stopped); `said` is how the target reads (the rule and its
    figures)."""

    instance_type: str
    availability_zone: str
    kind: Literal["hot", "warm"]
    target: int
    held: int
    said: str


class AutoscalerStatusOut(Answer):
    """GET /v1/status: the world as the last cycle saw it, why tasks wait, and what was decided (newest first)."""

    cluster: str = ""
    dry_run: bool = False
    # False: a replica that follows, and observes nothing. None: an autoscaler without leader election
    # (an older one), which leads alone.
    leader: bool | None = None
    last_cycle: CycleOut | None = None
    nodes: list[NodeOut] = Field(default_factory=list)
    pending: list[PendingOut] = Field(default_factory=list)
    launches_in_flight: list[LaunchOut] = Field(default_factory=list)
    # Every machine of the cluster (any state but terminated), with its tier.
    instances: list[InstanceOut] = Field(default_factory=list)
    decisions: list[DecisionOut] = Field(default_factory=list)
    # What ops should know that is no task's reason to wait: a node claiming another's instance, a clock
    # ahead of AWS's (the janitor then deletes nothing).
    notices: list[str] = Field(default_factory=list)
    # The buffers' parts, each with its target and what it holds (empty without buffers).
    buffers: list[BufferOut] = Field(default_factory=list)
    # Ops' reservations as the last cycle read them, with how the buffers hold each (GET /v1/reservations too).
    reservations: list[ReservationOut] = Field(default_factory=list)


class VolumeOwner(Answer):
    user_id: str | None
    project_id: str | None
    node_id: str | None


class VolumeOut(Answer):
    volume_id: str
    owner: VolumeOwner
    availability_zone: str
    state: str  # EC2's: creating, available, in-use, deleting, deleted, error
    size_gib: int
    volume_type: str
    attached_to: str | None  # instance id
    released_at: str | None  # ISO 8601 UTC (tag warmswarm:released-at)
    expires_at: str | None  # ISO 8601 UTC (tag warmswarm:expires-at); the janitor deletes it after


class VolumesOut(Answer):
    volumes: list[VolumeOut]


class ExpiredOut(Answer):
    volume_id: str
    expires_at: str  # ISO 8601 UTC, as in the warmswarm:expires-at tag


# -- the director -----------------------------------------------------------------------------------

ServiceState = Literal["pending", "starting", "running"]


class DirectorReadyOut(Answer):
    ready: bool
    problem: str | None


class DecidedOut(Answer):
    """A recycling property of the owner's service and the groups that decided it."""

    value: bool
    # The refusing groups when refused (a refusal wins over any grant), the granting ones when granted, empty when
    # none of the owner's groups had an opinion (off). Null: a service made by a director that did not record them.
    decided_by: list[str] | None = None


class CacheOut(Answer):
    enabled: bool
    ttl_s: int
    size_gib: int
    volume_type: str
    # How long the owner's idle machine is kept stopped (warm) before it goes; 0: not kept.
    warm_ttl_s: int = 0
    # Whether the owner's idle machine is scrubbed to serve others, and whether the owner may be given such a machine
    # (docs/operations.md, "Recycled machines"); null from a director older than these fields.
    recycle_machines: DecidedOut | None = None
    accept_recycled: DecidedOut | None = None


class ServiceOut(Answer):
    """POST /v1/services: the owner's service, created (201) or found from an earlier request (200)."""

    node_id: str
    service_id: str
    service_name: str
    cache: CacheOut
    # The request's groups whose properties made `cache`, in the request's order; a group without properties
    # contributes nothing. Empty: none had any, the defaults apply (cache off). Null: a service made by a director
    # that did not record them.
    groups_applied: list[str] | None = None


class StatusOut(Answer):
    """GET /v1/services/{node_id}: pending (with why), starting, or running (where)."""

    status: ServiceState
    reason: str | None
    node: str | None
    instance_id: str | None
    volume_id: str | None
    # How its machine came to run it (warmswarm_models.start); null until it runs and the autoscaler has said.
    start_path: StartPath | None = None


class InvalidRequestOut(Answer):
    """422: pydantic's list of problems, and one line naming each bad field."""

    detail: list[dict[str, object]] | str
    message: str = ""
