"""EBS cache volumes: which one a launch uses, attaching, releasing, the janitor, and an operator's early expiry."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from warmswarm_models import (
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_PINNED_TAG,
    VOLUME_RELEASED_AT_TAG,
    CachePolicy,
    Owner,
    format_timestamp,
)
from warmswarm_models.cache import DEFAULT_CACHE_TTL_S, MAX_CACHE_TTL_S
from warmswarm_models.tier import WITH_DISKS_STATES

from warmswarm_autoscaling.actions import (
    Action,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    ExpireVolume,
    ReleaseVolume,
    RenewVolume,
    SetVolumeTtl,
)
from warmswarm_autoscaling.plan.clock import DeadlineClock
from warmswarm_autoscaling.plan.tokens import volume_token
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Volume

# Where the cache volume is attached; the boot script finds it by volume id, not by this name.
CACHE_DEVICE = "/dev/sdf"
_USABLE = ("available", "creating")


@dataclass(frozen=True, slots=True)
class VolumeChoice:
    """For an owner whose work needs its cache: launch with this volume in its zone, or wait, or create."""

    volume: Volume | None = None  # launch in volume.availability_zone with it
    wait_reason: str = ""  # nothing can be launched yet, and why
    create: bool = False  # the owner has no volume: create one where the launch would go


def new_volume(policy: Policy, owner: Owner, cache: CachePolicy, zone: str, spent_tokens: Set[str]) -> CreateVolume:
    """The owner's first cache volume, in the zone of the machine it goes to (launched or claimed in this plan)."""
    return CreateVolume(
        owner=owner,
        availability_zone=zone,
        size_gib=cache.size_gib,
        volume_type=cache.volume_type,
        ttl_s=cache.ttl_s,
        client_token=volume_token(policy.cluster, owner, spent_tokens),
        reason=f"{owner} needs a cache and has no volume: {cache.size_gib} GiB {cache.volume_type} in {zone}",
    )


def volume_choices(
    volumes: Iterable[Volume],
    owners: Set[Owner],
    on_the_way: Mapping[str, Instance],
    unmounted: Mapping[str, Instance],
) -> dict[Owner, VolumeChoice]:
    """For each of `owners` that has volumes, which one a new machine carries or why none can yet.

    `unmounted`: machines whose boot did not mount the volume they were launched for (terminated this plan)."""
    reserved = {i.volume_id for i in on_the_way.values() if i.volume_id is not None}
    owned: dict[Owner, list[Volume]] = {}
    for volume in volumes:
        owner = volume.owner
        if owner is not None and owner in owners:
            owned.setdefault(owner, []).append(volume)
    return {owner: choose_volume(owner, found, on_the_way, reserved, unmounted) for owner, found in owned.items()}


def choose_volume(
    owner: Owner,
    volumes: list[Volume],
    on_the_way: Mapping[str, Instance],
    reserved: Set[str | None],
    unmounted: Mapping[str, Instance],
) -> VolumeChoice:
    """The owner's volume a new machine should carry, or why none can yet.

    A volume reserved by a machine on its way (its launch names it) is that machine's: the owner's tasks
    wait for it rather than getting a second volume.
    """
    usable = [v for v in volumes if v.state in _USABLE and v.id not in reserved]
    if usable:
        # Prefer a volume that is ready to attach, then the newest (the most recent data).
        usable.sort(key=lambda v: (v.state != "available", -v.created_at, v.id))
        return VolumeChoice(volume=usable[0])
    for volume in volumes:
        holder = next((a.instance_id for a in volume.attachments), None)
        if volume.id in reserved:
            return VolumeChoice(wait_reason=f"cache volume {volume.id} is reserved for a machine on its way")
        failed = unmounted.get(holder or "")
        if failed is not None:
            return VolumeChoice(
                wait_reason=f"cache volume {volume.id} of {owner} did not appear on machine {failed.id}"
                f" ({failed.instance_type} in {failed.availability_zone}) within its boot's wait: that machine is"
                " terminated, and the volume goes to a new one, of another type where one fits, once it is detached"
            )
        if volume.state == "in-use" and holder is not None:
            detail = "detaching from" if holder not in on_the_way else "attached to"
            return VolumeChoice(wait_reason=f"cache volume {volume.id} of {owner} is still {detail} {holder}")
        if volume.state not in ("deleting", "deleted", "error"):
            return VolumeChoice(wait_reason=f"cache volume {volume.id} of {owner} is {volume.state}")
    return VolumeChoice(create=True)


