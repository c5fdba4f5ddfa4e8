"""An instance's states and what StartInstances, StopInstances and TerminateInstances do in each.

AWS, EC2 User Guide, "Amazon EC2 instance state changes"
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html : pending -> running ->
stopping -> stopped -> pending (a start), or -> shutting-down -> terminated. Only a stopped instance starts, only
a running one stops (IncorrectInstanceState otherwise); asking for the state an instance is already in or heading
to changes nothing, and any instance not yet shutting down can be terminated.
"""

from __future__ import annotations

from typing import Final

from warmswarm_ec2rules.refusals import Refusal, client_error

PENDING: Final = "pending"
RUNNING: Final = "running"
STOPPING: Final = "stopping"
STOPPED: Final = "stopped"
SHUTTING_DOWN: Final = "shutting-down"
TERMINATED: Final = "terminated"

# EC2's numeric state codes (API Reference, "InstanceState").
STATE_CODES: Final = {
    PENDING: "0",
    RUNNING: "16",
    SHUTTING_DOWN: "32",
    TERMINATED: "48",
    STOPPING: "64",
    STOPPED: "80",
}

# Each call's outcome for one instance: the state it moves to, None when the call changes nothing (the instance is
# already there or on its way), or AWS's refusal.
Outcome = str | Refusal | None


def start(instance_id: str, state: str, *, capacity_refusal: Refusal | None = None) -> Outcome:
    """StartInstances: a stopped instance goes pending, unless its offering has no capacity now (`capacity_refusal`,
    see capacity.py: none is kept for a stopped instance); a pending or running one is left as it is."""
    if state in (PENDING, RUNNING):
        return None
    if state != STOPPED:
        return client_error(
            "IncorrectInstanceState", f"The instance '{instance_id}' is not in a state from which it can be started."
        )
    return capacity_refusal or PENDING


def stop(instance_id: str, state: str) -> Outcome:
    """StopInstances: a running instance goes stopping; a stopping or stopped one is left as it is."""
    if state in (STOPPING, STOPPED):
        return None
    if state != RUNNING:
        return client_error(
            "IncorrectInstanceState", f"The instance '{instance_id}' is not in a state from which it can be stopped."
        )
    return STOPPING


def terminate(state: str) -> str | None:
    """TerminateInstances: any instance goes shutting-down, except one already shutting down or terminated."""
    if state in (SHUTTING_DOWN, TERMINATED):
        return None
    return SHUTTING_DOWN
