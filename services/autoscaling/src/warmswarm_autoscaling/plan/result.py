"""What plan() answers (actions, waits, what the next cycle carries, when to look) and the buffer decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from warmswarm_models import Owner
from warmswarm_models.reservation import Reservation, ReservationStatus

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
    # When the wait ends by itself (epoch s, AWS's clock): a back-off after failures that repeated (plan/backoff.py).
    until: float | None = None


class Part(NamedTuple):
    """One part of the buffers: a type, a zone, and whether its machines are kept running (hot) or stopped (warm)."""

    instance_type: str
    availability_zone: str
    hot: bool


@dataclass(frozen=True, slots=True)
class Target:
    """What one part of the buffers keeps, and how ops read why (`said` heads a launch's or a surplus' reason)."""

    machines: int
    said: str


@dataclass(frozen=True, slots=True)
class Hold:
    """One reservation as the buffers hold it, per zone of its part of the hot buffer."""

    reservation: Reservation
    instance_type: str | None  # None: no allowed type fits one session
    shares: Mapping[str, int]  # zone -> sessions it keeps machines for there
    active: bool
    arrived: Mapping[str, int]  # zone -> machines of its part claimed since `at`
    held: Mapping[str, int]  # zone -> claimable hot machines counted for it (shared in order of `at`)
    still_to_come: Mapping[str, int]  # zone -> its share less the sessions come: the machines it still wants
    fill_from: float  # at - lead_s: from then on the hot buffer fills for it
    observed: bool = True  # False: no plan has seen the machines (before a cycle, a follower, a reservation just made)

    def status(self, now: float) -> ReservationStatus:
        """Pending and released by the clock; in between, ready once every zone holds what is still to come."""
        if now < self.fill_from:
            return "pending"
        if now >= self.reservation.released_at:
            return "released"
        ready = (
            self.instance_type is not None
            and bool(self.shares)
            and all(self.held.get(zone, 0) >= wanted for zone, wanted in self.still_to_come.items())
        )
        return "ready" if ready else "filling"


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
class Buffers:
    """The buffer decision, built once per plan (reservations.decide_buffers); claim, refill, surplus, the notices and
    the status answer all read it, none works it out again."""

    # Each part's target: the settings' count or demand's (demand.py), raised by the reservations' holds.
    targets: Mapping[Part, Target]
    holds: tuple[Hold, ...]
    # The one rule of a machine a session may claim now: unclaimed, of the buffer, and hot: running, its node ready,
    # drained and unlabelled; warm: stopped, its node still listed (it can come back).
    claimable: frozenset[str]
    # Every buffer machine's part (claimed ones included), by instance id: the one place a Part is made of a machine.
    part_of: Mapping[str, Part]
    # Each part's target and the unclaimed machines it holds, parts without a target included: /v1/status, the CLI.
    parts: tuple[BufferPart, ...]
    # The owners' arrivals demand sizing counted, by instance id (type, zone, moment): the next cycle carries them.
    arrivals: Mapping[str, tuple[str, str, float]]
    # Buffer machines past their leak bounds (reservations.stale_machines): never claimable, let go by surplus.py.
    stale: frozenset[str] = frozenset()
    # Machines being recycled, still their owner's, by the part they will join (reservations._recycling_into): counted
    # in that part's held machines.
    recycling_into: Mapping[str, Part] = field(default_factory=dict)


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
    # Every reservation the snapshot holds, with its part, its sessions come and its machines held (/v1/reservations).
    holds: tuple[Hold, ...] = field(default=(), compare=False)
