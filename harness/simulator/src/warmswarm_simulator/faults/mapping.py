"""AWS's error answers made the port's exceptions, as the adapter maps them today ("current") or as it is being
changed to map them ("intended"): the campaign models the refusals as AWS sends them and maps them here.

Today (adapters/ec2_calls.py): a capacity code becomes InsufficientCapacity for RunInstances only, and
IdempotentParameterMismatch, like any other code, a plain Ec2Error; DescribeInstanceTypes fails whole when it names a
type EC2 does not know. Intended (the adapter's change under way on main): the capacity codes for every call that
starts instances (RunInstances and StartInstances: an assumption, volume calls keep Ec2Error, since apply only knows
what an InsufficientCapacity means for a launch or a start), IdempotentParameterMismatch as TokenSpent (the token's
first use is over: the decision takes the next generation's), and an unknown type in DescribeInstanceTypes dropped
(and reported) while the others are answered.
"""

from __future__ import annotations

from typing import Final, Literal

from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, TokenSpent

Mapping = Literal["intended", "current"]
MAPPINGS: Final = ("intended", "current")
CAPACITY_CODES: Final = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity"})
MISMATCH: Final = "IdempotentParameterMismatch"
# Where a capacity code means "this offering is full" to the caller (apply.py: a launch, a start).
_STARTS_INSTANCES: Final = frozenset({"RunInstances", "StartInstances"})


def port_error(operation: str, code: str, message: str, *, token: str | None, mapping: Mapping) -> Ec2Error:
    """The exception the EC2 port raises for AWS's answer `code` to `operation`."""
    full = code in CAPACITY_CODES or (code == "Unsupported" and operation == "RunInstances")
    if full and (operation == "RunInstances" or (mapping == "intended" and operation in _STARTS_INSTANCES)):
        return InsufficientCapacity(operation, code, message)
    if code == MISMATCH and mapping == "intended" and token:
        return TokenSpent(operation, token, "what a request with other arguments made", "not this request's")
    return Ec2Error(operation, code, message)


def remap(error: Ec2Error, *, token: str | None, mapping: Mapping) -> Ec2Error:
    """An error the modelled cloud raised (SimEc2 maps capacity codes for every call), mapped as `mapping` does."""
    if isinstance(error, TokenSpent):
        return error  # AWS answered, with what the token made, now gone: the same under both mappings
    message = str(error).split(": ", 1)[-1]
    return port_error(error.operation, error.code, message, token=token, mapping=mapping)
