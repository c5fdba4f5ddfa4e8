"""Small builders of plain values and sample data for the tests: nodes, tasks, instances, volumes, snapshots, a
policy; the worlds several planner test files share (a class in batches, the warm buffer, a warm machine); and the
launch template, the launch and the released volume apply's and the reconciler's tests act on.

Figures are real: t3.medium 2 vCPU/4 GiB, m5.large 2/8 GiB, m5.xlarge 4/16 GiB, g4dn.xlarge 4/16 GiB/1 GPU,
at their on-demand prices (USD per hour).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from warmswarm_autoscaling import tags
from warmswarm_autoscaling.actions import (
    Action,
    BindMachine,
    ClaimBufferMachine,
    CreateVolume,
    ExpireVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    ReleaseVolume,
    RenewVolume,
    SetVolumeTtl,
)
from warmswarm_autoscaling.plan import Plan, Waiting, plan
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.readings import read_instance, read_node, read_task, read_volume
from warmswarm_autoscaling.reconciler import LoopTiming
from warmswarm_autoscaling.requests import LaunchTemplate
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.snapshot import (
    Carried,
    Instance,
    InstanceType,
    Node,
    Snapshot,
    Task,
    Volume,
    VolumeAttachment,
)
from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_CACHE_FILL,
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    GPU,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    ROLE_CACHE,
    ROLE_TAG,
    ROLE_WORKER,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    Owner,
    Resources,
    format_timestamp,
)

GIB: Final = 2**30
MIB: Final = 2**20
# Epoch seconds; 1_699_999_800 is a multiple of the default max_start_s (600), so NOW is 200 s into a window.
NOW: Final = 1_700_000_000.0
CLUSTER: Final = "test"
ZONE_A: Final = "eu-west-1a"
ZONE_B: Final = "eu-west-1b"

# Status.Err of a task the swarm scheduler could not place (verbatim from swarmkit).
ERR_RESOURCES: Final = "no suitable node (insufficient resources on 1 node)"
ERR_CONSTRAINTS: Final = "no suitable node (scheduling constraints not satisfied on 2 nodes)"

T3_MEDIUM: Final = InstanceType("t3.medium", Resources(2.0, 4 * GIB))
M5_LARGE: Final = InstanceType("m5.large", Resources(2.0, 8 * GIB))
M5_XLARGE: Final = InstanceType("m5.xlarge", Resources(4.0, 16 * GIB))
G4DN_XLARGE: Final = InstanceType("g4dn.xlarge", Resources(4.0, 16 * GIB, {GPU: 1}))
INSTANCE_TYPES: Final[Mapping[str, InstanceType]] = {t.name: t for t in (T3_MEDIUM, M5_LARGE, M5_XLARGE, G4DN_XLARGE)}
PRICES: Final[Mapping[str, float]] = {"t3.medium": 0.0416, "m5.large": 0.096, "m5.xlarge": 0.192, "g4dn.xlarge": 0.526}
OVERHEAD: Final = Resources(0.1, 256 * MIB)

ALICE: Final = Owner(user_id="alice")
BOB: Final = Owner(user_id="bob")
NOBODY: Final = Owner()
# The cache needs an owner pinned by all three ids (one volume per user, project and node).
ALICE_N1: Final = Owner(user_id="alice", project_id="p1", node_id="n1")
ALICE_N2: Final = Owner(user_id="alice", project_id="p1", node_id="n2")
BOB_N1: Final = Owner(user_id="bob", project_id="p1", node_id="n1")
# What the director writes on a service whose owner's groups keep a cache: one hour, 20 GiB gp3.
CACHE_ON: Final = CachePolicy(enabled=True, ttl_s=3600, size_gib=20, volume_type="gp3")

_DEFAULT_POLICY: Final = Policy(
    cluster=CLUSTER,
    allowed_instance_types=("t3.medium", "m5.large", "m5.xlarge", "g4dn.xlarge"),
    price_per_hour=PRICES,
    availability_zones=(ZONE_A, ZONE_B),
    node_overhead=OVERHEAD,
    max_instances=10,
    max_launches_per_cycle=5,
    idle_grace_s=300.0,
    max_start_s=600.0,
    capacity_backoff_s=600.0,
)
# The default policy's clocks, as the tests count them.
GRACE_S: Final = 300.0  # idle_grace_s
MAX_START_S: Final = 600.0  # max_start_s
BACKOFF_S: Final = 600.0  # capacity_backoff_s

A = TypeVar("A")


def make_policy(**changes: Any) -> Policy:
    """The default policy (all four types, two zones, 0.1 CPU + 256 MiB overhead) with `changes` applied."""
    return dataclasses.replace(_DEFAULT_POLICY, **changes)


def settings_of(policy: Policy, *, timing: LoopTiming | None = None, dry_run: bool = False) -> AutoscalingSettings:
    """The settings a fresh install would need to decide by `policy` (nothing read from the environment), for
    wiring.build_reconciler; the loop's timing as given (the settings' defaults otherwise)."""
    timing = timing or LoopTiming()
    settings = AutoscalingSettings.model_construct(
        cluster=policy.cluster,
        image_id="ami-12345678",
        aws_region=policy.availability_zones[0][:-1],
        availability_zones=list(policy.availability_zones),
        allowed_instance_types=list(policy.allowed_instance_types),
        price_per_hour=dict(policy.price_per_hour),
        node_overhead_cpus=policy.node_overhead.cpus,
        node_overhead_memory_bytes=policy.node_overhead.memory_bytes,
        max_instances=policy.max_instances,
        max_stopped_instances=policy.max_stopped_instances,
        warm_buffer=dict(policy.warm_buffer),
        buffer_refill_s=policy.buffer_refill_s,
        reservation_lead_margin=policy.reservation_lead_margin,
        max_launches_per_cycle=policy.max_launches_per_cycle,
        max_launch_calls_per_cycle=policy.max_launch_calls_per_cycle,
        idle_grace_s=policy.idle_grace_s,
        max_start_s=policy.max_start_s,
        capacity_backoff_s=policy.capacity_backoff_s,
        attach_timeout_s=policy.attach_timeout_s,
        max_clock_skew_s=policy.max_clock_skew_s,
        recycle_max_age_s=policy.recycle_max_age_s,
        recycle_max_owners=policy.recycle_max_owners,
        resync_interval_s=timing.resync_interval_s,
        busy_resync_interval_s=timing.busy_resync_interval_s,
        debounce_s=timing.debounce_s,
        failure_backoff_s=timing.failure_backoff_s,
        dry_run=dry_run,
    )
    # A policy the settings cannot express (a GPU in the overhead, say) would wire another loop than the test means.
    # The launch settings' digest is the settings' own (the AMI, the scripts): not a knob a test sets.
    assert dataclasses.replace(settings.policy(), launch_settings=policy.launch_settings) == policy, (
        f"no settings give {policy}"
    )
    return settings


def resources(cpus: float = 1.0, memory_gib: float = 1.0, gpus: int = 0) -> Resources:
    return Resources(cpus, int(memory_gib * GIB), {GPU: gpus} if gpus else {})


def pending_task(
    task_id: str,
    owner: Owner = NOBODY,
    *,
    cpus: float = 1.0,
    memory_gib: float = 1.0,
    gpus: int = 0,
    constraints: Iterable[str] = (),
    err: str = ERR_RESOURCES,
    state: str = "pending",
    desired_state: str = "running",
    service_labels: Mapping[str, str] | None = None,
    created_at: float | None = None,
) -> Task:
    """An unassigned task of `owner` (its placement constraints pin it), by default one swarm could not place."""
    return read_task(
        id=task_id,
        service_id=f"svc-{task_id}",
        service_name=f"service-{task_id}",
        state=state,
        desired_state=desired_state,
        reservations=resources(cpus, memory_gib, gpus),
        constraints=(*owner.constraints(), *constraints),
        node_id=None,
        err=err,
        service_labels=dict(service_labels or {}),
        global_service=False,
        created_at=created_at,
    )


def cached_task(task_id: str, owner: Owner = ALICE_N1, *, cache: CachePolicy = CACHE_ON, **kwargs: Any) -> Task:
    """A pending task of a service whose labels carry `cache` (as the director writes them)."""
    return pending_task(task_id, owner, service_labels=cache.to_labels(), **kwargs)


def running_task(
    task_id: str,
    node: Node,
    owner: Owner = NOBODY,
    *,
    cpus: float = 1.0,
    memory_gib: float = 1.0,
    state: str = "running",
    desired_state: str = "running",
    service_labels: Mapping[str, str] | None = None,
    created_at: float | None = None,
) -> Task:
    """A task assigned to `node` (by default running there)."""
    return read_task(
        id=task_id,
        service_id=f"svc-{task_id}",
        service_name=f"service-{task_id}",
        state=state,
        desired_state=desired_state,
        reservations=resources(cpus, memory_gib),
        constraints=tuple(owner.constraints()),
        node_id=node.id,
        err="",
        service_labels=dict(service_labels or {}),
        global_service=False,
        created_at=created_at,
    )


def instance(
    instance_id: str,
    owner: Owner = NOBODY,
    *,
    instance_type: str = "t3.medium",
    zone: str = ZONE_A,
    state: str = "running",
    launched_at: float = NOW - 60.0,
    tags: Mapping[str, str] | None = None,
    volume_id: str | None = None,
    private_ip: str | None = None,
) -> Instance:
    """An EC2 instance of this cluster, tagged as apply tags what it launches (owner ids, the cache volume id).

    Its private address is one of its own (derived from its id) unless given.
    """
    all_tags = {CLUSTER_TAG: CLUSTER, ROLE_TAG: ROLE_WORKER, **owner.labels(), **(tags or {})}
    if volume_id is not None:
        all_tags[INSTANCE_VOLUME_TAG] = volume_id
    return read_instance(
        id=instance_id,
        instance_type=instance_type,
        availability_zone=zone,
        state=state,
        launched_at=launched_at,
        tags=all_tags,
        private_ip=private_ip if private_ip is not None else address_of(instance_id),
    )


def address_of(instance_id: str) -> str:
    """A private address that is the instance's own: the same id always gives the same one."""
    crc = zlib.crc32(instance_id.encode())
    return f"10.{crc >> 16 & 0xFF}.{crc >> 8 & 0xFF}.{crc & 0xFF}"