def volume_actions(
    volumes: Iterable[Volume],
    awaiting: Mapping[str, Instance],
    held: set[str],
    ttl_updates: Mapping[str, CachePolicy],
    policy: Policy,
    clock: DeadlineClock,
    *,
    clock_untrusted: bool,
) -> list[Action]:
    """Attach what machines wait for, unstick attaches, mark released volumes, clear returns, expire.

    `awaiting`: machines that name their owner's volume and may have it attached (Cluster.awaiting_volume).
    `held`: volumes a Launch of this cycle names, a returning owner's pending work waits for, or a machine
    may still mount (never released or deleted under it).
    `ttl_updates`: volumes whose owner came back with a (possibly new) cache policy.
    `clock`: an attach is aged and an expiry read by AWS's clock, an expiry written with the later of the two.
    `clock_untrusted`: this replica's clock disagrees with AWS's (either way): the janitor writes no deadline (a
    release's expiry) and deletes nothing this cycle; a volume so left unreleased is kept, never lost.
    """
    by_id = {v.id: v for v in volumes}
    actions: list[Action] = _attachments(by_id, awaiting, policy, clock.aws)
    reserved = {i.volume_id for i in awaiting.values() if i.volume_id is not None} | held
    for volume in by_id.values():
        for action in _release_and_expiry(volume, reserved, ttl_updates.get(volume.id), clock):
            if not (clock_untrusted and isinstance(action, DeleteVolume | ReleaseVolume)):
                actions.append(action)
    return actions


def held_volumes(instances: Iterable[Instance], choices: Mapping[Owner, VolumeChoice]) -> set[str]:
    """Volumes the janitor never releases nor deletes this cycle: one a launch of this cycle names, or a returning
    owner's while no launch can carry it yet (no capacity in its zone, a limit), both among the owners' `choices`;
    and one a machine may still mount (running, late and terminated this cycle, or stopped: someone may start it)."""
    held = {choice.volume.id for choice in choices.values() if choice.volume is not None}
    held |= {i.volume_id for i in instances if i.state in WITH_DISKS_STATES and i.volume_id}
    return held


def _attachments(
    by_id: Mapping[str, Volume], awaiting: Mapping[str, Instance], policy: Policy, aws_now: float
) -> list[Action]:
    actions: list[Action] = []
    attaching: set[str] = set()
    # Oldest first: if two machines name one volume (a duplicate, an edited tag), the first launched gets it.
    carrying = [i for i in awaiting.values() if i.volume_id is not None]
    for instance in sorted(carrying, key=lambda i: (i.launched_at, i.id)):
        volume = by_id.get(instance.volume_id or "")
        if volume is None or volume.id in attaching:
            continue
        attachment = next((a for a in volume.attachments if a.instance_id == instance.id), None)
        if (
            attachment is None
            and volume.state == "available"
            # "available" with an attachment still listed is a read between two states: wait for the next.
            and all(a.state == "detached" for a in volume.attachments)
            # AWS attaches to a running or a stopped machine (never a pending one); only a claimed warm-buffer
            # machine waits for its volume stopped (Cluster.awaiting_volume).
            and instance.state in ("running", "stopped")
            and volume.availability_zone == instance.availability_zone
            # A volume goes only to a machine of its own owner, whatever an (edited) volume-id tag says.
            and volume.owner is not None
            and volume.owner == instance.owner
        ):
            attaching.add(volume.id)
            actions.append(
                AttachVolume(
                    volume.id,
                    instance.id,
                    CACHE_DEVICE,
                    f"{instance.id} {'runs' if instance.state == 'running' else 'is stopped'} and waits for its"
                    f" owner's cache volume {volume.id}",
                )
            )
        elif attachment is not None and attachment.state == "attaching":
            stuck_s = aws_now - attachment.attached_at
            if stuck_s > policy.attach_timeout_s:
                actions.append(
                    DetachVolume(
                        volume.id,
                        instance.id,
                        True,
                        f"attach of {volume.id} to {instance.id} stuck in attaching for {stuck_s:.0f} s"
                        f" (attach_timeout_s={policy.attach_timeout_s:g}); detaching to attach again",
                    )
                )
    return actions


