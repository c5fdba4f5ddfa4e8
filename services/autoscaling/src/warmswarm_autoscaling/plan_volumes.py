"""Pure decisions about EBS cache volumes: which one a launch uses, attaching, releasing, and the janitor."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from warmswarm_models import (
    DEFAULT_NODE_CACHE_PATH,
    INSTANCE_VOLUME_TAG,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    Owner,
    format_timestamp,
    parse_timestamp,
)
from warmswarm_models.cache import DEFAULT_CACHE_TTL_S

from warmswarm_autoscaling.actions import Action, AttachVolume, DeleteVolume, DetachVolume, TagVolume
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.snapshot import Instance, Volume

# Where the cache volume is attached; the boot script finds it by volume id, not by this name.
CACHE_DEVICE = "/dev/sdf"
_USABLE = ("available", "creating")

__all__ = ["CACHE_DEVICE", "DEFAULT_NODE_CACHE_PATH", "VolumeChoice", "choose_volume", "volume_actions"]


@dataclass(frozen=True, slots=True)
class VolumeChoice:
    """For an owner whose work needs its cache: launch with this volume in its zone, or wait, or create."""

    volume: Volume | None = None  # launch in volume.availability_zone with it
    wait_reason: str = ""  # nothing can be launched yet, and why
    create: bool = False  # the owner has no volume: create one where the launch would go


def owner_of(volume: Volume) -> Owner | None:
    try:
        return Owner.from_labels(volume.tags)
    except ValueError:
        return None


def _same_owner(volume: Volume, instance: Instance) -> bool:
    """A volume goes only to a machine of its own owner, whatever an (edited) volume-id tag says."""
    try:
        return owner_of(volume) == Owner.from_labels(instance.tags)
    except ValueError:
        return False


def volumes_by_owner(volumes: Iterable[Volume]) -> dict[Owner, list[Volume]]:
    found: dict[Owner, list[Volume]] = {}
    for volume in volumes:
        owner = owner_of(volume)
        if owner is not None and not owner.is_nobody:
            found.setdefault(owner, []).append(volume)
    return found


def choose_volume(owner: Owner, volumes: list[Volume], live: Mapping[str, Instance]) -> VolumeChoice:
    """The owner's volume a new machine should carry, or why none can yet.

    A volume reserved by a live machine (its launch names it) is that machine's: the owner's tasks
    wait for it rather than getting a second volume.
    """
    reserved = {i.tags.get(INSTANCE_VOLUME_TAG) for i in live.values()}
    usable = [v for v in volumes if v.state in _USABLE and v.id not in reserved]
    if usable:
        # Prefer a volume that is ready to attach, then the newest (the most recent data).
        usable.sort(key=lambda v: (v.state != "available", -v.created_at, v.id))
        return VolumeChoice(volume=usable[0])
    for volume in volumes:
        holder = next((a.instance_id for a in volume.attachments), None)
        if volume.id in reserved:
            return VolumeChoice(wait_reason=f"cache volume {volume.id} is reserved for a machine on its way")
        if volume.state == "in-use" and holder is not None:
            detail = "detaching from" if holder not in live else "attached to"
            return VolumeChoice(wait_reason=f"cache volume {volume.id} of {owner} is still {detail} {holder}")
        if volume.state not in ("deleting", "deleted", "error"):
            return VolumeChoice(wait_reason=f"cache volume {volume.id} of {owner} is {volume.state}")
    return VolumeChoice(create=True)


def volume_client_token(policy: Policy, owner: Owner, zone: str, now: float) -> str:
    # One volume per owner per start window, even when CreateVolume is retried after a timeout.
    window = int(now // policy.max_start_s)
    key = "|".join([policy.cluster, "volume", str(owner), zone, str(window)])
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def ttl_of(volume: Volume) -> int:
    raw = volume.tags.get(VOLUME_TTL_TAG, "")
    return int(raw) if raw.isdigit() else DEFAULT_CACHE_TTL_S


def volume_actions(
    volumes: Iterable[Volume],
    live: Mapping[str, Instance],
    launching_with: set[str],
    ttl_updates: Mapping[str, CachePolicy],
    policy: Policy,
    now: float,
) -> list[Action]:
    """Attach what machines wait for, unstick attaches, mark released volumes, clear returns, expire.

    `launching_with`: volumes a Launch of this cycle names, or a returning owner's pending work waits
    for (never released or deleted under it).
    `ttl_updates`: volumes whose owner came back with a (possibly new) cache policy.
    """
    actions: list[Action] = []
    by_id = {v.id: v for v in volumes}
    reserved = {i.tags[INSTANCE_VOLUME_TAG] for i in live.values() if INSTANCE_VOLUME_TAG in i.tags}
    reserved |= launching_with

    for instance in live.values():
        volume = by_id.get(instance.tags.get(INSTANCE_VOLUME_TAG, ""))
        if volume is None:
            continue
        attachment = next((a for a in volume.attachments if a.instance_id == instance.id), None)
        if (
            attachment is None
            and volume.state == "available"
            and instance.state == "running"
            and volume.availability_zone == instance.availability_zone
            and _same_owner(volume, instance)
        ):
            actions.append(
                AttachVolume(
                    volume.id,
                    instance.id,
                    CACHE_DEVICE,
                    f"{instance.id} runs and waits for its owner's cache volume {volume.id}",
                )
            )
        elif attachment is not None and attachment.state == "attaching":
            stuck_s = now - attachment.attached_at
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

    for volume in by_id.values():
        expires_tag = volume.tags.get(VOLUME_EXPIRES_AT_TAG)
        in_use = volume.state != "available" or volume.attachments or volume.id in reserved
        policy_now = ttl_updates.get(volume.id)
        if policy_now is not None and str(policy_now.ttl_s) != volume.tags.get(VOLUME_TTL_TAG):
            actions.append(
                TagVolume(
                    volume.id,
                    {VOLUME_TTL_TAG: str(policy_now.ttl_s)},
                    (),
                    f"the owner's cache policy now keeps it {policy_now.ttl_s} s after release",
                )
            )
        if in_use:
            if volume.state in ("in-use", "available") and (
                expires_tag is not None or VOLUME_RELEASED_AT_TAG in volume.tags
            ):
                actions.append(
                    TagVolume(
                        volume.id,
                        {},
                        (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG),
                        f"its owner is back: {volume.id} no longer expires",
                    )
                )
            continue
        if volume.state != "available":
            continue
        if expires_tag is None:
            ttl_s = ttl_of(volume)
            actions.append(
                TagVolume(
                    volume.id,
                    {
                        VOLUME_RELEASED_AT_TAG: format_timestamp(now),
                        VOLUME_EXPIRES_AT_TAG: format_timestamp(now + ttl_s),
                    },
                    (),
                    f"{volume.id} was released; kept {ttl_s} s for its owner",
                )
            )
            continue
        expires_at = parse_timestamp(expires_tag)
        if expires_at is not None and expires_at <= now:
            actions.append(
                DeleteVolume(volume.id, f"{volume.id} was not claimed by its owner before it expired at {expires_tag}")
            )
    return actions
