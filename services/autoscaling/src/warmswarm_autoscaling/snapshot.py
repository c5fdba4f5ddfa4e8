"""What one observation of the world holds: plain, frozen, typed values the planner decides from.

Tags and labels arrive here already read (readings.py, called by the adapters): an owner is an Owner or
None when its ids are unusable, an expiry is epoch seconds or None. The raw `tags` and `labels` stay on the
values only for what shows them as written (the status view) and for swarm's placement constraints,
which test node labels by name; no decision parses a string.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from warmswarm_models import CachePolicy, Owner, Resources
from warmswarm_models.constraint import Constraint
from warmswarm_models.reservation import Reservation
from warmswarm_models.tier import RUNNING_STATES

# Swarm task states after which a task never runs again.
TERMINAL_TASK_STATES = frozenset({"complete", "shutdown", "failed", "rejected", "orphaned", "remove"})
# EC2 states of an instance that is, or is about to be, a machine we pay for.
LIVE_INSTANCE_STATES = RUNNING_STATES

_EMPTY: Mapping[str, str] = MappingProxyType({})
NOBODY = Owner()


@dataclass(frozen=True, slots=True)
class CacheFill:
    """How full a node says its mounted cache volume's file system is (engine label warmswarm.cache-fill)."""

    volume_id: str  # the volume the figure is of: never read for another
    used_percent: int  # 0..100
    # The size of the file system on it (MiB, floored): less than the volume's by a GiB or more, the file system did not
    # take up the volume's last growth (plan/grow.py grows it no more). None: not said (a node script before it did).
    filesystem_mib: int | None = None


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    hostname: str
    state: str  # swarm node status: "ready", "down", "unknown", "disconnected"
    availability: str  # "active", "pause", "drain"
    role: str  # "worker" or "manager"
    resources: Resources
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # as written: constraints and the view
    # The owner its labels declare: NOBODY without owner labels, None when they hold ids we cannot use.
    owner: Owner | None = NOBODY
    # The instance id we wrote onto the node when we labelled it; None until then.
    labelled_instance_id: str | None = None
    # The instance id the node's own daemon declares (engine label); None for nodes we did not boot.
    engine_instance_id: str | None = None
    # The address the manager sees the node at (Status.Addr): a node is an instance's only when this is
    # the instance's own private address.
    addr: str = ""
    # The cache volume its daemon says this boot mounted (engine label, written by the per-boot script
    # only after the mount succeeded); None: no cache is mounted, whatever the instance was launched for.
    mounted_volume_id: str | None = None
    # The scrub token (`<generation>.<mark's epoch s>`, exactly as the instance's scrub tag asked) whose scrub its
    # daemon says was finished (engine label, written by the boot's scrub only once it finished); None: no proof, or
    # one in another form (a legacy `<n>` proves nothing).
    scrubbed: str | None = None
    # How full its daemon says the cache volume is (None: not said, or unreadable: then why, in cache_fill_problem).
    cache_fill: CacheFill | None = None
    cache_fill_problem: str = ""

    @property
    def is_labelled(self) -> bool:
        return self.labelled_instance_id is not None

    def claims_another_owner(self, owner: Owner | None) -> bool:
        """Owner labels that someone else wrote on a node we have not labelled yet (we write them once, with
        the instance id) naming an owner other than `owner` (None: not decided yet), or unreadable ones."""
        return self.owner is None or (not self.owner.is_nobody and self.owner != owner)


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    service_id: str
    service_name: str
    state: str  # swarm task state: "new", "pending", "assigned", ..., "running", "complete", ...
    desired_state: str
    reservations: Resources
    # The owner its placement constraints pin it to (NOBODY: none); None when they cannot be used, and why.
    owner: Owner | None = NOBODY
    owner_problem: str = ""
    constraints: tuple[Constraint, ...] = ()  # its other placement constraints
    node_id: str | None = None
    err: str = ""  # Status.Err: why the scheduler could not place it
    # The cache policy its service's labels declare (the director writes them); None when unreadable, and why.
    cache: CachePolicy | None = field(default_factory=CachePolicy)
    cache_problem: str = ""
    # Of a global service (one task on every node, like a monitoring agent): it follows the nodes,
    # so it never keeps a node busy, and a new machine is never launched for it.
    global_service: bool = False
    # When swarm created it (CreatedAt, epoch s, the manager's clock); None when not known. Only the metrics read
    # it (how long the oldest waiting task has waited): no decision does.
    created_at: float | None = None

    @property
    def is_active(self) -> bool:
        """Not finished: it runs, or is on its way to run (a restart's new task included)."""
        return self.state not in TERMINAL_TASK_STATES and self.desired_state not in TERMINAL_TASK_STATES

    @property
    def wants_cache(self) -> bool:
        return self.cache is not None and self.cache.enabled


