"""The warm tier: an idle owner's machine stopped instead of terminated, resumed for its owner, expired to cold.

Tiers of an owner's machine: hot (running; the idle grace), warm (stopped by us: root disk, pulled images,
node labels and cache volume all kept, for the owner's `warm_ttl_s`), cold (terminated: the volume waits
with its cache TTL), gone. A warm machine serves its owner only: it is resumed (StartInstances) for that
owner's pending work and never given to another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from warmswarm_models import Owner, Resources, format_timestamp
from warmswarm_models.cache import MAX_WARM_TTL_S
from warmswarm_models.tier import STOPPED_STATES, Tier, machine_tier

from warmswarm_autoscaling.actions import Start, Stop, Terminate
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.snapshot import Instance, Node

__all__ = [
    "STOPPED_STATES",
    "StopBudget",
    "joined_before_it_stopped",
    "rest",
    "resumable",
    "resumptions",
    "stopped_steps",
    "tier_of",
    "trusted_until",
]


def tier_of(instance: Instance) -> tuple[Tier, float | None]:
    """The machine's tier and until when it holds (warmswarm_models.tier)."""
    return machine_tier(instance.state, instance.warm_until, in_buffer=instance.in_buffer)


@dataclass(slots=True)
class StopBudget:
    """How many more machines this plan may stop: max_stopped_instances less those stopped or stopping, and less the
    buffer machines still booting (each is stopped once it joins). One budget for the warm tier and the buffer."""

    left: int

    @classmethod
    def of(cls, cluster: Cluster) -> StopBudget:
        stopped = sum(1 for i in cluster.snapshot.instances if i.state in STOPPED_STATES)
        booting_buffer = sum(1 for i in cluster.booting if i.in_buffer)
        return cls(max(0, cluster.policy.max_stopped_instances - stopped - booting_buffer))

    def take(self) -> bool:
        if self.left == 0:
            return False
        self.left -= 1
        return True


def rest(
    cluster: Cluster, node: Node, instance: Instance, idle_s: float, budget: StopBudget
) -> Stop | Terminate | None:
    """What becomes of a drained node that stayed idle through its grace: stopped (warm) or terminated (cold); or,
    while this replica's clock disagrees with AWS's, nothing yet for a warm one (its warm-until is a deadline)."""
    idle = f"node {node.hostname} is drained and idle for {idle_s:.0f} s"
    volume = f"; its cache volume {instance.volume_id} keeps its cache TTL" if instance.volume_id else ""
    if instance.warm_ttl_s <= 0 or instance.state != "running":
        return Terminate(instance.id, idle, cause="idle")
    if cluster.clock_skew:
        return None  # a warm-until written by this clock would be wrong: kept drained until the clocks agree
    if not budget.take():
        limit = cluster.policy.max_stopped_instances
        return Terminate(
            instance.id,
            f"{idle}; its owner's warm tier is {instance.warm_ttl_s} s, but max_stopped_instances={limit} machines"
            f" are stopped already: terminated instead{volume}",
            cause="idle",
        )
    warm_until = cluster.clock.later + instance.warm_ttl_s
    return Stop(
        instance.id,
        warm_until,
        f"{idle}: stopped and kept warm for {instance.owner} until {format_timestamp(warm_until)}"
        f" (warm_ttl_s={instance.warm_ttl_s}); disks, images, labels and cache stay",
    )


def resumable(cluster: Cluster, instance: Instance) -> bool:
    """A warm machine its owner's work may take: stopped by us, within a warm tier we can trust, with a node that
    stands for it, and not failed to start."""
    return (
        instance.state in STOPPED_STATES
        and not instance.scrub_owed
        and instance.id not in cluster.hot_returns
        and instance.warm_until is not None
        and cluster.now < instance.warm_until <= trusted_until(cluster)
        and instance.id in cluster.with_node
        and instance.id not in cluster.snapshot.carried.failed_starts
    )


def trusted_until(cluster: Cluster) -> float:
    """The furthest warm-until a stopped machine may carry: no warm tier is longer than MAX_WARM_TTL_S (plus the
    clock skew allowed between the replica that wrote it and this one). One further ahead is a hand edit or a bad
    clock, and trusted it would keep the machine and its owner's volume for good, the volume's TTL never started."""
    return cluster.clock.later + MAX_WARM_TTL_S + cluster.policy.max_clock_skew_s


def joined_before_it_stopped(instance: Instance) -> bool:
    """A machine that had a node of its own when it was stopped: one we stopped warm, or the buffer's."""
    return instance.warm_until is not None or instance.buffer


def resumptions(cluster: Cluster, resumed: list[Instance]) -> list[Start]:
    """StartInstances for the warm machines this plan's matching gave pending work to, within max_instances.

    A stopping machine is started once stopped (EC2 refuses before). A resumed machine is live again and
    counts against max_instances like a launch; past it, the owner's work waits on its machine.
    """
    budget = cluster.policy.max_instances - len(cluster.live)
    starts: list[Start] = []
    for instance in resumed:
        if instance.state != "stopped" or len(starts) >= budget:
            continue
        if not _volume_attached_or_none(cluster, instance):
            continue  # a claim's volume made with it: attached while stopped first (AWS refuses a pending machine)
        starts.append(
            Start(
                instance.id,
                f"resuming the machine of {instance.owner}: {instance.id} ({instance.instance_type} in"
                f" {instance.availability_zone}) was kept warm; the same node comes back with its labels and cache",
                started_at=cluster.now,
            )
        )
    return starts