def instance_from_launch(launch: Launch, instance_id: str, *, launched_at: float, state: str = "pending") -> Instance:
    """What apply creates for a Launch: the type and zone it names, tagged with its owner and cache volume.

    A launch without a volume goes out in a LaunchBatch: its machine starts anonymous, tagged with the batch.
    """
    if launch.volume_id is None:
        return instance(
            instance_id,
            NOBODY,
            instance_type=launch.instance_type,
            zone=launch.availability_zone,
            state=state,
            launched_at=launched_at,
            tags={INSTANCE_BATCH_TAG: f"batch-{launch.client_token[:8]}"},
        )
    return instance(
        instance_id,
        launch.owner,
        instance_type=launch.instance_type,
        zone=launch.availability_zone,
        state=state,
        launched_at=launched_at,
        volume_id=launch.volume_id,
    )


def our_labels(of: Instance, owner: Owner | None = None) -> dict[str, str]:
    """The labels plan writes on the node of `of`: its owner's ids, the three warmswarm keys, its volume."""
    labels = (owner or Owner.from_labels(of.tags)).labels()
    labels[NODE_LABEL_INSTANCE_ID] = of.id
    labels[NODE_LABEL_INSTANCE_TYPE] = of.instance_type
    labels[NODE_LABEL_AVAILABILITY_ZONE] = of.availability_zone
    if INSTANCE_VOLUME_TAG in of.tags:
        labels[NODE_LABEL_VOLUME_ID] = of.tags[INSTANCE_VOLUME_TAG]
    return labels


