"""When EBS refuses AttachVolume, DetachVolume and DeleteVolume: zones, one attachment per volume, states.

AWS, EBS User Guide, "Attach an Amazon EBS volume to an instance"
https://docs.aws.amazon.com/ebs/latest/userguide/ebs-attaching-volume.html , and the API Reference's AttachVolume,
DetachVolume and DeleteVolume: a volume attaches only to an instance in its own Availability Zone, only while it is
"available" (one attachment at a time), and only to a running or stopped instance; only an attached volume
detaches; only an "available" volume is deleted (not one attached, attaching or detaching). The codes are those of
"Error codes for the Amazon EC2 API" (refusals.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from warmswarm_ec2rules.instances import RUNNING, STOPPED
from warmswarm_ec2rules.refusals import Refusal, client_error

AVAILABLE: Final = "available"
IN_USE: Final = "in-use"
ATTACHING: Final = "attaching"
ATTACHED: Final = "attached"
DETACHING: Final = "detaching"


@dataclass(frozen=True, slots=True)
class EbsVolume:
    """What the rules need to know of a volume, as AWS would show it now."""

    volume_id: str
    zone: str | None
    state: str  # creating, available, in-use (also while attaching or detaching), deleting, ...
    attachment_state: str | None = None  # attaching, attached, detaching; None: not attached
    attached_to: str | None = None  # the instance of that attachment


@dataclass(frozen=True, slots=True)
class Ec2Instance:
    """What the rules need to know of an instance, as AWS would show it now."""

    instance_id: str
    zone: str | None
    state: str


def attach_refusal(volume: EbsVolume, instance: Ec2Instance) -> Refusal | None:
    """AttachVolume's refusal, if any. AWS documents no order among its checks; these go from what no retry can cure
    (another zone) to what time may (the volume still busy, the instance not running yet)."""
    if volume.zone != instance.zone:
        volume_id, instance_id = volume.volume_id, instance.instance_id
        return client_error(
            "InvalidVolume.ZoneMismatch",
            f"The volume '{volume_id}' is not in the same availability zone as instance '{instance_id}'",
        )
    if volume.attachment_state in (ATTACHING, ATTACHED):
        return client_error("VolumeInUse", f"{volume.volume_id} is already attached to an instance")
    if volume.state != AVAILABLE:  # creating, or in use until a detach is done
        return client_error("IncorrectState", f"{volume.volume_id} is not '{AVAILABLE}'.")
    if instance.state not in (RUNNING, STOPPED):
        return client_error(
            "IncorrectInstanceState",
            f"Instance '{instance.instance_id}' is '{instance.state}', not '{RUNNING}' or '{STOPPED}'.",
        )
    return None


def detach_refusal(volume: EbsVolume, instance_id: str | None) -> Refusal | None:
    """DetachVolume's refusal, if any; `instance_id` None: the caller names no instance (AWS finds the attachment)."""
    if volume.attachment_state is None:
        return client_error("IncorrectState", f"Volume '{volume.volume_id}' is in the '{AVAILABLE}' state.")
    if volume.attachment_state == DETACHING:
        return client_error("IncorrectState", f"Volume '{volume.volume_id}' is already '{DETACHING}'.")
    if instance_id is not None and instance_id != volume.attached_to:
        return client_error(
            "InvalidAttachment.NotFound", f"Volume {volume.volume_id} is not attached to instance {instance_id}."
        )
    return None


def delete_refusal(volume: EbsVolume) -> Refusal | None:
    """DeleteVolume's refusal, if any."""
    if volume.attachment_state is not None:
        return client_error("VolumeInUse", f"Volume {volume.volume_id} is currently attached to {volume.attached_to}")
    if volume.state != AVAILABLE:
        return client_error("IncorrectState", f"Volume '{volume.volume_id}' is '{volume.state}', not '{AVAILABLE}'.")
    return None