def _volume_attached_or_none(cluster: Cluster, instance: Instance) -> bool:
    """Whether a claimed warm-buffer machine may start: not while the volume made in the claim's plan is still
    "creating" (nothing can attach it yet; started now, the machine would be pending when the attach comes, which AWS
    refuses, and its boot would wait for the device). Bounded by the volume's creation: one that fails is "error",
    and the machine starts and its boot says there is no cache. Other warm machines start as before."""
    if not instance.buffer or instance.claimed_at is None or instance.volume_id is None:
        return True
    volume = next((v for v in cluster.snapshot.volumes if v.id == instance.volume_id), None)
    return volume is None or volume.state != "creating" or any(a.instance_id == instance.id for a in volume.attachments)


def outgrown(cluster: Cluster, launching: Mapping[Owner, Sequence[Resources]], resumed: Set[str]) -> set[str]:
    """Warm machines that no resume took and that some of their owner's work this plan launches for cannot fit.

    `launching`: what each task this plan launches for reserves, by owner. The fit is checked, not inferred
    from "not resumed": a machine passed over for any other reason (a node the swarm has not missed yet, a
    budget) is its owner's still, and terminated it would cost them their warm machine for nothing.
    """
    return {
        i.id
        for i in cluster.snapshot.instances
        if i.state == "stopped"
        and i.warm_until is not None
        and not i.in_buffer
        and not i.scrub_owed
        and i.id not in cluster.hot_returns
        and i.owner is not None
        and i.id not in resumed
        and any(not demand.fits_in(cluster.machine_room(i)) for demand in launching.get(i.owner, ()))
    }


def stopped_steps(
    cluster: Cluster, stopped_since: Mapping[str, float], carried: dict[str, float], outgrown: Set[str]
) -> list[Terminate]:
    """Stopped machines that no tier keeps any longer are terminated, so that their volumes are released.

    A warm machine goes when its warm-until passes, or at once when its start failed (no capacity for a
    start: its owner's work launches anew in the volume's zone) or when it is `outgrown` (its owner's new work
    needs a machine it cannot be: kept, it would hold the owner's volume from the launch until its warm-until).
    A machine stopped by someone else (no warm-until of ours) is given `max_start_s` for a start by a person (a
    resize), on a clock of its own.
    Terminating loses the root disk only: the cache volume is not deleted with the instance, and is
    released with its TTL for the owner's next machine.
    """
    terminations: list[Terminate] = []
    now = cluster.now
    for instance in cluster.snapshot.instances:
        if instance.state not in STOPPED_STATES or instance.in_buffer or instance.scrub_owed:
            continue  # running, kept in the buffer for an owner's first session (buffer.py), or recycling (recycle.py)
        volume = f"; its cache volume {instance.volume_id} is kept for its owner" if instance.volume_id else ""
        if instance.state == "stopped" and joined_before_it_stopped(instance) and instance.id not in cluster.with_node:
            terminations.append(
                Terminate(
                    instance.id,
                    f"instance {instance.id} of {instance.owner} is stopped and no swarm node stands for it any more"
                    f" (its node was removed): it could not come back as its owner's node; terminated{volume}",
                    cause="node_down",
                )
            )
            continue
        if instance.state == "stopped" and instance.id in cluster.snapshot.carried.failed_starts:
            terminations.append(
                Terminate(
                    instance.id,
                    f"instance {instance.id} of {instance.owner} could not be started (no capacity for it):"
                    f" terminated so that its owner's work launches anew{volume}",
                    cause="start_failed",
                )
            )
            continue
        if instance.warm_until is not None and instance.warm_until > trusted_until(cluster):
            terminations.append(
                Terminate(
                    instance.id,
                    f"instance {instance.id} of {instance.owner} is kept warm until"
                    f" {format_timestamp(instance.warm_until)}, further ahead than any warm tier allows"
                    f" ({MAX_WARM_TTL_S} s; a hand edit or a bad clock): not trusted, its warm tier is over{volume}",
                    cause="warm_expired",
                )
            )
            continue
        if instance.warm_until is not None:
            if now >= instance.warm_until:
                terminations.append(
                    Terminate(
                        instance.id,
                        f"instance {instance.id} of {instance.owner} was kept warm until"
                        f" {format_timestamp(instance.warm_until)}: its warm tier is over{volume}",
                        cause="warm_expired",
                    )
                )
            elif instance.id in outgrown:
                terminations.append(
                    Terminate(
                        instance.id,
                        f"instance {instance.id} ({instance.instance_type}) of {instance.owner} is kept warm, but"
                        f" its owner's new work does not fit it: terminated so that a machine that fits gets the"
                        f" owner's data{volume}",
                        cause="outgrown",
                    )
                )
            continue
        since = stopped_since.get(instance.id, now)
        carried[instance.id] = since
        stopped_s = now - since
        if stopped_s < cluster.policy.max_start_s:
            continue
        terminations.append(
            Terminate(
                instance.id,
                f"instance {instance.id} of {instance.owner} has been {instance.state} for {stopped_s:.0f} s"
                f" (max_start_s={cluster.policy.max_start_s:g}) and no policy keeps a stopped machine{volume}",
                cause="stopped",
            )
        )
    return terminations