def attachment(
    instance_id: str, *, state: str = "attached", attached_at: float = NOW - 60.0, device: str = "/dev/sdf"
) -> VolumeAttachment:
    return VolumeAttachment(instance_id, state, attached_at, device)


def volume(
    volume_id: str,
    owner: Owner = ALICE_N1,
    *,
    zone: str = ZONE_A,
    state: str = "available",
    size_gib: int = 20,
    volume_type: str = "gp3",
    created_at: float = NOW - 86_400.0,
    ttl_s: int | None = 3600,
    released_at: float | None = None,
    expires_at: float | str | None = None,
    attached_to: Iterable[VolumeAttachment] = (),
    tags: Mapping[str, str] | None = None,
) -> Volume:
    """A cache volume of this cluster, tagged as apply tags what CreateVolume makes (owner ids, TTL).

    `released_at`/`expires_at` add the tags plan writes when its instance is gone (a str expiry verbatim).
    """
    all_tags = {CLUSTER_TAG: CLUSTER, ROLE_TAG: ROLE_CACHE, **owner.labels()}
    if ttl_s is not None:
        all_tags[VOLUME_TTL_TAG] = str(ttl_s)
    if released_at is not None:
        all_tags[VOLUME_RELEASED_AT_TAG] = format_timestamp(released_at)
    if expires_at is not None:
        all_tags[VOLUME_EXPIRES_AT_TAG] = expires_at if isinstance(expires_at, str) else format_timestamp(expires_at)
    all_tags.update(tags or {})
    return read_volume(
        id=volume_id,
        availability_zone=zone,
        state=state,
        size_gib=size_gib,
        volume_type=volume_type,
        created_at=created_at,
        tags=all_tags,
        attachments=attached_to,
    )


