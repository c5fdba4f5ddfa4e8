"""Our nodes from join to removal: label a node that joined, drain the idle, terminate, remove what is gone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from warmswarm_models import Owner
from warmswarm_models.tier import WITH_DISKS_STATES

from warmswarm_autoscaling.actions import Action, BindMachine, Drain, LabelNode, RemoveNode, Stop, Terminate
from warmswarm_autoscaling.plan.backoff import backoff_s
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.plan.constraints import owner_fits
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES, StopBudget, rest
from warmswarm_autoscaling.snapshot import Instance, Node, Task


def label_joined(cluster: Cluster, bound: Mapping[str, Owner]) -> list[LabelNode]:
    """A node of ours that joined (drained, unlabelled) gets its owner's labels and is activated in one update.

    Nodes join drained, so nothing lands on them before they carry their owner's labels. A machine
    launched in a batch has no owner of its own: it is labelled for the owner this plan bound it to
    (`bound`, instance id -> owner), or stays drained and unlabelled while nobody's work needs it.
    """
    labels: list[LabelNode] = []
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        if node.state != "ready" or node.is_labelled or instance is None or not instance.is_live:
            continue
        if instance.in_buffer or instance.scrub_owed or instance.id in cluster.mount_failed:
            continue  # nobody's until claimed: stopped once joined (buffer.py); or terminated (terminate_unmounted)
        if instance.id in cluster.mounting:
            continue  # claimed from a buffer: labelled (and given work) once its node says the volume is mounted
        owner = bound.get(instance.id) if instance.unbound else instance.owner
        if owner is None or node.claims_another_owner(owner):
            continue  # unbound and not needed, owner tags we cannot use, or another's labels (reported)
        joined = (
            f"node {node.hostname} joined as {instance.id} ({instance.instance_type},"
            f" {instance.availability_zone}) for {owner}"
        )
        if instance.unbound:
            joined += f", whose pending work took this machine of batch {instance.batch}"
        labels.append(
            LabelNode(
                node.id,
                owner,
                instance.id,
                instance.instance_type,
                instance.availability_zone,
                instance.volume_id,
                joined,
            )
        )
    return labels


def owner_label_conflicts(cluster: Cluster) -> list[str]:
    """Notices for nodes of ours that someone labelled for another owner before we labelled them.

    Relabelling would evict that owner's work and hand the node, and the cache its instance mounts, to
    the owner it was launched for, on a guess. It is left drained and unlabelled for a person to decide.
    """
    notices: list[str] = []
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        if node.is_labelled or instance is None or not instance.is_live or instance.owner is None:
            continue
        if instance.unbound or instance.in_buffer or not node.claims_another_owner(instance.owner):
            continue
        labelled_for = node.owner if node.owner is not None else "ids that cannot be read"
        notices.append(
            f"node {node.hostname} carries owner labels for {labelled_for}, but its instance {instance.id} was"
            f" launched for {instance.owner}: not labelled, no work placed there; correct or remove the labels"
            " (docker node update --label-rm), or remove the node"
        )
    return notices


# CreateTags calls per cycle for bound machines: AWS refills the account's mutating calls at 5 a second,
# and a class of 500 bound at once must not spend them all (nor be throttled) for what is only bookkeeping.
TAGS_PER_CYCLE = 5


def tag_bound(cluster: Cluster) -> list[BindMachine]:
    """A machine launched in a batch whose node was labelled for an owner gets that owner's tags, a few a cycle.

    The node's labels already decide where work goes; the tags are for people: the bill by owner, the
    console, and a view of the machine that does not need the swarm.
    """
    bindings: list[BindMachine] = []
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        if instance is None or not instance.is_live or not instance.unbound or not node.is_labelled:
            continue
        if node.owner is None or node.owner.is_nobody or node.labelled_instance_id != instance.id:
            continue
        if any(binding.instance_id == instance.id for binding in bindings):
            continue  # a machine shown by two nodes (a stale registration lingers): tagged once
        bindings.append(
            BindMachine(
                instance.id,
                node.owner,
                f"its node {node.hostname} was labelled for {node.owner}: the instance carries its owner too",
            )
        )
        if len(bindings) == TAGS_PER_CYCLE:
            break
    return bindings


def drain_without_cache(cluster: Cluster) -> list[Drain]:
    """Our active nodes running their owner's cache-on task without carrying a volume: drained, so it moves.

    It happens when ops turn the cache on for a group while an owner's machine (launched without a
    volume) still runs: the owner's new service matches that machine's labels, and swarm places it
    there, where its cache path is no volume (the mount fails, or the data would be lost with the
    machine). Drained, the task waits for a machine that carries the owner's volume, which plan()
    launches; the old machine, idle, goes after its grace. Only the node owner's own work drains it: foreign
    work asking for a cache (no owner constraints) would otherwise drain every node swarm moves it to, evicting
    one owner's sessions after another (it is reported instead: foreign_tasks). A node whose boot did not mount
    the volume it was launched for is terminated instead (terminate_unmounted).
    """
    owners = {node.id: node.owner for node in cluster.ours}
    needy: dict[str, Task] = {}
    for task in cluster.snapshot.tasks:
        if task.node_id is None or not task.is_active or task.global_service or not task.wants_cache:
            continue
        if task.node_id in owners and not _foreign(task, owners[task.node_id]):
            needy.setdefault(task.node_id, task)
    drains: list[Drain] = []
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        placed = needy.get(node.id)
        if placed is None or instance is None or instance.volume_id is not None or not node.is_labelled:
            continue
        if node.state == "ready" and node.availability == "active":
            drains.append(
                Drain(
                    node.id,
                    f"node {node.hostname} has no cache volume, and service {placed.service_name} on it asks for"
                    " the cache: drained so it moves to a machine with its owner's volume",
                )
            )
    return drains


def busy_nodes(cluster: Cluster, matched: set[str]) -> set[str]:
    """A node is busy while it has work: a task in any non-terminal state (a restarting one included),
    or a task this plan just matched to it. A global service's task is not work: it is there because
    the node is, and would otherwise keep every node of the cluster forever. Nor is a foreign task on a
    node of ours (foreign_tasks): the machine is its owner's, and someone else's work must not keep it."""
    owners = {node.id: node.owner for node in cluster.ours}
    busy = set(matched)
    for task in cluster.snapshot.tasks:
        if task.node_id is None or not task.is_active or task.global_service:
            continue
        if task.node_id in owners and _foreign(task, owners[task.node_id]):
            continue
        busy.add(task.node_id)
    return busy


def foreign_tasks(cluster: Cluster) -> list[str]:
    """Notices for work that swarm placed on a node of ours without being its owner's: it keeps nothing alive.

    Swarm places a service without placement constraints on any active node, an owner's included.
    """
    nodes = {node.id: node for node in cluster.ours if node.is_labelled}
    notices: list[str] = []
    for task in cluster.snapshot.tasks:
        node = nodes.get(task.node_id or "")
        if node is None or not task.is_active or task.global_service or not _foreign(task, node.owner):
            continue
        notices.append(
            f"task {task.id} of service {task.service_name or task.service_id} runs on node {node.hostname}, which"
            f" is {node.owner}'s, without being that owner's work: it does not keep the node (it moves when the"
            " node goes); pin the service to its own nodes with placement constraints"
        )
    return notices


def _foreign(task: Task, node_owner: Owner | None) -> bool:
    """Work that is not the node owner's: unowned (or unreadably owned) work on an owned node, or another owner's."""
    if task.owner is node_owner or node_owner is None or node_owner.is_nobody:
        return False  # the owner's own (owners are interned: the usual case is one comparison), or nobody's node
    return task.owner is None or task.owner.is_nobody or not owner_fits(task.owner, node_owner)


@dataclass(slots=True)
class Clocks:
    """How long each node has been idle, and, apart, how long each has been down while its instance runs.

    Two clocks: a node that runs work and drops out for a moment must not inherit an idle clock, nor an
    idle node a down one. Both are carried to the next cycle and start afresh with each term of leadership.
    """

    idle_since: dict[str, float] = field(default_factory=dict)
    down_since: dict[str, float] = field(default_factory=dict)
    stopped_since: dict[str, float] = field(default_factory=dict)  # by instance id


def node_steps(
    cluster: Cluster, busy: set[str], clocks: Clocks, bound: Mapping[str, Owner], stop_budget: StopBudget
) -> list[Action]:
    """At most one step for each of our nodes; `clocks` receives the clocks to carry to the next cycle.

    `bound`: machines launched in a batch that this plan gives to an owner (they are labelled, not idle).
    `stop_budget`: the plan's one budget of stopped machines (the buffer's stops took theirs first).
    """
    steps: list[Action] = []
    # A machine may show as several nodes (a stale registration lingers): it is stopped or terminated once.
    machines_done: set[str] = set()
    for node in cluster.ours:
        instance = cluster.instance_of(node)
        if instance is not None and instance.id in cluster.mount_failed:
            continue  # terminated this plan (terminate_unmounted): not idle, whoever waits for it
        if instance is not None and instance.scrub_owed and instance.state in WITH_DISKS_STATES:
            continue  # being recycled: recycle.py takes it step by step
        if instance is not None and instance.unbound and not node.is_labelled and node.state == "ready":
            step = _unneeded_step(cluster, node, instance, bound, clocks)
        else:
            step = _node_step(cluster, node, busy, clocks, stop_budget)
        if isinstance(step, Terminate | Stop):
            if step.instance_id in machines_done:
                continue
            machines_done.add(step.instance_id)
        if step is not None:
            steps.append(step)
    return steps


def _node_step(cluster: Cluster, node: Node, busy: set[str], clocks: Clocks, stop_budget: StopBudget) -> Action | None:
    """Remove the node, drain it, stop or terminate its instance; or nothing yet."""
    policy = cluster.policy
    instance = cluster.instance_of(node)
    instance_gone = instance is None or not instance.is_live
    if node.state != "ready":
        if instance is not None and instance.state in STOPPED_STATES:
            # Stopped (warm, or by a person): the node is kept with its labels for the same machine to come
            # back to; its down clock starts when the machine runs again. tiers.stopped_steps decides its end.
            return None
        if instance_gone:
            return RemoveNode(node.id, f"node {node.hostname} is {node.state} and its instance is gone")
        if node.engine_instance_id in cluster.joined_ready:
            # The machine rejoined as a new node: this one is a stale registration of it.
            return RemoveNode(node.id, f"node {node.hostname} is {node.state}; its machine rejoined as another node")
        if not node.is_labelled and (instance is None or not instance.claimed_from_buffer):
            return None  # still joining: the start timeout covers it
        # A machine that lost the swarm runs nothing and still costs money: after it has had as long
        # to come back as a machine has to boot, it goes (its tasks are rescheduled, its volume freed).
        down_s = _running_since(node.id, cluster.snapshot.carried.down_since, clocks.down_since, cluster.now)
        if down_s < policy.max_start_s:
            return None
        assert instance is not None
        return Terminate(
            instance.id,
            f"node {node.hostname} has been {node.state} for {down_s:.0f} s while its instance runs"
            f" (max_start_s={policy.max_start_s:g})",
            cause="node_down",
        )
    if not node.is_labelled or instance_gone or node.id in busy:
        return None
    idle_s = _running_since(node.id, cluster.snapshot.carried.idle_since, clocks.idle_since, cluster.now)
    if idle_s < policy.idle_grace_s:
        return None
    assert instance is not None
    if node.availability == "active":
        reason = f"node {node.hostname} idle for {idle_s:.0f} s (idle_grace_s={policy.idle_grace_s:g})"
        return Drain(node.id, reason, if_still_idle=True)
    return rest(cluster, node, instance, idle_s, stop_budget)


def _unneeded_step(
    cluster: Cluster, node: Node, instance: Instance, bound: Mapping[str, Owner], clocks: Clocks
) -> Action | None:
    """A machine of a batch that joined and that no owner's work took: terminated after the idle grace.

    It joined drained and unlabelled, so nothing ran on it and nobody's data was there.
    """
    if instance.id in bound or not instance.is_live:
        return None
    idle_s = _running_since(node.id, cluster.snapshot.carried.idle_since, clocks.idle_since, cluster.now)
    if idle_s < cluster.policy.idle_grace_s:
        return None
    return Terminate(
        instance.id,
        f"node {node.hostname} of batch {instance.batch} joined {idle_s:.0f} s ago and no owner's work needs it"
        f" (idle_grace_s={cluster.policy.idle_grace_s:g}); it never ran anything",
        cause="idle",
    )


def _running_since(node_id: str, previous: Mapping[str, float], carried: dict[str, float], now: float) -> float:
    """How long a clock has run for the node (started now if it was not running), carried to the next cycle."""
    since = previous.get(node_id, now)
    carried[node_id] = since
    return now - since


def terminate_unmounted(cluster: Cluster) -> list[Terminate]:
    """A machine whose node joined without the cache volume it was launched for mounted is terminated at once.

    Its boot waited `device_wait_s` for the device (or a reboot could not mount it): kept, it would run its
    owner's work without the data, or sit drained and count as idle, be replaced with the same volume on the same
    offering, and fail again, forever. The volume is kept (it detaches with the machine); no machine is launched with
    it for a back-off that grows with each such failure (plan/backoff.py), and the owner's tasks say so.
    """
    return [
        Terminate(
            machine.id,
            f"instance {machine.id} ({machine.instance_type} in {machine.availability_zone}) of {machine.owner} joined"
            f" without its cache volume {machine.volume_id} mounted (the device did not appear within its boot's"
            f" wait, or could not be mounted): terminated, the volume is kept, and its next machine waits"
            f" {backoff_s(cluster.policy, len(cluster.volume_backoffs[machine.volume_id or ''].failed)):g} s and avoids"
            " this offering",
            cause="volume_missing",
        )
        for machine in cluster.mount_failed.values()
    ]


def terminate_late(cluster: Cluster) -> list[Terminate]:
    """Machines that did not join within max_start_s. An owner's: its offering is avoided for everyone (no
    capacity behind it, or a boot that fails there). A buffer machine's: only the buffer's part waits (its images
    may not pull; owners' launches, which pull nothing, are not held back)."""
    policy = cluster.policy
    avoided = f"that offering is avoided for {policy.capacity_backoff_s:g} s"
    refilled = "the buffers launch nothing for a back-off that doubles with each such failure"
    return [
        Terminate(
            late.id,
            f"instance {late.id} ({late.instance_type} in {late.availability_zone}) did not join the swarm within"
            f" max_start_s={policy.max_start_s:g}; {refilled if late.in_buffer else avoided}",
            cause="start_timeout",
        )
        for late in cluster.late
    ]


def impostor_notice(node: Node, cluster: Cluster) -> str:
    instance = cluster.instances[node.engine_instance_id or ""]
    return (
        f"node {node.hostname} ({node.id}) says it is instance {instance.id}, but the manager sees it at"
        f" {node.addr or 'no address'}, not at that instance's private address {instance.private_ip or '(none)'}:"
        " it is never labelled nor given work; remove it (docker node rm) if it is not one of yours"
    )
