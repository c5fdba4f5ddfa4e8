"""The snapshot indexed once for the decisions: our nodes, which instances joined, which are late or on the way."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_models import Resources

from warmswarm_autoscaling.plan.backoff import buffer_backoff, volume_backoffs
from warmswarm_autoscaling.plan.clock import DeadlineClock
from warmswarm_autoscaling.plan.offerings import Offerings
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Node, Repeated, Snapshot, Task


@dataclass(frozen=True, slots=True)
class Cluster:
    snapshot: Snapshot
    policy: Policy
    instances: dict[str, Instance]
    ours: list[Node]  # nodes we booted
    our_ids: frozenset[str]
    # Instances that are part of the swarm: their node is ready or carries our labels.
    joined: frozenset[str]
    # Instances whose node is ready right now.
    joined_ready: frozenset[str]
    live: list[Instance]  # pending or running
    late: list[Instance]  # live, not joined, past max_start_s: terminated by this plan
    booting: list[Instance]  # live, not joined, still within max_start_s
    # Live instances whose node joined without the cache volume they were launched for mounted (the device never
    # appeared within the boot's wait): terminated by this plan, the volume kept for the next machine.
    mount_failed: dict[str, Instance]
    # Running machines claimed from a buffer whose node has not yet said that their owner's volume is mounted, within
    # their claim's deadline (mount_deadline): on their way to their owner, given no work and not labelled yet.
    mounting: dict[str, Instance]
    # Live instances that are neither late nor failed a mount: every machine a volume or a task may still count on.
    on_the_way: dict[str, Instance]
    # Machines that name their owner's volume and may have it attached now: those on their way, and a warm-buffer
    # machine claimed while stopped (AWS attaches to a stopped one, never a pending one: its start's boot then finds
    # the device at once).
    awaiting_volume: dict[str, Instance]
    reserved: dict[str, Resources]  # node id -> what its active tasks reserve
    # Buffer machines an owner claimed while stopped and that were never started since: each is owed a place within
    # max_instances (its start may come a cycle later, after a failed call), which the buffer's refill must not take.
    owed_starts: frozenset[str]
    # (instance type, zone) -> until when not to try it; late instances' offerings included (not the buffer's)
    unavailable: dict[tuple[str, str], float]
    # volume id -> the machines its device did not appear on, and until when none is launched with it (any type):
    # this plan's failed mounts included (plan/backoff.py)
    volume_backoffs: dict[str, Repeated]
    # Until when the buffers launch nothing (any type, any zone): this plan's late buffer machines included
    buffer_backoff: Repeated | None
    # Nodes that claim one of our instances but are not seen at its address: never labelled, never used.
    impostors: list[Node]
    # Instances a node of ours stands for (in any state): a stopped one without is never coming back as a node.
    with_node: frozenset[str]
    # Why this replica's clock cannot be trusted (it disagrees with AWS's either way), or "": while it is set, the
    # plan writes no deadline and deletes nothing.
    clock_skew: str
    # This replica's clock and AWS's: which each kind of moment is read against (plan/clock.py).
    clock: DeadlineClock
    offerings: Offerings  # the allowed types, their room, which fit a demand
    # Warm machines whose returning owner goes hot instead (recycle.hot_returns): not resumed, recycled this plan.
    hot_returns: frozenset[str] = frozenset()

    @property
    def now(self) -> float:
        """The plan's clock: AWS's (plan/clock.py)."""
        return self.clock.aws

    def instance_of(self, node: Node) -> Instance | None:
        return self.instances.get(node.engine_instance_id or "")

    def machine_room(self, instance: Instance) -> Resources:
        """What a machine offers work: its type's resources less the platform's overhead (none for a type that EC2
        does not list)."""
        known = self.snapshot.instance_types.get(instance.instance_type)
        return known.resources.minus(self.policy.node_overhead) if known else Resources()

    @classmethod
    def of(cls, snapshot: Snapshot, policy: Policy) -> Cluster:
        clock = DeadlineClock.of(snapshot.now, snapshot.aws_now)
        now = clock.aws
        instances = {i.id: i for i in snapshot.instances}
        ours = [n for n in snapshot.nodes if is_ours(n, instances)]
        impostors = [n for n in snapshot.nodes if n.engine_instance_id in instances and not is_ours(n, instances)]
        # An instance has joined once its node is ready or carries our labels (we label only ready nodes).
        # Until then it is on its way, whatever its node shows: a joining node is "unknown" or "down" first.
        # A machine claimed from the buffer joined once, before it was stopped: its start is a return (timed
        # by its down node), not a first boot timed from its launch long ago.
        joined = frozenset(
            n.engine_instance_id
            for n in ours
            if n.engine_instance_id
            and (n.state == "ready" or n.is_labelled or _claimed_from_buffer(instances.get(n.engine_instance_id)))
        )
        joined_ready = frozenset(n.engine_instance_id for n in ours if n.engine_instance_id and n.state == "ready")
        live = [i for i in snapshot.instances if i.is_live]
        # Aged by AWS's clock, which stamped the launch: a replica's clock far ahead does not give up every machine at
        # once (and launch another in a loop), nor one far behind wait for good.
        late = [i for i in live if i.id not in joined and now - _boot_began(i) > policy.max_start_s]
        carried = snapshot.carried
        unavailable = {k: until for k, until in carried.unavailable_offerings.items() if until > now}
        # A late instance is terminated: no task waits for it, and its offering is avoided right away. A late buffer
        # machine says nothing of capacity for owners (its images may not pull): only the buffers wait, growing.
        for instance in late:
            if not instance.in_buffer:
                unavailable[(instance.instance_type, instance.availability_zone)] = now + policy.capacity_backoff_s
        buffer_joined = [i for i in snapshot.instances if i.buffer and i.id in joined]
        buffer_late = [i for i in late if i.in_buffer]
        unmounted = {
            i.id: i
            for n in ours
            if n.state == "ready" and (i := instances.get(n.engine_instance_id or "")) is not None
            if i.is_live and not cache_in_place(n, i)
        }
        mounting = {k: i for k, i in unmounted.items() if (deadline := mount_deadline(i, policy)) and now < deadline}
        mount_failed = {k: i for k, i in unmounted.items() if k not in mounting}
        ready = [n for n in ours if n.state == "ready"]
        volume_ids = frozenset(v.id for v in snapshot.volumes)
        volumes = volume_backoffs(carried.volume_backoffs, mount_failed.values(), ready, volume_ids, now, policy)
        late_ids = {i.id for i in late}
        booting = [i for i in live if i.id not in joined and i.id not in late_ids]
        on_the_way = {i.id: i for i in live if i.id not in late_ids and i.id not in mount_failed}
        claimed_stopped = {
            i.id: i
            for i in snapshot.instances
            if i.buffer
            and i.state == "stopped"
            and i.claimed_at is not None
            and i.volume_id
            and not i.in_buffer
            and not i.scrub_owed
        }
        return cls(
            snapshot=snapshot,
            policy=policy,
            instances=instances,
            ours=ours,
            our_ids=frozenset(n.id for n in ours),
            joined=joined,
            joined_ready=joined_ready,
            live=live,
            late=late,
            booting=booting,
            mount_failed=mount_failed,
            mounting=mounting,
            on_the_way=on_the_way,
            # A machine being recycled waits for no volume: its owner's are detached from it (recycle.py).
            awaiting_volume={k: i for k, i in {**on_the_way, **claimed_stopped}.items() if not i.scrub_owed},
            reserved=reserved_by_node(snapshot.tasks),
            owed_starts=frozenset(
                i.id
                for i in snapshot.instances
                if i.claimed_from_buffer
                and i.state in ("stopping", "stopped")
                and i.started_at is None
                and not i.scrub_owed
            ),
            unavailable=unavailable,
            volume_backoffs=volumes,
            buffer_backoff=buffer_backoff(carried.buffer_backoff, buffer_late, buffer_joined, now, policy),
            impostors=impostors,
            with_node=frozenset(n.engine_instance_id for n in ours if n.engine_instance_id),
            clock_skew=clock_skew_notice(snapshot.aws_now, snapshot.now, policy),
            clock=clock,
            offerings=Offerings(snapshot.instance_types, policy),
        )


def is_ours(node: Node, instances: dict[str, Instance]) -> bool:
    """A node we booted: its daemon names one of our instances and the manager sees it at that instance's
    private address, or (its instance gone) we labelled it for that instance earlier.

    The daemon's word alone is not enough: any machine that can join the swarm can claim any instance id,
    and the node we label for an owner is the one that gets the owner's work and cache.
    """
    if node.engine_instance_id is None:
        return False
    instance = instances.get(node.engine_instance_id)
    if instance is None:
        return node.labelled_instance_id == node.engine_instance_id
    return bool(instance.private_ip) and node.addr == instance.private_ip


def clock_skew_notice(aws_now: float | None, now: float, policy: Policy) -> str:
    """Why no deadline is written and nothing deleted this cycle, or "" when this replica's clock agrees with
    AWS's. Either way it is wrong: ahead, a deadline read now passes early; behind, one written now is in the past
    for the next leader, whose clock is right (a TTL cut short, a volume deleted seconds after its release)."""
    if aws_now is None or abs(now - aws_now) <= policy.max_clock_skew_s:
        return ""
    direction = "ahead of" if now > aws_now else "behind"
    return (
        f"this replica's clock is {abs(now - aws_now):.0f} s {direction} AWS's (the Date of its last answer), more"
        f" than max_clock_skew_s={policy.max_clock_skew_s:g}: no deadline is written (no volume released, no"
        " machine kept warm or claimed from the buffer) and no cache volume deleted until the clocks agree (check"
        " NTP on this machine)"
    )


def cache_in_place(node: Node, instance: Instance | None) -> bool:
    """The node's boot mounted the volume its instance was launched for (or it was launched for none)."""
    return instance is None or instance.volume_id is None or node.mounted_volume_id == instance.volume_id