def volume_from_create(create: CreateVolume, volume_id: str, *, state: str = "creating", created_at: float) -> Volume:
    """What apply makes for a CreateVolume: its zone, size, type, owner and TTL."""
    return volume(
        volume_id,
        create.owner,
        zone=create.availability_zone,
        state=state,
        size_gib=create.size_gib,
        volume_type=create.volume_type,
        created_at=created_at,
        ttl_s=create.ttl_s,
    )


def node_of(
    of: Instance,
    *,
    node_id: str | None = None,
    labelled: bool = True,
    state: str = "ready",
    availability: str | None = None,
    hostname: str | None = None,
    addr: str | None = None,
    mounted: bool = True,
    owner: Owner | None = None,
    cache_fill: str | None = None,
    scrubbed: str | None = None,
) -> Node:
    """The swarm node the daemon on `of` registers. Unlabelled, it has just joined (and so is drained).

    It is seen at the instance's private address unless `addr` says otherwise; its boot mounted the
    instance's cache volume unless `mounted` is False (a reboot whose mount failed). Labelled, it carries
    the owner of its instance's tags, or `owner` (a machine of a batch, bound to that owner when it joined).
    `cache_fill`: its daemon's cache fill label, verbatim (`<volume id>:<used percent>`); `scrubbed`: its daemon's
    scrub proof label, verbatim (`<generation>.<mark's epoch s>`, or anything a disk may hold).
    """
    engine_labels = {ENGINE_LABEL_INSTANCE_ID: of.id}
    if of.volume_id is not None and mounted:
        engine_labels[ENGINE_LABEL_CACHE_VOLUME] = of.volume_id
    if cache_fill is not None:
        engine_labels[ENGINE_LABEL_CACHE_FILL] = cache_fill
    if scrubbed is not None:
        engine_labels[ENGINE_LABEL_SCRUBBED] = scrubbed
    return read_node(
        id=node_id or f"node-{of.id}",
        hostname=hostname or f"ip-10-0-0-{of.id[-2:]}",
        state=state,
        availability=availability or ("active" if labelled else "drain"),
        role="worker",
        resources=INSTANCE_TYPES[of.instance_type].resources,
        labels=our_labels(of, owner) if labelled else {},
        engine_labels=engine_labels,
        addr=of.private_ip if addr is None else addr,
    )


def foreign_node(
    node_id: str,
    *,
    role: str = "worker",
    state: str = "ready",
    availability: str = "active",
    labels: Mapping[str, str] | None = None,
    engine_instance_id: str | None = None,
    cpus: float = 4.0,
    memory_gib: float = 16.0,
) -> Node:
    """A node warmswarm did not boot (a manager, or a worker ops added by hand)."""
    return read_node(
        id=node_id,
        hostname=f"host-{node_id}",
        state=state,
        availability=availability,
        role=role,
        resources=resources(cpus, memory_gib),
        labels=labels or {},
        engine_labels={ENGINE_LABEL_INSTANCE_ID: engine_instance_id} if engine_instance_id else {},
    )


