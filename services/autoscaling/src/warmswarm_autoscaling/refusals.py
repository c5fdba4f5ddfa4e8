"""What each AWS refusal of each EC2 call becomes: a port exception its caller acts on, or an Ec2Error that says what
to do next. Pure: the adapter (adapters/ec2_refusals.py) reads the code from botocore's error, the simulator's fault
campaign from the refusals it injects, and both get the same answer here.

The codes are AWS's: the EC2 API Reference, "Error codes for the Amazon EC2 API"
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html), and each call's own page. Four become
port exceptions: no capacity for a launch or a start (InsufficientCapacity), a client token first used with other
arguments (TokenSpent), an instance type EC2 does not know (UnknownInstanceTypes); "gone" answers (an unknown id to
terminate, a volume to delete or read again) are taken as what was wanted by the adapter's calls themselves. Every
other code in UNDERSTOOD is an Ec2Error whose message says what to do next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, TokenSpent, UnknownInstanceTypes

# No room for this type in this AZ now, or the AZ does not offer the type: the caller tries another offering (a
# launch), or replaces the machine (a start). Only for these calls: a volume call's "Unsupported" (a volume type
# an AZ lacks) is no instance offering.
_CAPACITY_CODES: Final = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported"})
_CAPACITY_CALLS: Final = frozenset({"RunInstances", "StartInstances"})
# The calls the adapter sends a ClientToken with.
_TOKEN_CALLS: Final = frozenset({"RunInstances", "CreateVolume"})

# Per call the adapter makes, the codes AWS documents for it that the autoscaler must understand, besides those any
# call can meet (_EVERY_CALL: throttling, permissions, credentials, AWS's own failures).
UNDERSTOOD: Final[Mapping[str, frozenset[str]]] = {
    "RunInstances": frozenset(
        {
            *("InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported", "IdempotentParameterMismatch"),
            *("InstanceLimitExceeded", "VcpuLimitExceeded", "InsufficientFreeAddressesInSubnet"),
            *("InvalidAMIID.NotFound", "InvalidAMIID.Malformed", "InvalidAMIID.Unavailable"),
            *("InvalidSubnetID.NotFound", "InvalidGroup.NotFound", "InvalidKeyPair.NotFound"),
            *("InvalidParameterValue", "InvalidParameterCombination"),
        }
    ),
    "StartInstances": frozenset(
        {
            *("InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported"),
            *("IncorrectInstanceState", "InvalidInstanceID.NotFound", "VcpuLimitExceeded", "InstanceLimitExceeded"),
        }
    ),
    "StopInstances": frozenset({"IncorrectInstanceState", "InvalidInstanceID.NotFound", "UnsupportedOperation"}),
    "TerminateInstances": frozenset({"InvalidInstanceID.NotFound", "OperationNotPermitted"}),
    "CreateVolume": frozenset(
        {
            *("IdempotentParameterMismatch", "Unsupported", "InsufficientVolumeCapacity", "VolumeLimitExceeded"),
            *("MaxIOPSLimitExceeded", "InvalidZone.NotFound", "InvalidParameterValue"),
        }
    ),
    "AttachVolume": frozenset(
        {
            *("IncorrectInstanceState", "IncorrectState", "VolumeInUse", "InvalidVolume.ZoneMismatch"),
            *("AttachmentLimitExceeded", "InvalidVolume.NotFound", "InvalidInstanceID.NotFound"),
            "InvalidParameterValue",
        }
    ),
    "DetachVolume": frozenset({"IncorrectState", "InvalidAttachment.NotFound", "InvalidVolume.NotFound"}),
    "DeleteVolume": frozenset({"VolumeInUse", "IncorrectState", "InvalidVolume.NotFound"}),
    # AWS's ModifyVolume page and the EBS User Guide's "Modify a volume": only larger, one at a time, six hours apart.
    "ModifyVolume": frozenset(
        {
            *("InvalidParameterValue", "IncorrectModificationState", "VolumeModificationRateExceeded"),
            *("IncorrectState", "InvalidVolume.NotFound", "VolumeLimitExceeded"),
        }
    ),
    "CreateTags": frozenset(
        {"InvalidInstanceID.NotFound", "InvalidVolume.NotFound", "TagLimitExceeded", "InvalidParameterValue"}
    ),
    # An instance's too: a recycled machine's owner tags are removed (Ec2.untag_instance).
    "DeleteTags": frozenset({"InvalidVolume.NotFound", "InvalidInstanceID.NotFound", "InvalidParameterValue"}),
    "DescribeInstances": frozenset({"InvalidParameterValue"}),
    "DescribeInstanceTypes": frozenset({"InvalidInstanceType"}),
    "DescribeVolumes": frozenset({"InvalidVolume.NotFound", "InvalidParameterValue"}),
}

# ModifyVolume's refusals while an earlier modification of the volume is under way or within AWS's six hours.
MODIFICATION_UNDER_WAY: Final = frozenset({"IncorrectModificationState", "VolumeModificationRateExceeded"})
# No answer came (the call may have taken effect), or AWS says to try again: the next cycle decides again.
NO_ANSWER_OR_RETRY: Final = frozenset(
    {"ConnectionError", "RequestLimitExceeded", "InternalError", "ServiceUnavailable", "Unavailable"}
)

# What to do next, for the codes any call can meet.
_EVERY_CALL: Final[Mapping[str, str]] = {
    "RequestLimitExceeded": "EC2 throttled the account; the next cycle retries",
    "RequestResourceCountExceeded": "EC2 throttled the account's instance count per call; the next cycle retries",
    "UnauthorizedOperation": "grant the autoscaler's IAM role this EC2 action",
    "AuthFailure": "check the AWS credentials the autoscaler runs with",
    "OptInRequired": "the account is not subscribed to EC2 in this region (opt in, or check the region)",
    "Blocked": "the account is blocked; ask AWS Support",
    "InternalError": "AWS failed on its side; the next cycle retries (a launch or a volume with the same token)",
    "ServiceUnavailable": "EC2 did not answer in time; the next cycle retries",
    "Unavailable": "EC2 is overloaded; the next cycle retries",
    "InvalidParameterValue": "check the launch settings (availability zone, type, image)",
    "IdempotentParameterMismatch": "the client token was first used with other arguments",
}

# What to do next, for the codes of particular calls; a call's own hint wins over _EVERY_CALL's.
_HINTS: Final[Mapping[str, str]] = {
    "InvalidAMIID.NotFound": "check the worker image id for this region",
    "InvalidAMIID.Malformed": "check the worker image id (ami-...)",
    "InvalidAMIID.Unavailable": "the worker image is deregistered or not shared with this account",
    "InvalidSubnetID.NotFound": "check AUTOSCALING_SUBNET_IDS for this region and account",
    "InvalidGroup.NotFound": "check AUTOSCALING_SECURITY_GROUP_IDS (in the subnets' VPC)",
    "InvalidKeyPair.NotFound": "check the key pair name for this region",
    "InsufficientFreeAddressesInSubnet": "the zone's subnet has no free address; widen it or free addresses",
    "InvalidParameterCombination": "check the launch settings (the type with the image, the subnet with the zone)",
    "InstanceLimitExceeded": "the account's instance quota is reached; raise it or lower max_instances",
    "VcpuLimitExceeded": "the account's vCPU quota for this instance family is reached; raise it in Service Quotas",
    "IncorrectInstanceState": "the instance is not in a state that allows this yet (pending, stopping or shutting"
    " down); the next cycle tries again",
    "InvalidInstanceID.NotFound": "EC2 does not know the instance (yet, just after its launch, or any more);"
    " the next cycle looks again",
    "UnsupportedOperation": "EC2 does not offer this operation for this resource (its type, root device or market)",
    "OperationNotPermitted": "the instance has termination protection on; turn it off to let the autoscaler end it",
    "InvalidVolume.ZoneMismatch": "a volume attaches only to an instance in its own availability zone",
    "VolumeInUse": "the volume is attached (or still attaching or detaching); detach it first",
    "IncorrectState": "the volume is not in a state that allows this (creating, or not attached); the next cycle"
    " looks again",
    "AttachmentLimitExceeded": "the instance has no free EBS attachment slot",
    "InvalidAttachment.NotFound": "the volume is not attached to that instance (any more): nothing to detach",
    "InvalidVolume.NotFound": "EC2 does not know the volume (any more); the next cycle looks again",
    "VolumeLimitExceeded": "the account's EBS storage quota is reached; raise it or delete expired caches",
    "MaxIOPSLimitExceeded": "the account's EBS IOPS quota is reached; raise it or use another volume type",
    "InsufficientVolumeCapacity": "EBS has no room for this volume type in this zone now; the next cycle tries again",
    "InvalidZone.NotFound": "check AUTOSCALING_AVAILABILITY_ZONES for this region",
    "IncorrectModificationState": "an earlier modification of the volume is still under way (modifying or"
    " optimizing); the volume is tagged grown-at now and not asked again for six hours",
    "VolumeModificationRateExceeded": "AWS allows one modification of a volume in six hours; the volume is tagged"
    " grown-at now and not asked again for six hours",
    "TagLimitExceeded": "the resource has 50 tags, EC2's most; remove tags someone else added",
    "InvalidInstanceType": "AUTOSCALING_ALLOWED_INSTANCE_TYPES names a type EC2 does not know in this region",
}

# Where one code means something else for one call.
_CALL_HINTS: Final[Mapping[tuple[str, str], str]] = {
    ("CreateVolume", "Unsupported"): "this volume type is not offered in this availability zone: choose the groups'"
    " cache volume type among those the zone offers",
    ("StopInstances", "UnsupportedOperation"): "the instance cannot be stopped (an instance-store root or a Spot"
    " instance)",
    ("CreateVolume", "InvalidParameterValue"): "check the cache volume's size, type and availability zone",
    ("AttachVolume", "InvalidParameterValue"): "check the device name (/dev/sdf) and the ids",
    ("ModifyVolume", "InvalidParameterValue"): "EBS volumes only grow, up to 16 TiB: the size asked for is not above"
    " the volume's (nothing is retried: the next growth is decided from the size EC2 reports)",
    ("CreateTags", "InvalidParameterValue"): "a tag key or value EC2 does not take (aws: prefix, length)",
    ("DeleteTags", "InvalidParameterValue"): "a tag key EC2 does not take (aws: prefix, length)",
    ("DescribeInstances", "InvalidParameterValue"): "a filter EC2 does not take; check the cluster name",
    ("DescribeVolumes", "InvalidParameterValue"): "a filter or volume id EC2 does not take",
}


def refusal(operation: str, code: str, message: str, *, client_token: str | None = None) -> Ec2Error:
    """Our error for AWS's refusal `code` of `operation`: its message, what to do next, and the port exception the
    caller acts on (`client_token`: the call's, for a refusal that spends it)."""
    if operation in _CAPACITY_CALLS and code in _CAPACITY_CODES:
        next_step = "try another type or availability zone" if operation == "RunInstances" else "launch anew"
        return InsufficientCapacity(operation, code, f"{message} ({next_step})")
    if operation in _TOKEN_CALLS and code == "IdempotentParameterMismatch" and client_token:
        # The token's first use was for other arguments (the decision changed since: another size, type or zone),
        # and what it made then is none of this call's business: the token is spent for this decision.
        return TokenSpent.reused(operation, client_token, message)
    hint = _CALL_HINTS.get((operation, code)) or _HINTS.get(code) or _EVERY_CALL.get(code)
    if hint:
        message = f"{message} ({hint})"
    if operation == "DescribeInstanceTypes" and code == "InvalidInstanceType":
        return UnknownInstanceTypes(operation, code, message)
    return Ec2Error(operation, code, message)
