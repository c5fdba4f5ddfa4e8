"""Failures that repeat the same way back off, growing, over every type and zone: a volume whose device never appears,
and buffer machines that never join.

Each such failure costs a machine (launched, booted, given up). A fixed back-off per offering pays that again every
`capacity_backoff_s`, all day, and moving to the next type or zone pays it once more per offering. What fails here is
the owner's volume or the buffer's boot, not one offering: so the back-off holds for every type and zone, and it
doubles with each failure in a row (capacity_backoff_s, then 2x, 4x, ... at most MAX_BACKOFF_FACTOR x). It is
forgotten once the thing works again: the volume mounted on a node, a buffer machine launched after the last failure
joined.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Node, Repeated

# The back-off stops growing at 16 x capacity_backoff_s (2 h 40 min at the default 600 s): a fault that lasts a day
# then costs about nine machines, not 144, and the first try after it ends comes within that bound.
MAX_BACKOFF_FACTOR = 16


def backoff_s(policy: Policy, failures: int) -> float:
    """How long nothing is tried after the `failures`-th failure in a row: capacity_backoff_s, doubled each time."""
    return policy.capacity_backoff_s * float(min(2 ** max(failures - 1, 0), MAX_BACKOFF_FACTOR))


def grown(before: Repeated | None, failed: Instance, now: float, policy: Policy) -> Repeated:
    """`before` with the failure of `failed` counted, at `now`; counted once however many cycles see it."""
    if before is not None and failed.id in before.failed:
        return before
    ids = (before.failed if before is not None else frozenset()) | {failed.id}
    offerings = (before.offerings if before is not None else frozenset()) | {
        (failed.instance_type, failed.availability_zone)
    }
    return Repeated(failed=ids, offerings=offerings, since=now, until=now + backoff_s(policy, len(ids)))


def volume_backoffs(
    carried: Mapping[str, Repeated],
    mount_failed: Iterable[Instance],
    ready_nodes: Iterable[Node],
    volume_ids: frozenset[str],
    now: float,
    policy: Policy,
) -> dict[str, Repeated]:
    """Each volume whose device did not appear on its machines: the machines it cost, and until when no machine is
    launched with it. Forgotten once a ready node has it mounted, or once the volume is gone."""
    mounted = {n.mounted_volume_id for n in ready_nodes if n.mounted_volume_id}
    kept = {v: r for v, r in carried.items() if v in volume_ids and v not in mounted}
    for instance in mount_failed:
        if instance.volume_id is not None:
            kept[instance.volume_id] = grown(kept.get(instance.volume_id), instance, now, policy)
    return kept


def buffer_backoff(
    carried: Repeated | None,
    late_buffer: Iterable[Instance],
    joined_buffer: Iterable[Instance],
    now: float,
    policy: Policy,
) -> Repeated | None:
    """Until when the buffers launch nothing, of any type in any zone: their machines did not join (their images do not
    pull, their boot fails). Forgotten once a buffer machine launched after the last failure joins."""
    backoff = carried
    if backoff is not None and any(i.launched_at >= backoff.since for i in joined_buffer):
        backoff = None
    for instance in late_buffer:
        backoff = grown(backoff, instance, now, policy)
    return backoff
