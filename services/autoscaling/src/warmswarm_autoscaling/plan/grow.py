"""Cache volumes that grow online with their data: which one EBS is asked to grow, to what size, or why not."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from warmswarm_models import VOLUME_GROWN_AT_TAG, format_timestamp

from warmswarm_autoscaling.actions import GrowVolume
from warmswarm_autoscaling.plan.cluster import Cluster
from warmswarm_autoscaling.snapshot import CacheFill, Node, Volume

# AWS allows one modification of a volume in six hours (EBS User Guide, "Modify a volume"): the planner never asks
# what AWS would refuse, so a volume tagged grown-at within them is not asked again.
GROW_COOLDOWN_S: Final = 6 * 3600.0
_MIB_PER_GIB: Final = 1024


@dataclass(frozen=True, slots=True)
class Growth:
    """What the growth decision says: the volumes to grow, and what ops should know of those it cannot."""

    actions: tuple[GrowVolume, ...] = ()
    notices: tuple[str, ...] = ()


def grow_volumes(cluster: Cluster) -> Growth:
    """Each cache volume attached to a running machine whose ready node reports that very volume at least
    cache_grow_at_percent full, while a task of its owner runs there with a cache policy that lets it grow beyond its
    size, and that was not grown within AWS's six hours (its grown-at tag): grown to its size times
    cache_grow_factor, at least 1 GiB more, at most the owner's grow_limit_gib (without cache_max_size_gib above
    cache_size_gib: no growth). Never smaller: EBS only grows, and what it refuses is never asked. A fill label or a
    grown-at tag that cannot be read grows nothing, nor does a volume whose file system did not take up its last
    growth (the size its node reports); each says so."""
    ready = {n.engine_instance_id: n for n in cluster.ours if n.state == "ready" and n.engine_instance_id}
    actions: list[GrowVolume] = []
    notices = [
        f"node {n.id}: {n.cache_fill_problem}; no cache volume is grown by what it reports"
        for n in ready.values()
        if n.cache_fill_problem
    ]
    for volume in cluster.snapshot.volumes:
        decided = _decide(volume, cluster, ready)
        if isinstance(decided, GrowVolume):
            actions.append(decided)
        elif decided:
            notices.append(decided)
    return Growth(tuple(actions), tuple(notices))


def _decide(volume: Volume, cluster: Cluster, ready: Mapping[str, Node]) -> GrowVolume | str:
    """The growth of `volume`, or why not where ops should know ("" where there is nothing to say: not full, nobody
    at work, within the six hours)."""
    attachment = next((a for a in volume.attachments if a.state == "attached"), None)
    if volume.state != "in-use" or attachment is None:
        return ""
    instance = cluster.instances.get(attachment.instance_id)
    node = ready.get(attachment.instance_id)
    if instance is None or instance.state != "running" or node is None:
        return ""
    # Only the owner's own machine, with the volume mounted in this boot, reporting for this very volume: a label left
    # from another volume, or a machine that is not the owner's, grows nothing.
    if volume.owner is None or volume.owner != instance.owner or node.mounted_volume_id != volume.id:
        return ""
    fill = node.cache_fill
    policy = cluster.policy
    if fill is None or fill.volume_id != volume.id or fill.used_percent < policy.cache_grow_at_percent:
        return ""
    working = [
        t.cache
        for t in cluster.snapshot.tasks
        if t.node_id == node.id and t.state == "running" and t.is_active and t.owner == volume.owner
        if t.cache is not None and t.cache.enabled
    ]
    if not working:
        return ""  # nobody writes to it now: it waits for its owner's next session
    limit_gib = max(c.grow_limit_gib for c in working)
    at = policy.cache_grow_at_percent
    full = f"{node.id} reports {volume.id} {fill.used_percent}% full (cache_grow_at_percent={at})"
    if limit_gib <= volume.size_gib:
        if any(c.max_size_gib is not None for c in working):
            return f"{full} at {volume.size_gib} GiB, the largest its owner's groups allow (cache_max_size_gib)"
        return ""  # its owner's groups do not grow volumes: nothing to say each cycle
    if VOLUME_GROWN_AT_TAG in volume.unreadable_tags:
        written = volume.tags.get(VOLUME_GROWN_AT_TAG, "")
        return (
            f"{full}, but it is not grown: its tag {VOLUME_GROWN_AT_TAG}={written[:64]!r} cannot be read, and AWS"
            " refuses a growth within six hours of the last (fix or remove the tag to let it grow)"
        )
    now = cluster.now
    if volume.grown_at is not None and now - volume.grown_at < GROW_COOLDOWN_S:
        if volume.grown_at > cluster.clock.later + policy.max_clock_skew_s:
            return (
                f"{full}, but it is not grown: its tag {VOLUME_GROWN_AT_TAG} says"
                f" {format_timestamp(volume.grown_at)}, ahead of AWS's clock (fix or remove the tag to let it grow)"
            )
        return ""  # AWS would refuse: within six hours of the last growth
    untaken = _untaken(volume, fill)
    if untaken:
        return f"{full}, but it is not grown again: {untaken}"
    to_gib = _grown_size(volume.size_gib, policy.cache_grow_factor, limit_gib)
    return GrowVolume(
        volume.id,
        volume.size_gib,
        to_gib,
        f"{full} while its owner {volume.owner} works: grown from {volume.size_gib} to {to_gib} GiB (its owner's"
        f" groups allow {limit_gib} GiB)",
    )


def _untaken(volume: Volume, fill: CacheFill) -> str:
    """Why the volume's file system did not, or may not, have taken up its last growth ("" where it did): a file system
    a GiB or more smaller than the volume (every growth adds at least one) keeps reporting full whatever EBS adds, and
    each growth would be billed for nothing. A node that does not report the size (a node script of an earlier
    release) cannot tell after a growth: the volume waits for one that does."""
    if fill.filesystem_mib is None:
        if volume.grown_at is None:
            return ""  # never grown: nothing to take up
        return (
            "its node does not report its file system's size (a node script of an earlier release), so whether the"
            " file system took up the last growth cannot be told"
        )
    if fill.filesystem_mib + _MIB_PER_GIB > volume.size_gib * _MIB_PER_GIB:
        return ""
    return (
        f"its file system is {fill.filesystem_mib} MiB of the volume's {volume.size_gib} GiB: it did not take up the"
        " last growth (xfs_growfs on the node; `journalctl -u warmswarm-cache-fill` there says why)"
    )


def _grown_size(size_gib: int, factor: float, limit_gib: int) -> int:
    """min(limit, max(size + 1, ceil(size × factor))): always larger (the caller knows limit > size), never beyond
    the limit; a factor that is no number grows it to the limit rather than raise."""
    scaled = size_gib * factor
    target = math.ceil(scaled) if math.isfinite(scaled) else limit_gib
    return min(limit_gib, max(size_gib + 1, target))
