"""The fault kinds a campaign may inject, what each stands for, and which the command line turns on or off."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    where: str  # "ec2" (the EC2 port), "swarm" (the swarm port), "world" (the modelled machines), "time", "leader"
    what: str


KINDS: Final = (
    Kind("capacity", "ec2", "InsufficientInstanceCapacity on RunInstances and StartInstances (HTTP 500)"),
    Kind("throttle", "ec2", "RequestLimitExceeded on any EC2 call, reads included (HTTP 503, after the SDK's retries)"),
    Kind(
        "state",
        "ec2",
        "IncorrectInstanceState, VolumeInUse, IncorrectState where AWS answers them (an eventually"
        " consistent view: the state the caller saw is not AWS's yet)",
    ),
    Kind(
        "notfound",
        "ec2",
        "InvalidInstanceID.NotFound / InvalidVolume.NotFound for an id AWS does not know yet"
        " (or any more); taken for 'gone' where the adapter does (TerminateInstances, DeleteVolume, a re-read)",
    ),
    Kind(
        "unknown-type",
        "ec2",
        "an allowed instance type EC2 does not know (a typo, another region's type):"
        " DescribeInstanceTypes refuses it (InvalidInstanceType)",
    ),
    Kind(
        "idempotent",
        "ec2",
        "IdempotentParameterMismatch on RunInstances or CreateVolume: the token was used with"
        " other arguments; AWS keeps answering so for that token",
    ),
    Kind("unauthorized", "ec2", "UnauthorizedOperation on any EC2 call (HTTP 403: an IAM policy being changed)"),
    Kind("lost", "ec2", "the answer lost after the call took effect (a timeout, a 500): EC2 and swarm updates"),
    Kind(
        "partial",
        "ec2",
        "one call of a multi-call decision fails while the other succeeds (a buffer claim's tag or"
        " its attach; a stop's warm-until tag or its StopInstances)",
    ),
    Kind("docker", "swarm", "the Docker API fails a read or an update (a manager restarting)"),
    Kind("clock", "time", "the reconciler's clock ahead of or behind AWS's, for a while (a drifting replica)"),
    Kind("node", "world", "a node removed from the swarm, or dropping out (for a while, or for good)"),
    Kind(
        "device",
        "world",
        "an attached volume whose device never appears on the machine (its boot waits, then joins without the cache)",
    ),
    Kind("pull", "world", "image pulls that fail: a buffer machine's boot (it never joins), or a task's on a node"),
    Kind(
        "foreign", "world", "work that is nobody's (no owner constraints) with cache labels, placed by swarm anywhere"
    ),
    Kind("leader", "leader", "a second replica with a stale lease: it observed as leader, froze, and applies late"),
    # Recycling's own (drawn only in campaigns whose owners recycle: scenario.py).
    Kind("scrub", "world", "a recycled machine's scrub boot crashes: its node never comes back"),
    Kind("detach", "ec2", "DetachVolume refused (IncorrectState) or its answer lost after it took effect"),
    Kind(
        "tags",
        "world",
        "a person deletes, garbles or sets back a recycled machine's count (warmswarm:recycled) or scrub tag in EC2",
    ),
    Kind(
        "reboot",
        "world",
        "a machine that owes its scrub reboots (before or after its strip), or its scrub unit runs again in one boot",
    ),
    Kind(
        "metadata",
        "world",
        "the metadata service answers a boot that owes its scrub 5 to 30 s late (the boot's retries wait it out)",
    ),
)
RECYCLING_KINDS: Final = ("scrub", "detach", "tags", "reboot", "metadata")
NAMES: Final = tuple(k.name for k in KINDS)
BY_NAME: Final = {k.name: k for k in KINDS}


class UnknownKind(ValueError):
    """A fault kind the campaign does not know; the message lists those it does."""


def selected(faults: str | None, excluded: Iterable[str] = ()) -> tuple[str, ...]:
    """The kinds named by `--faults` ("all", "none" or a comma list; None: all) less those `--no-fault` names, in KINDS
    order."""
    if faults == "none":
        return ()
    chosen = set(NAMES) if faults in (None, "", "all") else _names(faults.split(","))
    chosen -= _names(excluded)
    return tuple(n for n in NAMES if n in chosen)


def _names(raw: Iterable[str]) -> set[str]:
    names = {n.strip() for part in raw for n in part.split(",") if n.strip()}
    unknown = sorted(names - set(NAMES))
    if unknown:
        raise UnknownKind(f"no fault kind {unknown}; the kinds are {', '.join(NAMES)}")
    return names
