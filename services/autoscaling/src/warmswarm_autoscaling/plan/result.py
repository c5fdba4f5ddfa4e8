"""What plan() answers: the actions, why each task waits, the bookkeeping for the next cycle, when to look."""

from __future__ import annotations

from dataclasses import dataclass, field

from warmswarm_models import Owner

from warmswarm_autoscaling.actions import Action
from warmswarm_autoscaling.snapshot import Carried


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a task is still pending, as the autoscaler sees it."""

    task_id: str
    service_name: str
    owner: Owner
    reason: str
    # True when no launch can help: the request itself must change.
    unschedulable: bool = False
    # True while its machine is on the way: booting, being labelled, or its cache volume being readied.
    starting: bool = False


@dataclass(frozen=True, slots=True)
class BufferPart:
    """One part of the buffers (a type, a zone, hot or warm) as a plan saw it: its target, the unclaimed machines it
    holds (booting, running or stopped), and how the target reads."""

    instance_type: str
    availability_zone: str
    hot: bool
    target: int
    held: int
    said: str


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...]
    waiting: tuple[Waiting, ...]
    # Bookkeeping for the next cycle, before anything is applied (carried.after adds what applying taught): may be
    # lost without harm (the grace restarts).
    carried: Carried
    # What ops should know that is no task's reason to wait (a node claiming another's instance, a
    # clock ahead of AWS's): told once by the journal, listed in /v1/status.
    notices: tuple[str, ...] = ()
    # What follows are readings of the snapshot for the reconciler and the status view, not decisions:
    # two plans that decide the same are equal.
    # Instances launched but not yet part of the swarm (their node has not joined): on their way.
    in_flight: tuple[str, ...] = field(default=(), compare=False)
    # Something is in motion (tasks wait, machines start or stop, nodes join or leave): look again soon.
    busy: bool = field(default=False, compare=False)
    # The next moment a decision changes by the clock alone (a grace or a timeout ends, a volume
    # expires), epoch s; None when none is ahead.
    deadline: float | None = field(default=None, compare=False)
    # The buffers' parts, their targets and what they hold (for /v1/status and the CLI).
    buffers: tuple[BufferPart, ...] = field(default=(), compare=False)
