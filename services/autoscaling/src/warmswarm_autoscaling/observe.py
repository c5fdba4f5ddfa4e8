"""Observation: reads swarm, EC2 and the reservations into one Snapshot; read-only, all-or-nothing but for the
reservations, whose failure is said (Snapshot.reservations_problem) and planned without for that cycle."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from warmswarm_models.reservation import Reservation

from warmswarm_autoscaling.ec2_book import Ec2Book
from warmswarm_autoscaling.ports import Ec2, PortError, ReservationStore, Swarm, UnknownInstanceTypes
from warmswarm_autoscaling.snapshot import Carried, InstanceType, Snapshot


class ObservationFailed(Exception):
    """A read failed: the cycle must not act on a partial view of the world."""


class InstanceCatalogue:
    """DescribeInstanceTypes for the allowed types, cached: the figures change with AWS releases, not by the minute.

    An allowed type EC2 does not know (a typo, a type the region lacks) is dropped and remembered (`unknown`): the
    other types are still launched, and the plan tells ops which ones are not.
    """

    def __init__(self, ec2: Ec2, names: Sequence[str], ttl_s: float) -> None:
        self._ec2 = ec2
        self._names = list(dict.fromkeys(names))
        self._ttl_s = ttl_s
        self._types: dict[str, InstanceType] = {}
        self._unknown: tuple[str, ...] = ()
        self._fetched_at = float("-inf")

    @property
    def unknown(self) -> tuple[str, ...]:
        """The allowed types EC2 did not know at the last look, in the order they are allowed."""
        return self._unknown

    async def get(self, now: float) -> Mapping[str, InstanceType]:
        if now - self._fetched_at >= self._ttl_s or not (self._types or self._unknown):
            found = await self._describe()
            self._types = {t.name: t for t in found}
            self._unknown = tuple(name for name in self._names if name not in self._types)
            self._fetched_at = now
        return self._types

    async def _describe(self) -> list[InstanceType]:
        try:
            return await self._ec2.describe_instance_types(self._names)
        except UnknownInstanceTypes:
            # AWS refuses the whole call for one name it does not know, and says which only in its message, whose
            # wording is no contract. Asked one at a time, each type has EC2's own answer. That is one call per
            # allowed type (a few), once per ttl and only while a type is unknown, one after another so as not to
            # take the describe bucket's burst at once; any other failure fails the look, as before.
            found: list[InstanceType] = []
            for name in self._names:
                try:
                    found += await self._ec2.describe_instance_types([name])
                except UnknownInstanceTypes:
                    continue
            return found


async def observe(
    swarm: Swarm,
    ec2: Ec2,
    catalogue: InstanceCatalogue,
    cluster: str,
    now: float,
    carried: Carried,
    reservations: ReservationStore | None = None,
    book: Ec2Book | None = None,
) -> Snapshot:
    """The world now. With a `book`, EC2 is read through it (a full listing when one is due, else by id what can move,
    ec2_book.py) and the snapshot holds all it knows; without one, every instance and volume is listed."""
    try:
        if book is None:
            nodes, tasks, instances, volumes, types, (reserved, problem, unread) = await asyncio.gather(
                swarm.list_nodes(),
                swarm.list_tasks(),
                ec2.list_instances(cluster),
                ec2.list_volumes(cluster),
                catalogue.get(now),
                _reservations(reservations),
            )
        else:
            nodes, tasks, read, types, (reserved, problem, unread) = await asyncio.gather(
                swarm.list_nodes(),
                swarm.list_tasks(),
                book.refresh(now),
                catalogue.get(now),
                _reservations(reservations),
            )
            # The machines whose node is not ready can only be told once the nodes are read: a second, short read.
            await book.follow_nodes(nodes, read)
            instances, volumes = list(book.instances), list(book.volumes)
    except PortError as error:
        raise ObservationFailed(str(error)) from error
    return Snapshot(
        now=now,
        nodes=tuple(nodes),
        tasks=tuple(tasks),
        instances=tuple(instances),
        instance_types=types,
        volumes=tuple(volumes),
        carried=carried,
        aws_now=ec2.aws_clock(),
        reservations=reserved,
        reservations_problem=problem,
        reservations_unread=unread,
    )


async def _reservations(store: ReservationStore | None) -> tuple[tuple[Reservation, ...], str, bool]:
    """The stored reservations, and why they are not all here: a store that does not answer costs this cycle its
    reservations (the buffers keep their other targets, and what is held now is not terminated: see
    plan/reservations.py), never the cycle."""
    if store is None:
        return (), "", False
    try:
        found = await store.list()
    except PortError as error:
        said = f"{error}: this cycle plans without the reservations (no buffer machine is let go), the next reads again"
        return (), said, True
    unreadable = store.unreadable
    if unreadable:
        said = f"reservation record(s) {', '.join(unreadable)} cannot be read: they are not planned for"
        return tuple(found), said, False
    return tuple(found), "", False
