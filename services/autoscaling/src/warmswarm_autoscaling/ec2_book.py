"""The EC2 book: this cluster's instances and cache volumes kept by id between cycles, read again where they move."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from typing import Final, TypeVar

from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.ports import Ec2
from warmswarm_autoscaling.snapshot import Instance, Node, Volume

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long after its launch, or after an action of ours named it, an instance or volume is read by id every cycle.
# Ten minutes: longer than EC2 takes to bring a launch from pending to running or to settle a stop, a start, an attach
# or a detach, and far longer than the seconds DescribeInstances' eventually consistent answers take to show our tags.
# A machine still moving after that is caught by its state (pending, stopping, ...) or by its node (not ready).
MOVING_WINDOW_S: Final = 600.0

# States EC2 leaves on its own: the next reading differs, so such an instance or volume is read every cycle.
_MOVING_INSTANCE_STATES: Final = frozenset({"pending", "stopping", "shutting-down"})
# "modifying" is no EC2 volume state today (a modification has its own record): kept should a reading ever show it.
_MOVING_VOLUME_STATES: Final = frozenset({"creating", "deleting", "modifying"})
_MOVING_ATTACHMENT_STATES: Final = frozenset({"attaching", "detaching"})


class Ec2Book:
    """What the last readings said of each instance and cache volume, by id.

    A full listing (list_instances + list_volumes) replaces the book; otherwise a cycle describes by id only what can
    have changed, and drops an id asked for and absent from the answer (terminated, deleted, or no longer this
    cluster's). What the shortcut gives up, and what catches it:
    - tags changed or removed behind our back on a steady instance or volume, and an instance or volume made by hand
      (not by an action of ours), are seen at the next full listing, at most `full_listing_interval_s` late;
    - a machine stopped or terminated by hand is seen once its swarm node is down (the swarm's heartbeat): an instance
      whose node is missing or not ready is described every cycle;
    - anything an earlier term or a lost answer may have changed: a new term, a failed or unclear action and a restart
      list everything again (level-triggered: nothing is lost, only seen later).
    """

    def __init__(
        self, ec2: Ec2, cluster: str, full_listing_interval_s: float, *, moving_window_s: float = MOVING_WINDOW_S
    ) -> None:
        """`moving_window_s` is MOVING_WINDOW_S but where a test cannot wait ten minutes of AWS's clock."""
        self._ec2 = ec2
        self._cluster = cluster
        self._full_listing_interval_s = full_listing_interval_s
        self._moving_window_s = moving_window_s
        self._instances: dict[str, Instance] = {}
        self._volumes: dict[str, Volume] = {}
        self._listed_at: float | None = None  # when the last full listing that succeeded began (the loop's clock)
        self._full_listing_reason: str | None = "no listing yet"
        # id -> when an action of ours last named it (the loop's clock): read by id for MOVING_WINDOW_S after.
        self._acted_instances: dict[str, float] = {}
        self._acted_volumes: dict[str, float] = {}
        self.last_read_full = False  # whether this cycle's first read was a full listing (then nothing follows it)
        self._moving_volumes_read: frozenset[str] = frozenset()  # the volumes this cycle's first read described

    @property
    def instances(self) -> tuple[Instance, ...]:
        return tuple(self._instances.values())

    @property
    def volumes(self) -> tuple[Volume, ...]:
        return tuple(self._volumes.values())

    def request_full_listing(self, reason: str) -> None:
        """The next read lists every instance and volume again (the first reason asked is the one logged)."""
        if self._full_listing_reason is None:
            self._full_listing_reason = reason

    def full_listing_due(self, now: float) -> str | None:
        """Why the next read at `now` lists everything; None when it reads by id only."""
        if self._full_listing_reason is not None:
            return self._full_listing_reason
        if self._listed_at is not None and now - self._listed_at >= self._full_listing_interval_s:
            return f"{self._full_listing_interval_s:g} s since the last full listing"
        return None

    def note_outcomes(self, outcomes: Iterable[Outcome], now: float) -> None:
        """What apply did: every id an action named (done or not) is read for MOVING_WINDOW_S; a failed or unclear
        action (its error set: a call refused, or no answer) may have changed the world otherwise than we think, so the
        next read lists everything."""
        for outcome in outcomes:
            action = outcome.action
            instance_ids = {getattr(action, "instance_id", None), outcome.instance_id, *outcome.instance_ids}
            volume_ids = {getattr(action, "volume_id", None), outcome.volume_id}
            for instance_id in instance_ids:
                if isinstance(instance_id, str) and instance_id:
                    self._acted_instances[instance_id] = now
            for volume_id in volume_ids:
                if isinstance(volume_id, str) and volume_id:
                    self._acted_volumes[volume_id] = now
            # AWS's plain "no capacity" (to launch, or to start a stopped machine) changed nothing: a capacity
            # shortage, with the busy cycles retrying every few seconds, must not list the whole cluster each time.
            refused_for_capacity = outcome.unavailable_offering is not None or outcome.failed_start is not None
            if outcome.error is not None and not refused_for_capacity:
                self.request_full_listing(f"{action.title} failed or went unanswered")

    async def refresh(self, now: float) -> frozenset[str]:
        """The cycle's first read, while the swarm is read: a full listing when one is due, else by id the instances
        and volumes that can move by what the book holds. Returns the instance ids read (all, after a full listing)."""
        self._forget_old_actions(now)
        reason = self.full_listing_due(now)
        if reason is not None:
            await self._list_all(now, reason)
            return frozenset(self._instances)
        moving = self._moving_instances(now)
        await self._describe(moving, self._moving_volumes(moving))
        return moving

    async def follow_nodes(self, nodes: Sequence[Node], read: frozenset[str]) -> None:
        """The cycle's second read, once the swarm's nodes are known: the instances no ready node names (their node
        is missing, down or on its way), and their volumes, unless `refresh` read them already."""
        if self.last_read_full:
            return
        ready = {
            instance_id
            for node in nodes
            if node.state == "ready"
            for instance_id in (node.engine_instance_id, node.labelled_instance_id)
            if instance_id
        }
        # Stopped machines too (a warm or buffer machine's node is down by design): one terminated or started by hand
        # must be seen within the swarm's heartbeat, not a full listing later; 200 of them cost one call a cycle.
        unready = frozenset(i for i in self._instances if i not in ready and i not in read)
        if not unready:
            return
        volumes = {v.id for v in self._volumes.values() if any(a.instance_id in unready for a in v.attachments)}
        await self._describe(unready, volumes - self._moving_volumes_read)

    # -- the reads ---------------------------------------------------------------------------------------------------

    async def _list_all(self, now: float, reason: str) -> None:
        # The interval's listing is routine (every couple of minutes); the others say something happened.
        routine = self._full_listing_reason is None
        log.log(
            logging.DEBUG if routine else logging.INFO,
            "listing every instance and volume of %s: %s",
            self._cluster,
            reason,
        )
        instances, volumes = await asyncio.gather(
            self._ec2.list_instances(self._cluster), self._ec2.list_volumes(self._cluster)
        )
        # Replaced whole, and only once both answered: an id absent from a full listing is gone.
        self._instances = {i.id: i for i in instances}
        self._volumes = {v.id: v for v in volumes}
        self._listed_at = now
        self._full_listing_reason = None
        self.last_read_full = True

    async def _describe(self, instance_ids: frozenset[str], volume_ids: frozenset[str] | set[str]) -> None:
        self.last_read_full = False
        self._moving_volumes_read = frozenset(volume_ids)
        asked_instances, asked_volumes = sorted(instance_ids), sorted(volume_ids)
        instances, volumes = await asyncio.gather(
            self._instances_by_id(asked_instances), self._volumes_by_id(asked_volumes)
        )
        _merge(self._instances, asked_instances, {i.id: i for i in instances})
        _merge(self._volumes, asked_volumes, {v.id: v for v in volumes})

    async def _instances_by_id(self, ids: Sequence[str]) -> list[Instance]:
        return await self._ec2.describe_instances(self._cluster, ids) if ids else []

    async def _volumes_by_id(self, ids: Sequence[str]) -> list[Volume]:
        return await self._ec2.describe_volumes(self._cluster, ids) if ids else []

    # -- what can move -----------------------------------------------------------------------------------------------

    def _moving_instances(self, now: float) -> frozenset[str]:
        # Launch times are AWS's clock: compared with AWS's (running on since its last answer), this replica's without.
        aws_now = self._ec2.aws_clock()
        launch_now = now if aws_now is None else aws_now
        moving = {
            i.id
            for i in self._instances.values()
            if i.state in _MOVING_INSTANCE_STATES or launch_now - i.launched_at < self._moving_window_s
        }
        # Acted on: a launch's new ids are not in the book yet; this is how they get into it.
        return frozenset(moving | self._acted_instances.keys())

    def _moving_volumes(self, moving_instances: frozenset[str]) -> frozenset[str]:
        moving = set(self._acted_volumes)
        for volume in self._volumes.values():
            if volume.state in _MOVING_VOLUME_STATES or any(
                a.state in _MOVING_ATTACHMENT_STATES
                # Attached to a machine that moves, or that the book no longer holds (it went): its attachment
                # changes or has changed.
                or a.instance_id in moving_instances
                or a.instance_id not in self._instances
                for a in volume.attachments
            ):
                moving.add(volume.id)
        return frozenset(moving)

    def _forget_old_actions(self, now: float) -> None:
        for acted in (self._acted_instances, self._acted_volumes):
            for key in [k for k, at in acted.items() if now - at >= self._moving_window_s]:
                del acted[key]


def _merge(book: dict[str, T], asked: Sequence[str], found: dict[str, T]) -> None:
    """The answer into the book: each id asked for is its new reading, or gone when the answer has it not."""
    for key in asked:
        reading = found.get(key)
        if reading is None:
            book.pop(key, None)
        else:
            book[key] = reading