def _release_and_expiry(
    volume: Volume, reserved: set[str], policy_now: CachePolicy | None, clock: DeadlineClock
) -> list[Action]:
    actions: list[Action] = []
    if policy_now is not None and policy_now.ttl_s != volume.ttl_s:
        actions.append(
            SetVolumeTtl(
                volume.id,
                policy_now.ttl_s,
                f"the owner's cache policy now keeps it {policy_now.ttl_s} s after release",
            )
        )
    expiry_tagged = volume.expires_at is not None or VOLUME_EXPIRES_AT_TAG in volume.unreadable_tags
    released_tagged = volume.released_at is not None or VOLUME_RELEASED_AT_TAG in volume.unreadable_tags
    in_use = volume.state != "available" or bool(volume.attachments) or volume.id in reserved
    if in_use:
        if volume.state in ("in-use", "available") and (expiry_tagged or released_tagged):
            actions.append(RenewVolume(volume.id, f"its owner is back: {volume.id} no longer expires"))
        return actions
    if volume.state != "available":
        return actions
    # An expiry that cannot be read, or lies further ahead than any TTL allows (a typo, a bad clock), is
    # treated as absent and written again: kept forever, it would hold the data (and the bill) for nobody.
    if volume.expires_at is None or volume.expires_at > clock.later + MAX_CACHE_TTL_S:
        actions.append(_release(volume, clock.later))
        return actions
    if deletable(volume, clock.aws) is None:
        expired_at = format_timestamp(volume.expires_at)
        actions.append(
            DeleteVolume(volume.id, f"{volume.id} was not claimed by its owner before it expired at {expired_at}")
        )
    return actions


def deletable(volume: Volume, now: float) -> str | None:
    """None when the janitor may delete the volume now, else why not: it is available, holds nothing of an
    owner who is back, has a readable expiry that has passed, and no operator pinned it. `now`: AWS's clock, which
    the expiry is kept by (DeadlineClock)."""
    if volume.state != "available" or volume.attachments:
        return f"{volume.id} is {volume.state}" + (
            f" and attached to {volume.attachments[0].instance_id}" if volume.attachments else ""
        )
    if volume.pinned:
        return f"{volume.id} is pinned ({VOLUME_PINNED_TAG}=true)"
    if volume.expires_at is None:
        return f"{volume.id} has no readable expiry"
    if volume.expires_at > now:
        return f"{volume.id} expires at {format_timestamp(volume.expires_at)}, not yet"
    return None


def _release(volume: Volume, now: float) -> ReleaseVolume:
    """`now`: the later of the two clocks (DeadlineClock.later), so that the TTL is not shortened by either."""
    ttl_s = volume.ttl_s if volume.ttl_s is not None else DEFAULT_CACHE_TTL_S
    return ReleaseVolume(
        volume.id,
        released_at=now,
        expires_at=now + ttl_s,
        # Absent or unreadable: written, so the next reader agrees.
        write_ttl_s=ttl_s if volume.ttl_s is None else None,
        reason=f"{volume.id} was released; kept {ttl_s} s for its owner",
    )


@dataclass(frozen=True, slots=True)
class Refused:
    """An operator's request that changes nothing, and why; `missing` when there is no such volume at all."""

    reason: str
    missing: bool = False


def expire_now(
    volume_id: str,
    cluster: str,
    volumes: Iterable[Volume],
    instances: Iterable[Instance],
    now: float,
    *,
    clock_skew: str,
) -> ExpireVolume | Refused:
    """An operator's early expiry: tag the volume to expire now (the janitor deletes it next cycle), or refuse.

    Only an available volume no machine holds or waits for may expire: anything else would pull data
    from under its owner. `clock_skew`: why this replica's clock cannot be trusted ("" when it can): an expiry is a
    deadline, written only by a clock that agrees with AWS's.
    """
    volume = next((v for v in volumes if v.id == volume_id), None)
    if volume is None:
        return Refused(f"no cache volume {volume_id} in cluster {cluster!r}", missing=True)
    if clock_skew:
        return Refused(f"volume {volume_id} does not expire now: {clock_skew}")
    if volume.attachments:
        holder = volume.attachments[0]
        return Refused(
            f"volume {volume_id} is {holder.state} to {holder.instance_id}: it is in use by its owner's"
            " machine; it can expire once that machine is gone and the volume is available"
        )
    if volume.state != "available":
        return Refused(f"volume {volume_id} is {volume.state}; only an available volume can expire")
    waiting = next((i for i in instances if i.is_live and i.volume_id == volume_id), None)
    if waiting is not None:
        return Refused(
            f"volume {volume_id} is reserved for instance {waiting.id}, which is starting for its owner"
            " and will attach it"
        )
    return ExpireVolume(volume_id, now, f"an operator asked for {volume_id} to expire now")
