"""The osparc-like baseline, as shared/notes/osparc-baseline.md documents that service: its own small autoscaler.

A cycle, then a fixed poll_interval_s sleep. Pending tasks the scheduler could not place ("no suitable node"),
oldest first, are matched first-fit to room on active nodes, then drained nodes, then hot-buffer nodes (both
reactivated), then machines still starting, then stopped warm buffers (started); what is left gets new machines of
the best-fitting type by 100 x (cpu_req/cpu) x (mem_req/mem) over the machine's room (vCPUs - 1.4, at least 0.5;
memory x 0.9 - 1 GiB), price never used, one RunInstances per type batch, nothing launched at max_instances. An
empty node is drained after 10 s, termination starts 60 s after the drain and ends 30 s later; a machine that never
joins is terminated after max_start_s. No data is cached: every session downloads its data (the platform does that).
One machine per session unless share_machines is set.

The hot and warm buffers: baseline_buffers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from warmswarm_autoscaling.ports import PortError
from warmswarm_autoscaling.snapshot import Instance, Node, Task
from warmswarm_models import CLUSTER_TAG, Resources

from warmswarm_simulator.baseline_buffers import CLUSTER, OsparcBuffers
from warmswarm_simulator.baseline_rules import (
    BaselineSettings,
    NodeMarks,
    best_fit,
    machine_room,
    session_of,
    targets,
    used_by_node,
)
from warmswarm_simulator.billing import BUFFER_MEMBER_TAG
from warmswarm_simulator.config import InstanceTypeSpec
from warmswarm_simulator.machines import OSPARC_PRE_PULLED_IMAGES_TAG, OSPARC_WARM_BUFFER_TAG
from warmswarm_simulator.platform import SESSION_LABEL
from warmswarm_simulator.simports import SimEc2, SimSwarmPort
from warmswarm_simulator.world import World

_NO_SUITABLE_NODE = "no suitable node"
# First fit's order over what the cluster has (osparc's _assign_tasks_to_current_cluster).
_ACTIVE, _DRAINED, _HOT, _STARTING, _WARM = range(5)


@dataclass(slots=True)
class _Slot:
    room: Resources
    node: Node | None = None
    instance: Instance | None = None
    session: str | None = None  # the session it is pinned to (one machine per session), None when shared
    drained: bool = False
    planned_type: str = ""  # a machine this cycle decides to launch
    order: int = _ACTIVE  # where first fit tries it
    warm: bool = False  # a stopped warm buffer nobody claimed yet: any session may take it
    tasks: list[Task] = field(default_factory=list)  # what a warm buffer was claimed for (new machines if it fails)
    for_hot_buffer: bool = False  # a planned machine that refills the hot buffer


class Baseline(OsparcBuffers):
    def __init__(
        self,
        world: World,
        types: dict[str, InstanceTypeSpec],
        zones: tuple[str, ...],
        ec2: SimEc2,
        swarm: SimSwarmPort,
        settings: BaselineSettings,
        max_instances: int,
    ) -> None:
        self._world = world
        self._types = types
        self._zones = zones
        self._ec2 = ec2
        self._swarm = swarm
        self.settings = settings
        self._max_instances = max_instances
        self._marks = NodeMarks()
        self._launched_for: dict[str, str] = {}  # instance id -> the session it was launched for
        # Per type, in the model's order (osparc walks EC2_INSTANCES_ALLOWED_TYPES in order): the buffers' sizes.
        self._hot_targets = targets("hot_buffers", settings.hot_buffers, types)
        self._warm_targets = targets("warm_buffers", settings.warm_buffers, types)
        self._for_hot_buffer: set[str] = set()  # machines launched or started for the hot buffer, not drained yet
        self._pre_pulled: set[str] = set()  # instances whose pre-pull was sent (osparc's pre_pulled_images tag)
        # Warm buffers started, by the day s of their StartInstances: out of the pool for good. AWS's LaunchTime
        # is the last start, which the modelled instance does not show: the never-joined clock starts here.
        self._started_at: dict[str, float] = {}
        self.cycles = 0
        self.failed_cycles = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.cycle()
            except PortError:
                self.failed_cycles += 1  # a throttled read: nothing is done this cycle, the next one retries
            self.cycles += 1
            await asyncio.sleep(self.settings.poll_interval_s)

    async def cycle(self) -> None:
        now_s = self._world.now_s
        nodes = await self._swarm.list_nodes()
        tasks = await self._swarm.list_tasks()
        instances: list[Instance] = []
        for _ in range(self.settings.describe_calls_per_cycle):
            instances = await self._ec2.list_instances(CLUSTER)
        # The warm pool is not the cluster's (osparc lists it under its own tags): not starting, not counted.
        pool = [i for i in instances if self._in_warm_pool(i)]
        live = [i for i in instances if i.is_live and not self._in_warm_pool(i)]
        by_addr = {i.private_ip: i for i in live}
        ours = {n.id: n for n in nodes if n.addr in by_addr}
        joined = {by_addr[n.addr].id for n in ours.values()}
        used = used_by_node(tasks)
        await self._drain_joined_for_hot_buffer(now_s, ours, by_addr, used)
        self._forget_hot_buffer_launches(live, ours, by_addr, used)
        hot = self._hot_buffer_nodes(ours, by_addr)
        self._mark_members(hot, ours, by_addr)
        await self._label_new(ours.values(), by_addr, tasks)
        claimed = await self._scale_up(now_s, ours, by_addr, live, joined, tasks, used, hot, pool)
        await self._pre_pull([n for n in ours.values() if n.id in hot and n.id not in claimed], by_addr)
        await self._terminate_never_joined(now_s, live, joined)
        await self._scale_down(now_s, ours, by_addr, used, claimed, nodes, hot)
        await self._keep_warm_pool(pool)

    async def _label_new(self, ours: Iterable[Node], by_addr: dict[str, Instance], tasks: list[Task]) -> None:
        if self.settings.share_machines:
            return
        waiting = {session_of(t) for t in tasks if t.state == "pending"}
        for node in ours:
            session = self._launched_for.get(by_addr[node.addr].id)
            if session is not None and SESSION_LABEL not in node.labels and session in waiting:
                await self._swarm.update_node(node.id, labels={SESSION_LABEL: session})

    async def _scale_up(
        self,
        now_s: float,
        ours: dict[str, Node],
        by_addr: dict[str, Instance],
        live: list[Instance],
        joined: set[str],
        tasks: list[Task],
        used: dict[str, Resources],
        hot: set[str],
        pool: list[Instance],
    ) -> set[str]:
        shared = self.settings.share_machines
        slots: list[_Slot] = []
        for node in ours.values():
            if node.state != "ready" or node.id in self._marks.terminating_at:
                continue
            instance = by_addr[node.addr]
            room = machine_room(self._types[instance.instance_type], self.settings).minus(
                used.get(node.id, Resources())
            )
            drained = node.availability != "active"
            # A node that joined this cycle is labelled for its session above, after this snapshot was read.
            session = None if shared or drained else node.labels.get(SESSION_LABEL, self._launched_for.get(instance.id))
            order = (_HOT if node.id in hot else _DRAINED) if drained else _ACTIVE
            slots.append(_Slot(room, node=node, session=session, drained=drained, order=order))
        for instance in live:
            if instance.id not in joined:
                session = None if shared else self._launched_for.get(instance.id)
                room = machine_room(self._types[instance.instance_type], self.settings)
                slots.append(_Slot(room, instance=instance, session=session, order=_STARTING))
        for instance in pool:  # osparc lists the pool's stopped machines only
            if instance.state == "stopped" and OSPARC_PRE_PULLED_IMAGES_TAG in instance.tags:
                room = machine_room(self._types[instance.instance_type], self.settings)
                slots.append(_Slot(room, instance=instance, order=_WARM, warm=True))
        # Active nodes, drained nodes, hot-buffer nodes, starting machines, stopped warm buffers (a stable sort).
        slots.sort(key=lambda s: s.order)
        pending = [t for t in tasks if t.state == "pending" and _NO_SUITABLE_NODE in t.err and t.node_id is None]
        planned: list[_Slot] = []
        claimed: set[str] = set()
        to_start: list[_Slot] = []

        def plan(task: Task, session: str | None) -> None:
            name = best_fit(task.reservations, self._types.values(), self.settings)
            if name is None or len(live) + len(planned) >= self._max_instances:
                return
            room = machine_room(self._types[name], self.settings).minus(task.reservations)
            planned.append(_Slot(room, session=session, planned_type=name))

        for task in pending:  # in creation order: oldest first
            session = session_of(task)
            slot = next((s for s in slots if _fits(s, task, session, shared)), None)
            if slot is None and shared:
                slot = next((s for s in planned if task.reservations.fits_in(s.room)), None)
            if slot is None:
                plan(task, session)
                continue
            slot.room = slot.room.minus(task.reservations)
            if slot.drained and slot.node is not None:
                slot.drained, slot.session = False, session
                claimed.add(slot.node.id)
                self._marks.clear(slot.node.id)
                labels = {SESSION_LABEL: session} if session is not None else None
                await self._swarm.update_node(slot.node.id, labels=labels, availability="active")
                self._claimed(by_addr[slot.node.addr])
            elif slot.warm or slot.tasks:
                if slot.warm:
                    slot.warm, slot.session = False, session
                    to_start.append(slot)
                slot.tasks.append(task)
        for slot in to_start:
            assert slot.instance is not None
            if not await self._start_warm(slot.instance, slot.session):
                for task in slot.tasks:  # osparc's _de_assign_tasks_from_warm_buffer_ec2s: to new machines
                    plan(task, session_of(task))
        await self._refill_hot_buffer(ours, by_addr, live, hot - claimed, slots, planned)
        await self._launch(planned)
        return claimed

    async def _start_warm(self, instance: Instance, session: str | None) -> bool:
        """StartInstances for one warm buffer (one call each: a refusal for one type and zone then leaves the
        others started); activated by its tag, as osparc tags it once started."""
        try:
            await self._ec2.start_instances([instance.id])
        except PortError:
            return False  # no capacity for its type in its zone now (or throttled): it stays in the pool
        self._started_at[instance.id] = self._world.now_s
        if session is not None:
            self._launched_for[instance.id] = session
            # A session's from now on (started for the hot buffer, it is still a buffer's).
            self._ec2.mark_for_meter(instance.id, buffer_member=False)
        with contextlib.suppress(PortError):  # the tag is for the console and a next process: this one knows
            await self._ec2.tag_instance(instance.id, {OSPARC_WARM_BUFFER_TAG: "false"})
        return True

    async def _refill_hot_buffer(
        self,
        ours: dict[str, Node],
        by_addr: dict[str, Instance],
        live: list[Instance],
        hot: set[str],
        slots: list[_Slot],
        planned: list[_Slot],
    ) -> None:
        """osparc's _compute_hot_buffer_missing: per type, its count less the hot-buffer nodes and the machines
        coming for it; free warm buffers of the type are started for it first, then machines launched."""
        have = Counter(by_addr[ours[n].addr].instance_type for n in hot)
        have.update(i.instance_type for i in live if i.id in self._for_hot_buffer)
        for name, target in self._hot_targets.items():
            missing = target - have[name]
            for slot in slots:
                if missing <= 0:
                    break
                if slot.warm and slot.instance is not None and slot.instance.instance_type == name:
                    slot.warm = False
                    if await self._start_warm(slot.instance, None):
                        self._for_hot_buffer.add(slot.instance.id)
                        missing -= 1
            for _ in range(missing):
                if len(live) + len(planned) >= self._max_instances:
                    return
                room = machine_room(self._types[name], self.settings)
                planned.append(_Slot(room, planned_type=name, for_hot_buffer=True))

    async def _launch(self, planned: list[_Slot]) -> None:
        by_type: dict[tuple[str, bool], list[_Slot]] = {}
        for slot in planned:  # a buffer's refill apart: its machines carry the meter's buffer mark
            by_type.setdefault((slot.planned_type, slot.for_hot_buffer), []).append(slot)
        for (name, for_buffer), batch in by_type.items():
            tags = {CLUSTER_TAG: CLUSTER, BUFFER_MEMBER_TAG: "true"} if for_buffer else {CLUSTER_TAG: CLUSTER}
            made = await self._run_batch(name, len(batch), tags)
            for instance_id, slot in zip(made, batch, strict=False):
                if slot.session is not None:
                    self._launched_for[instance_id] = slot.session
                if slot.for_hot_buffer:
                    self._for_hot_buffer.add(instance_id)

    async def _terminate_never_joined(self, now_s: float, live: list[Instance], joined: set[str]) -> None:
        late = [
            i.id
            for i in live
            if i.id not in joined
            and now_s - self._started_at.get(i.id, self._world.to_day_s(i.launched_at)) >= self.settings.max_start_s
        ]
        if late:
            await self._ec2.terminate_instances(late)

    async def _scale_down(
        self,
        now_s: float,
        ours: dict[str, Node],
        by_addr: dict[str, Instance],
        used: dict[str, Resources],
        claimed: set[str],
        nodes: list[Node],
        hot: set[str],
    ) -> None:
        s, marks = self.settings, self._marks
        for node in ours.values():
            if node.state != "ready":
                continue
            if node.id in used or node.id in claimed:
                marks.clear(node.id)
                continue
            if node.availability == "active":
                since_s = marks.empty_since.setdefault(node.id, now_s)
                if now_s - since_s >= s.empty_to_drain_s:
                    await self._swarm.update_node(node.id, availability="drain")
                    await self._swarm.remove_labels(node.id, (SESSION_LABEL,))
                    marks.drained_at[node.id] = now_s
                continue
            drained_s = marks.drained_at.setdefault(node.id, now_s)
            if node.id in hot:
                continue  # the hot buffer: out of the termination flow while it is the buffer
            terminating_s = marks.terminating_at.get(node.id)
            if terminating_s is None and now_s - drained_s >= s.drained_to_terminating_s:
                marks.terminating_at[node.id] = now_s
            elif terminating_s is not None and now_s - terminating_s >= s.terminating_to_terminated_s:
                await self._ec2.terminate_instances([by_addr[node.addr].id])
                await self._swarm.remove_node(node.id)
                marks.clear(node.id)
        for node in nodes:  # nodes whose machine is gone: removed from the swarm
            if node.state == "down" and node.addr not in by_addr and node.engine_instance_id is not None:
                await self._swarm.remove_node(node.id)


def _fits(slot: _Slot, task: Task, session: str | None, shared: bool) -> bool:
    if not task.reservations.fits_in(slot.room):
        return False
    if shared:
        return True
    # One machine per session: its own node or machine, or a drained node (hot buffer or not) that is relabelled
    # for it, or a warm buffer started for it.
    return slot.session == session or (slot.drained and slot.node is not None) or slot.warm
