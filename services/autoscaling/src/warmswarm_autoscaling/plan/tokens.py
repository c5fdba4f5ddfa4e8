"""Idempotency tokens, derived from the decision alone: a retry at any delay is the same call, never a second one.

A launch is the decision "a machine for this owner's first pending task", a batch "machines for these
owners' first pending tasks" (its launches' decisions together), a volume "a cache volume for this
owner". Only when the thing a token made is gone for good (terminated, deleted) is the token spent, and
the same decision then takes the next generation's token.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set

from warmswarm_models import Owner

# EC2 takes tokens of up to 64 ASCII characters.
_TOKEN_CHARS = 64


def launch_token(cluster: str, owner: Owner, first_task_id: str, spent: Set[str]) -> str:
    return _first_unspent([cluster, "launch", str(owner), first_task_id], spent)


def batch_token(cluster: str, instance_type: str, zone: str, seat_tokens: list[str], spent: Set[str]) -> str:
    """One call for several machines: the decision is the set of its machines' own decisions."""
    return _first_unspent([cluster, "batch", instance_type, zone, *sorted(seat_tokens)], spent)


def volume_token(cluster: str, owner: Owner, spent: Set[str]) -> str:
    return _first_unspent([cluster, "volume", str(owner)], spent)


def _first_unspent(decision: list[str], spent: Set[str]) -> str:
    # The spent set is finite, so some generation is free.
    generation = 0
    while True:
        token = hashlib.sha256("|".join([*decision, str(generation)]).encode()).hexdigest()[:_TOKEN_CHARS]
        if token not in spent:
            return token
        generation += 1