def mount_deadline(instance: Instance, policy: Policy) -> float | None:
    """Until when a machine claimed from a buffer may run without its node saying the owner's volume is mounted.

    Hot (claimed running): the attach, the device, the checks, the mount and the daemon's label reload take place
    while it runs, within `hot_attach_s` of the claim. Warm (claimed stopped, then started): its node may still
    show "ready" with the labels of its boot as a buffer machine, the swarm not having missed it between the stop
    and the start; it comes back with the volume mounted within the start timeout its warm-until gives it. Any
    other machine (None) mounted its volume at its first boot: a node without it failed the mount.
    """
    if not instance.claimed_from_buffer:
        return None
    if instance.hot:
        return None if instance.claimed_at is None else instance.claimed_at + policy.hot_attach_s
    return instance.warm_until


def _boot_began(instance: Instance) -> float:
    """When a machine's current boot began, for its start timeout: its launch, or for a recycled machine's scrub boot
    the start that began it (AWS's clock, its started-at tag)."""
    if instance.scrub_owed and instance.started_at is not None:
        return instance.started_at
    return instance.launched_at


def _claimed_from_buffer(instance: Instance | None) -> bool:
    return instance is not None and instance.claimed_from_buffer


def reserved_by_node(tasks: tuple[Task, ...]) -> dict[str, Resources]:
    reserved: dict[str, Resources] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active:
            earlier = reserved.get(task.node_id)
            # Most nodes run one task: its reservations are the sum, with nothing to add.
            reserved[task.node_id] = task.reservations if earlier is None else earlier + task.reservations
    return reserved