def snapshot(
    *,
    nodes: Iterable[Node] = (),
    tasks: Iterable[Task] = (),
    instances: Iterable[Instance] = (),
    volumes: Iterable[Volume] = (),
    now: float = NOW,
    idle_since: Mapping[str, float] | None = None,
    unavailable: Mapping[tuple[str, str], float] | None = None,
    instance_types: Mapping[str, InstanceType] = INSTANCE_TYPES,
    down_since: Mapping[str, float] | None = None,
    stopped_since: Mapping[str, float] | None = None,
    spent_tokens: Iterable[str] = (),
    failed_starts: Iterable[str] = (),
    carried: Carried | None = None,
) -> Snapshot:
    """A snapshot of these things at `now`, carrying what an earlier cycle left: `carried` whole, or its parts."""
    if carried is None:
        carried = Carried(
            idle_since=dict(idle_since or {}),
            down_since=dict(down_since or {}),
            stopped_since=dict(stopped_since or {}),
            unavailable_offerings=dict(unavailable or {}),
            spent_tokens=frozenset(spent_tokens),
            failed_starts=frozenset(failed_starts),
        )
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        tasks=tuple(tasks),
        instances=tuple(instances),
        instance_types=instance_types,
        volumes=tuple(volumes),
        carried=carried,
    )


def next_snapshot(
    previous: Plan,
    *,
    now: float,
    nodes: Iterable[Node] = (),
    tasks: Iterable[Task] = (),
    instances: Iterable[Instance] = (),
    volumes: Iterable[Volume] = (),
) -> Snapshot:
    """The next cycle's snapshot, carrying the bookkeeping the previous plan left (as the loop does)."""
    return snapshot(nodes=nodes, tasks=tasks, instances=instances, volumes=volumes, now=now, carried=previous.carried)


def run(snap: Snapshot, policy: Policy | None = None) -> Plan:
    return plan(snap, policy or make_policy())


def actions_of(result: Plan, kind: type[A]) -> list[A]:
    """The plan's actions of `kind`. Launches include those a LaunchBatch carries: one per machine decided."""
    found: list[A] = []
    for action in result.actions:
        if isinstance(action, kind):
            found.append(action)
        elif isinstance(action, LaunchBatch) and kind is Launch:
            found.extend(launch for launch in action.launches if isinstance(launch, kind))
    return found


def only(result: Plan, kind: type[A]) -> A:
    """The one action of `kind` in the plan; fails when there is none or more than one."""
    found = actions_of(result, kind)
    assert len(found) == 1, f"expected one {kind.__name__}, got {result.actions}"
    return found[0]


# The actions that change a volume's tags, and an instance's (apply writes them with tags.py, the one encoder).
VolumeTagging = ReleaseVolume | RenewVolume | SetVolumeTtl | ExpireVolume
InstanceTagging = BindMachine | ClaimBufferMachine


def volume_tagging(result: Plan) -> list[VolumeTagging]:
    """The plan's actions that tag a volume (released, renewed, a new TTL), in the plan's order."""
    return [a for a in result.actions if isinstance(a, ReleaseVolume | RenewVolume | SetVolumeTtl | ExpireVolume)]


def instance_tagging(result: Plan) -> list[InstanceTagging]:
    """The plan's actions that tag an instance (a batch machine bound, a buffer machine claimed), in order."""
    return [a for a in result.actions if isinstance(a, BindMachine | ClaimBufferMachine)]


def set_tags(action: VolumeTagging | InstanceTagging) -> dict[str, str]:
    """The tags apply writes for a tagging action."""
    match action:
        case BindMachine(owner=owner):
            return tags.bound_tags(owner)
        case ClaimBufferMachine():
            return tags.claim_tags(action)
        case ReleaseVolume():
            return tags.release_tags(action)
        case SetVolumeTtl():
            return tags.ttl_tags(action)
        case ExpireVolume():
            return tags.expiry_tags(action)
        case RenewVolume():
            return {}


def labels_of(label: LabelNode) -> dict[str, str]:
    """The labels apply writes on a node for a LabelNode."""
    return tags.node_labels(label)


def removed_tags(action: VolumeTagging) -> tuple[str, ...]:
    """The tag keys apply removes for a volume-tagging action: a renewal's release tags."""
    return tags.RELEASE_TAG_KEYS if isinstance(action, RenewVolume) else ()


def one_of(found: list[A]) -> A:
    """The one item of `found`; fails when there is none or more than one."""
    assert len(found) == 1, f"expected one, got {found}"
    return found[0]


