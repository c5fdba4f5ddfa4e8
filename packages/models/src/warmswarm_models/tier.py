"""A machine's tier as people see it (the autoscaler's status, the sandbox's, the CLI): hot, warm, cold, buffer."""

from __future__ import annotations

from typing import Literal

Tier = Literal["hot", "warm", "cold", "buffer"]
TIERS: tuple[Tier, ...] = ("hot", "warm", "cold", "buffer")

# EC2 states of a machine we pay compute for, and of one that is stopped (its EBS volumes still attached).
RUNNING_STATES = frozenset({"pending", "running"})
STOPPED_STATES = frozenset({"stopping", "stopped"})
# A machine that still has its disks and may run again: it may still mount the volume it names.
WITH_DISKS_STATES = RUNNING_STATES | STOPPED_STATES


def machine_tier(state: str, warm_until: float | None, *, in_buffer: bool = False) -> tuple[Tier, float | None]:
    """The tier of a machine in EC2 state `state`, and until when it holds (epoch s; None: no end of its own).

    buffer: launched for the warm buffer and not claimed by an owner yet (booting, or stopped with its
    images). hot: running or starting. warm: stopped by the autoscaler for its owner, until `warm_until`
    (its tag). cold: on its way out: shutting down, or stopped by someone else (terminated after
    max_start_s, its volume kept).
    """
    if in_buffer and (state in RUNNING_STATES or state in STOPPED_STATES):
        return "buffer", None
    if state in RUNNING_STATES:
        return "hot", None
    if state in STOPPED_STATES and warm_until is not None:
        return "warm", warm_until
    return "cold", None