@dataclass(frozen=True, slots=True)
class Scrub:
    """A recycled machine's scrub (tag warmswarm:scrub): owed by its boots until `done`, for its recycle generation.

    `token` is what a node must show, exactly, to prove it (`<generation>.<mark's epoch s>`, unique per mark, so that a
    proof left on the disk by an earlier mark never proves a later one); None: no node can prove it (a legacy
    `pending-<n>` without the moment, or a legacy `done-<n>`). An unreadable tag reads as owed with generation 0 and no
    token: such a machine is never offered."""

    generation: int
    done: bool
    token: str | None = None


@dataclass(frozen=True, slots=True)
class Instance:
    id: str
    instance_type: str
    availability_zone: str
    state: str  # EC2: "pending", "running", "shutting-down", "terminated", "stopping", "stopped"
    launched_at: float  # epoch seconds
    # The owner its tags name (NOBODY: none); None when they hold ids we cannot use.
    owner: Owner | None = NOBODY
    # The cache volume it was launched for (its boot waits for it and mounts it); None without one.
    volume_id: str | None = None
    private_ip: str = ""  # where its node must be seen; "" when EC2 gave none (not launched in a VPC)
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # as written, for the status view
    # The call that launched it for several owners at once (its batch tag); None: launched for its owner.
    batch: str | None = None
    # Its owner's warm tier from its launch: kept stopped this long once idle (0: terminated once idle).
    warm_ttl_s: int = 0
    # Until when we keep it stopped (epoch s), written as we stop it; None: we did not stop it for the warm tier.
    warm_until: float | None = None
    # Launched for the warm buffer (its tag): anonymous until an owner claims it, that owner's for good after.
    buffer: bool = False
    # Of the hot buffer (buffer-kind "hot"): kept running, joined and drained, instead of stopped.
    hot: bool = False
    # When an owner claimed it from a buffer (epoch s, AWS's clock); None: not claimed, or claimed warm unstamped.
    claimed_at: float | None = None
    # When the autoscaler last started it from stopped (epoch s, AWS's clock); None: never.
    started_at: float | None = None
    # Its owner's group lets it be recycled once idle (written at its launch or claim from the owner's policy).
    recyclable: bool = False
    # How many times it was recycled (0: never), and the scrub its boots owe (None: none; see Scrub). `recycled` is None
    # when it cannot be known (the count tag unreadable, missing beside a recycle trace, or contradicting one): the
    # machine has served an unknown owner, and is treated as recycled, past its bounds (see was_recycled).
    recycled: int | None = 0
    scrub: Scrub | None = None
    # For audit: the owners it served before, oldest first, as written (`user_id/project_id`).
    served_owners: tuple[str, ...] = ()
    # The digest of the AMI and launch settings it was launched with ("" when it has none: an older machine).
    launch_settings: str = ""

    @property
    def scrub_owed(self) -> bool:
        """Recycling: from its recycle mark until its node proved the scrub. Nothing offers it, labels it for an owner,
        gives it work or attaches a volume to it meanwhile (plan/recycle.py carries it through)."""
        return self.scrub is not None and not self.scrub.done

    @property
    def was_recycled(self) -> bool:
        """It served another owner before, or may have (its count is unknown): only for owners whose groups all accept
        recycled machines."""
        return self.recycled != 0

    @property
    def in_buffer(self) -> bool:
        """A buffer machine no owner has claimed: nobody's work, label or data goes near it until a claim."""
        return self.buffer and self.owner == NOBODY

    @property
    def claimed_from_buffer(self) -> bool:
        """A buffer machine an owner claimed: its node joined (unlabelled) before it was stopped, so it is a
        machine that comes back, not one that boots for the first time."""
        return self.buffer and self.owner is not None and not self.owner.is_nobody

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_INSTANCE_STATES

    @property
    def unbound(self) -> bool:
        """Launched in a batch and not yet given an owner: any one owner's pending work may take it."""
        return self.batch is not None and self.owner == NOBODY


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    instance_id: str
    state: str  # "attaching", "attached", "detaching", "detached"
    attached_at: float  # epoch seconds (AttachTime)
    device: str = ""


