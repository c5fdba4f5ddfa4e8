"""Capacity per offering: an instance type in an Availability Zone that has no room refuses a launch or a start.

AWS, EC2 User Guide, "Troubleshoot Amazon EC2 instance launch issues", section "Insufficient instance capacity"
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/troubleshooting-launch.html#troubleshooting-launch-capacity :
InsufficientInstanceCapacity (a server error, HTTP 500) when AWS has no On-Demand capacity for the type in the zone;
another zone or type may have room. It answers RunInstances and StartInstances alike: a stopped instance keeps no
capacity ("Stop and start Amazon EC2 instances", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Stop_Start.html).
"""

from __future__ import annotations

from collections.abc import Collection

from warmswarm_ec2rules.refusals import SERVER_ERROR_STATUS, Refusal

# (instance type, Availability Zone); a zone of None stands for every zone of the region.
Offering = tuple[str, str | None]


def lacks_capacity(unavailable: Collection[Offering], instance_type: str, zone: str | None) -> bool:
    """Whether `instance_type` in `zone` (None: a launch that names no zone) is among the `unavailable` offerings."""
    return (instance_type, None) in unavailable or (zone is not None and (instance_type, zone) in unavailable)


def insufficient_capacity(instance_type: str, zone: str | None) -> Refusal:
    where = f"the Availability Zone you requested ({zone})" if zone else "any Availability Zone"
    return Refusal(
        "InsufficientInstanceCapacity",
        f"We currently do not have sufficient {instance_type} capacity in {where}."
        " Our system will be working on provisioning additional capacity.",
        SERVER_ERROR_STATUS,
    )


def capacity_refusal(unavailable: Collection[Offering], instance_type: str, zone: str | None) -> Refusal | None:
    """AWS's answer to a launch or a start of `instance_type` in `zone` when it has no room there, else None."""
    return insufficient_capacity(instance_type, zone) if lacks_capacity(unavailable, instance_type, zone) else None