def waiting_for(result: Plan, task_id: str) -> Waiting:
    """The one Waiting entry for `task_id`; fails when there is none or more than one."""
    found = [w for w in result.waiting if w.task_id == task_id]
    assert len(found) == 1, f"expected one Waiting for {task_id}, got {result.waiting}"
    return found[0]


def names(action: Action) -> set[str]:
    """The node, instance and volume ids an action acts on (a label or a tag names more: it acts on its target)."""
    if isinstance(action, LabelNode | BindMachine | ClaimBufferMachine):
        return {action.target}
    named = set()
    for attribute in ("node_id", "instance_id", "volume_id"):
        value = getattr(action, attribute, None)
        if isinstance(value, str):
            named.add(value)
    return named


# -- worlds several planner test files share --------------------------------------------------------------

# A class opening sessions at once: a student is an owner of their own; their machines go out in batches.
CLASS_POLICY: Final = make_policy(max_instances=1000, max_launches_per_cycle=1000, max_launch_calls_per_cycle=10)


def student(n: int) -> Owner:
    return Owner(user_id=f"s{n}", project_id="course", node_id=f"nb{n}")


def batches(result: Plan) -> list[LaunchBatch]:
    return actions_of(result, LaunchBatch)


def class_machine(instance_id: str, *, state: str = "pending", launched_at: float = NOW, batch: str = "b1") -> Instance:
    """A machine of a class's batch in zone A, nobody's yet: on its way, launched now, unless told otherwise."""
    return instance(
        instance_id, NOBODY, state=state, launched_at=launched_at, tags={INSTANCE_BATCH_TAG: batch}, zone=ZONE_A
    )


# The warm buffer: one stopped t3.medium kept in zone A.
BUFFERED: Final = make_policy(warm_buffer={"t3.medium": 1}, availability_zones=(ZONE_A,))


def buffer_machine(
    instance_id: str = "i-b1",
    *,
    state: str = "stopped",
    instance_type: str = "t3.medium",
    zone: str = ZONE_A,
    owner: Owner | None = None,
) -> Instance:
    """A machine launched for the buffer; with `owner`, one that owner has claimed since."""
    tags = {INSTANCE_BUFFER_TAG: "true"}
    if owner is not None:
        tags |= {**owner.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 500)}
    return instance(instance_id, state=state, instance_type=instance_type, zone=zone, tags=tags)


# The warm tier: alice's machine kept for an hour once idle.
WARM_S: Final = 3600
WARM_TAGS: Final = {INSTANCE_WARM_TTL_TAG: str(WARM_S)}


def warm_machine(state: str = "stopped", until: float = NOW + 1800) -> Instance:
    """Alice's machine as we stop it for the warm tier: tagged with its warm-until, its cache volume attached."""
    tags = {**WARM_TAGS, INSTANCE_WARM_UNTIL_TAG: format_timestamp(until)}
    return instance("i-01", ALICE_N1, state=state, tags=tags, volume_id="vol-1")


# The cache volume the EBS tests follow from launch to janitor.
VOL: Final = "vol-0a1"


# -- what apply and the reconciler act on ---------------------------------------------------------------------

TEMPLATE: Final = LaunchTemplate(
    cluster="prod",
    image_id="ami-0123456789abcdef0",
    subnet_ids={ZONE_A: "subnet-aaaa", ZONE_B: "subnet-bbbb"},
    security_group_ids=("sg-1", "sg-2"),
    iam_instance_profile="warmswarm-node",
    key_name="ops-key",
    node_cache_path="/srv/warm-cache",
    device_wait_s=123,
)


def launch(volume_id: str | None = None, *, zone: str = ZONE_A, token: str = "tok-launch-1") -> Launch:
    """A Launch of an m5.large for alice's pending task, with her cache volume when `volume_id` is given."""
    return Launch("m5.large", zone, ALICE_N1, ("t1",), Resources(1.0, 2**30), token, "2 tasks of alice wait", volume_id)


def kept(volume_id: str = "vol-a", attached_to: Sequence[str] = ()) -> Volume:
    """Alice's cache volume, released a minute ago and kept for the hour after; attached to `attached_to` if any."""
    return volume(
        volume_id,
        ALICE_N1,
        released_at=NOW - 60,
        expires_at=NOW + 3540,
        state="in-use" if attached_to else "available",
        attached_to=[attachment(i) for i in attached_to],
    )