@dataclass(frozen=True, slots=True)
class Volume:
    """An EBS cache volume of this cluster."""

    id: str
    availability_zone: str
    state: str  # "creating", "available", "in-use", "deleting", "deleted", "error"
    size_gib: int
    volume_type: str
    created_at: float  # epoch seconds
    owner: Owner | None = NOBODY  # None when its owner tags are unusable
    ttl_s: int | None = None  # kept this long after release; None: no readable TTL tag
    released_at: float | None = None  # epoch s; None: not released, or the tag is unreadable
    expires_at: float | None = None  # epoch s; None: no expiry, or the tag is unreadable
    # Tag keys present with a value that cannot be read (a hand edit, a bad clock): never trusted.
    unreadable_tags: frozenset[str] = frozenset()
    pinned: bool = False  # an operator's hold (warmswarm:pinned=true): never deleted by the janitor
    # When the autoscaler last asked EBS to grow it (epoch s, AWS's clock); None: never, or unreadable (see above).
    grown_at: float | None = None
    attachments: tuple[VolumeAttachment, ...] = ()
    tags: Mapping[str, str] = field(default_factory=lambda: _EMPTY)  # as written, for the status view


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    resources: Resources  # what the type offers, before the per-node overhead
    max_ebs_attachments: int = 0


@dataclass(frozen=True, slots=True)
class Repeated:
    """A failure that repeated the same way (plan/backoff.py): the machines it cost, where they ran, when it last
    struck, and until when nothing is tried again (epoch s, AWS's clock)."""

    failed: frozenset[str]  # instance ids
    offerings: frozenset[tuple[str, str]]  # (instance type, zone) of those machines
    since: float
    until: float


@dataclass(frozen=True, slots=True)
class Carried:
    """What one cycle leaves the next, in memory only: losing it (a restart, a new term) restarts clocks and
    backoffs and re-learns spent tokens from AWS's answers, and never causes a wrong action.

    The plan decides it (plan/carried.py: the plan's own part, and `after`, what applying it taught).
    """

    # node id -> when it was first seen idle (epoch s)
    idle_since: Mapping[str, float] = field(default_factory=dict)
    # node id -> when it was first seen down while its instance runs (epoch s); a clock of its own
    down_since: Mapping[str, float] = field(default_factory=dict)
    # instance id -> when it was first seen stopped or stopping without a warm-until of ours (epoch s)
    stopped_since: Mapping[str, float] = field(default_factory=dict)
    # (instance type, availability zone) -> until when not to try it (epoch s)
    unavailable_offerings: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # Client tokens whose first use is over (the instance or volume they made is gone): a new launch
    # of the same decision takes the next generation's token.
    spent_tokens: frozenset[str] = frozenset()
    # Stopped machines whose StartInstances failed (no capacity to start them): terminated, their work
    # launched anew in the volume's zone.
    failed_starts: frozenset[str] = frozenset()
    # volume id -> the machines of it that joined without the volume mounted (the device never appeared within the
    # boot's wait), and until when no machine is launched with it, of any type (plan/backoff.py).
    volume_backoffs: Mapping[str, Repeated] = field(default_factory=dict)
    # The buffer machines that never joined (their images may not pull), and until when the buffers launch nothing,
    # of any type in any zone (plan/backoff.py). Owners' launches are not held back by it.
    buffer_backoff: Repeated | None = None
    # instance id -> (type, zone, when it came up for an owner's session: AWS's clock), within the demand window:
    # buffers sized by demand count an arrival after its machine is gone (terminated machines are not listed).
    arrivals: Mapping[str, tuple[str, str, float]] = field(default_factory=dict)

    def next_term(self) -> Carried:
        """What a new term of leadership keeps: the spent tokens and the arrivals seen, which are AWS's facts; what
        an earlier term's clocks saw (a node idle an hour ago) says nothing about what happened while another
        replica led."""
        return Carried(spent_tokens=self.spent_tokens, arrivals=self.arrivals)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The world as one cycle saw it, plus the bookkeeping earlier cycles left (may be lost)."""

    now: float  # epoch seconds
    nodes: tuple[Node, ...]
    tasks: tuple[Task, ...]
    instances: tuple[Instance, ...]  # this cluster's instances, any state but terminated
    instance_types: Mapping[str, InstanceType]
    volumes: tuple[Volume, ...] = ()  # this cluster's cache volumes
    carried: Carried = field(default_factory=Carried)  # what the previous cycle left
    # AWS's clock at the observation (the Date of an EC2 answer, epoch s); None when no answer had one
    aws_now: float | None = None
    # Ops' reservations for known bursts (the autoscaler's Redis), and why none could be read this cycle ("": read).
    reservations: tuple[Reservation, ...] = ()
    reservations_problem: str = ""
    # The store did not answer: the buffers' surplus is left alone this cycle (a held machine is not let go for it).
    reservations_unread: bool = False
