"""Recycling: an idle owner's machine, where their group allows it, serves the next owner once scrubbed.

Each stage is read from the machine's tags and state, so any replica (after a restart) carries on where the last left
off. From its mark on, a machine owes its scrub (Instance.scrub_owed): no claim, no work, no label and no volume goes to
it until its node proves the scrub.
  1. instead_of: an owner's machine this plan would terminate (idle, its warm tier over, or outgrown) is recycled
     instead when its group allows it (its recycle tag), its leak bounds hold (age, owners served, launch settings)
     and a buffer part of its type and zone has room for it: RecycleMachine tags the owed scrub, then stops it, so
     that the OS unmounts the owner's volume cleanly.
  2. steps: stopped, the owner's volumes are detached (the volume is released with its TTL once no machine names it,
     as after a terminate); detached, StripOwner takes the owner's labels and tags off and gives it the buffer's (hot
     where the hot part has room); stripped, it is started for its scrub boot while no owner's work needs a start;
     back, its node's proof of the scrub (engine label) marks it scrubbed, and it is a buffer machine like any other
     (claimed, stopped or let go by buffer.py, surplus.py). Back without the proof by the start timeout: terminated.
The proof must show exactly the token of the machine's pending tag (`<generation>.<mark's epoch s>`): a proof of an
earlier mark left on the disk never passes for this one. A recycled machine, or one whose recycle count cannot be known
(it served an unknown owner: Instance.recycled None), is never offered to an owner whose group does not accept
recycled machines (buffer.claim, hot_returns), and one of unknown count is never recycled again (past_bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from warmswarm_models import Owner, Resources

from warmswarm_autoscaling.actions import (
    Action,
    DetachVolume,
    MarkScrubbed,
    RecycleMachine,
    Start,
    Stop,
    StripOwner,
    Terminate,
)
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.lifecycle import busy_nodes
from warmswarm_autoscaling.plan.result import Buffers
from warmswarm_autoscaling.plan.tiers import StopBudget, resumable
from warmswarm_autoscaling.snapshot import Instance, Task

# Terminations of an owner's machine that recycling may replace: it is healthy and nobody needs it. A machine that
# failed (late, down, unmounted, not started) or was stopped by a person is terminated as before.
RECYCLABLE_CAUSES = frozenset({"idle", "warm_expired", "outgrown"})

Where = tuple[str, str]  # (instance type, availability zone)


def instead_of(cluster: Cluster, buffers: Buffers, steps: Sequence[Action], stops: StopBudget) -> list[Action]:
    """`steps` with each recyclable termination of an owner's machine made a recycle, where its group, its bounds and
    the buffers allow, and, for a running machine (a recycle stops it), where `stops` has room: the termination may be
    one the stopped cap made (tiers.rest), and a recycle that stopped it anyway would break max_stopped_instances
    (the fault campaign's stopped-cap, seed 28). A recyclable machine terminated anyway says why in its reason."""
    room = _room(cluster, buffers)
    decided: list[Action] = []
    for step in steps:
        instance = cluster.instances.get(step.instance_id) if isinstance(step, Terminate) else None
        if not isinstance(step, Terminate) or instance is None or not _candidate(instance, step):
            decided.append(step)
            continue
        where = (instance.instance_type, instance.availability_zone)
        running = instance.state in ("pending", "running")
        refused = past_bounds(cluster, instance) or (
            None if room.get(where, 0) > 0 else f"the buffers keep no more {where[0]} in {where[1]}"
        )
        if refused is None and running and not stops.take():
            refused = f"max_stopped_instances={cluster.policy.max_stopped_instances} machines are stopped already"
        if refused is not None:
            decided.append(replace(step, reason=f"{step.reason}; not recycled: {refused}"))
            continue
        room[where] -= 1
        said = (
            f"{step.reason}; its owner's group recycles machines: {instance.id} ({where[0]} in {where[1]}) is"
            f" {'stopped, ' if running else ''}detached, stripped of {instance.owner}'s labels and tags and"
            " scrubbed on its next boot, then serves the buffer"
        )
        decided.append(_recycle(cluster, instance, stop=running, reason=said))
    return decided


def _recycle(cluster: Cluster, instance: Instance, *, stop: bool, reason: str) -> RecycleMachine:
    """The mark of the machine's next recycle: its owner, the generation after its last and the mark's moment (AWS's
    clock, whole seconds: the scrub token), the owners it served. Only for a machine within its bounds (a known
    count: past_bounds)."""
    assert instance.owner is not None
    assert instance.recycled is not None
    return RecycleMachine(
        instance.id,
        instance.owner,
        generation=instance.recycled + 1,
        marked_at=int(cluster.now),
        earlier_owners=instance.served_owners,
        stop=stop,
        reason=reason,
    )


def _candidate(instance: Instance, step: Terminate) -> bool:
    return (
        step.cause in RECYCLABLE_CAUSES
        and instance.recyclable
        and instance.owner is not None
        and not instance.owner.is_nobody
        and not instance.scrub_owed
    )


def past_bounds(cluster: Cluster, instance: Instance) -> str | None:
    """Why a machine may not serve another owner (the leak bounds), or None: launched with other settings than today's,
    too old, served too many owners (or an unknown number: its count cannot be read), or of a type or zone the buffers
    no longer keep."""
    policy = cluster.policy
    if instance.recycled is None:
        return "its recycle count cannot be read: it has served an unknown owner"
    if instance.launch_settings != policy.launch_settings:
        return "it was launched with other launch settings (AMI, network, boot scripts) than today's"
    age_s = cluster.now - instance.launched_at
    if age_s >= policy.recycle_max_age_s:
        return f"it is {age_s:.0f} s old (recycle_max_age_s={policy.recycle_max_age_s:g})"
    if instance.recycled + 1 >= policy.recycle_max_owners:
        return f"it has served {instance.recycled + 1} owners (recycle_max_owners={policy.recycle_max_owners})"
    if instance.instance_type not in cluster.offerings.by_price or instance.availability_zone not in (
        policy.availability_zones
    ):
        return "its type or zone is not one the autoscaler launches today"
    return None


def _room(cluster: Cluster, buffers: Buffers) -> dict[Where, int]:
    """Per type and zone, the buffer places (hot and warm) that no machine holds nor is on its way to."""
    room: dict[Where, int] = {}
    for part in buffers.parts:
        where = (part.instance_type, part.availability_zone)
        room[where] = room.get(where, 0) + max(0, part.target - part.held)
    return room  # the machines being recycled are held in their part already (Buffers.recycling_into)


def hot_returns(cluster: Cluster, buffers: Buffers) -> frozenset[str]:
    """Warm machines whose owner is back and goes hot instead (part 2 of issue 33): the owner's group recycles (the
    machine's mark), the machine is within its bounds, and a claimable hot machine in its zone (where the owner's
    volume is) takes all the owner's waiting work, and is one the owner's groups accept. Its volume is detached from
    the stopped machine and hot-attached to the running one in seconds, where a resume boots for about a minute; the
    stopped machine is recycled (`steps`). One hot machine per owner."""
    if cluster.clock_skew:
        return frozenset()
    waiting: dict[Owner, list[Task]] = {}
    for task in cluster.snapshot.tasks:
        if task.node_id is None and task.is_active and task.owner is not None and not task.owner.is_nobody:
            waiting.setdefault(task.owner, []).append(task)
    free = [
        i
        for i in cluster.snapshot.instances
        if i.id in buffers.claimable and i.hot and (i.instance_type, i.availability_zone) not in cluster.unavailable
    ]
    going: set[str] = set()
    for instance in sorted(cluster.snapshot.instances, key=lambda i: i.id):
        owner = instance.owner
        work = waiting.get(owner) if owner is not None else None
        if not work or not instance.recyclable or instance.state != "stopped" or instance.scrub_owed:
            continue
        if not resumable(cluster, instance) or past_bounds(cluster, instance) is not None:
            continue
        demand = sum((t.reservations for t in work), Resources())
        accepts = all(t.cache is not None and t.cache.accept_recycled for t in work)
        hot = next(
            (
                m
                for m in free
                if m.availability_zone == instance.availability_zone
                and (accepts or not m.was_recycled)
                and demand.fits_in(cluster.machine_room(m))
            ),
            None,
        )
        if hot is not None:
            free.remove(hot)
            going.add(instance.id)
    return frozenset(going)


def steps(
    cluster: Cluster,
    buffers: Buffers,
    stops: StopBudget,
    *,
    launching: bool,
) -> list[Action]:
    """The next step of each machine being recycled. `launching`: this plan starts or launches machines for owners,
    who come first: no scrub boot starts in it. A marked machine found running is stopped within `stops`, the plan's
    one budget of stopped machines."""
    live_budget = cluster.policy.max_instances - len(cluster.live) - len(cluster.owed_starts)
    found: list[Action] = [
        _recycle(
            cluster,
            instance,
            stop=False,
            reason=(
                f"{instance.owner} is back and a hot machine takes their work with their volume faster than their"
                f" stopped machine {instance.id} resumes: it is detached, stripped and scrubbed, then serves the buffer"
            ),
        )
        for instance in (cluster.instances[i] for i in sorted(cluster.hot_returns))
        if instance.owner is not None
    ]
    # Terminated by this plan as late or unmounted (lifecycle.py): no step of ours races that.
    ending = {i.id for i in cluster.late} | set(cluster.mount_failed)
    for instance in sorted(cluster.snapshot.instances, key=lambda i: i.id):
        if not instance.scrub_owed or instance.state in ("shutting-down", "terminated") or instance.id in ending:
            continue
        if not instance.in_buffer:
            into = buffers.recycling_into.get(instance.id)
            found += _owned(cluster, instance, stops, hot=None if into is None else into.hot)
        elif instance.state == "stopped":
            if instance.id not in cluster.with_node:
                continue  # its node was removed: it could never come back (refill.py terminates it)
            if instance.id in cluster.snapshot.carried.failed_starts:
                # AWS had no capacity for its scrub boot: given up as a warm machine refused a start is, not started
                # again every cycle (the fault campaign's start-retried, seed 24); the buffer refills by a launch.
                found.append(
                    Terminate(
                        instance.id,
                        f"recycled machine {instance.id} could not be started for its scrub (no capacity for it):"
                        " terminated; the buffer refills by a launch",
                        cause="start_failed",
                    )
                )
                continue
            attached = any(a.instance_id == instance.id for v in cluster.snapshot.volumes for a in v.attachments)
            if attached or launching or live_budget <= 0:
                continue  # buffer.half_claims detaches what is attached; owners' starts first; max_instances
            live_budget -= 1
            found.append(
                Start(
                    instance.id,
                    f"recycled machine {instance.id} ({instance.instance_type} in {instance.availability_zone}) is"
                    " started for its scrub: its boot removes the last owner's containers, volumes, writable layers,"
                    " logs and cache path before Docker starts, and its node proves it",
                    started_at=cluster.now,
                )
            )
        elif instance.state == "running":
            found += _proven(cluster, instance)
    return found


def _working(cluster: Cluster, instance: Instance) -> bool:
    """Whether a node of the machine runs its owner's work (lifecycle.busy_nodes: no global task, nobody else's)."""
    nodes = {node.id for node in cluster.ours if node.engine_instance_id == instance.id}
    return bool(nodes) and not nodes.isdisjoint(busy_nodes(cluster, set()))


def _owned(cluster: Cluster, instance: Instance, stops: StopBudget, *, hot: bool | None) -> list[Action]:
    """A recycling machine that still carries its owner's tags: stopped (within `stops`), then its volumes detached,
    then stripped into the part the buffer decision counts it in (`hot`; None: no part has a place left for it, and
    it goes once its warm tier, if one still holds, ends)."""
    name = f"recycling machine {instance.id} of {instance.owner}"
    if instance.state in ("pending", "running"):
        if _working(cluster, instance):
            # Its owner's work is on it again (the mark landed, its stop did not, and a session came back before the
            # node was drained): it is neither stopped nor terminated under that work; once idle, this goes on.
            return []
        if not stops.take():
            # Its mark was written but its stop not sent (or lost): the stopped cap may have filled since, and a
            # stop past it breaks max_stopped_instances (the fault campaign's stopped-cap, seed 364).
            limit = cluster.policy.max_stopped_instances
            return [
                Terminate(
                    instance.id,
                    f"{name} is still running and max_stopped_instances={limit} machines are stopped already:"
                    " terminated instead of recycled",
                    cause="idle",
                )
            ]
        return [Stop(instance.id, None, f"{name} is stopped before its owner's volume is detached")]
    if instance.state != "stopped":
        return []  # stopping
    attachments = [(v, a) for v in cluster.snapshot.volumes for a in v.attachments if a.instance_id == instance.id]
    held = [(v, a) for v, a in attachments if a.state in ("attaching", "attached")]
    if held:
        return [
            DetachVolume(
                volume.id,
                instance.id,
                False,
                f"{name} is stopped: cache volume {volume.id} of {volume.owner} is detached, kept for its TTL from now",
            )
            for volume, _ in held
        ]
    if any(a.state == "detaching" for _, a in attachments):
        return []
    if hot is None:
        if instance.warm_until is not None and instance.warm_until > cluster.now:
            return []  # its warm tier still holds (a return that went hot): it waits for a place until the tier ends
        where = f"{instance.instance_type} in {instance.availability_zone}"
        return [
            Terminate(
                instance.id,
                f"{name} is stopped and detached, but the buffers keep no more {where}: terminated instead of recycled",
                cause="buffer_surplus",
            )
        ]
    return [
        StripOwner(
            instance.id,
            tuple(n.id for n in cluster.ours if n.engine_instance_id == instance.id),
            hot,
            f"{name} is stopped and detached: its node and instance lose the owner's labels and tags, and it joins"
            f" the {'hot' if hot else 'warm'} buffer once its next boot proves the scrub",
        )
    ]


def _proven(cluster: Cluster, instance: Instance) -> list[Action]:
    """A recycled machine running its scrub boot: marked scrubbed once a ready node of it shows exactly the token of its
    pending tag; terminated if none does by the start timeout (the scrub failed, the AMI has no scrub, or the tag is a
    legacy or garbled one no node can prove)."""
    assert instance.scrub is not None
    token = instance.scrub.token
    ready = [n for n in cluster.ours if n.engine_instance_id == instance.id and n.state == "ready"]
    if token is not None and any(n.scrubbed == token for n in ready):
        return [
            MarkScrubbed(
                instance.id,
                token,
                f"recycled machine {instance.id}'s node proved scrub {token}: a buffer machine from now on",
            )
        ]
    generation = token if token is not None else f"{instance.scrub.generation} (a tag no node can prove)"
    started_s = None if instance.started_at is None else cluster.now - instance.started_at
    if ready and (started_s is None or started_s > cluster.policy.max_start_s):
        return [
            Terminate(
                instance.id,
                f"recycled machine {instance.id}'s node is back without the proof of scrub {generation}"
                f" within max_start_s={cluster.policy.max_start_s:g}: it is never offered; terminated",
                cause="scrub_unproven",
            )
        ]
    return []
