"""The osparc-like baseline, as shared/notes/osparc-baseline.md documents that service: its own small autoscaler.

A cycle, then a fixed poll_interval_s sleep. Pending tasks the scheduler could not place ("no suitable node"),
oldest first, are matched first-fit to room on active nodes, then drained nodes (reactivated), then machines still
starting; what is left gets new machines of the best-fitting type by 100 x (cpu_req/cpu) x (mem_req/mem) over the
machine's room (vCPUs - 1.4, at least 0.5; memory x 0.9 - 1 GiB), price never used, one RunInstances per type batch,
nothing launched at max_instances. An empty node is drained after 10 s, termination starts 60 s after the drain and
ends 30 s later; a machine that never joins is terminated after max_start_s. No data is cached: every session
downloads its data (the platform does that). One machine per session unless share_machines is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from warmswarm_autoscaling.ports import PortError
from warmswarm_autoscaling.snapshot import Instance, Node, Task
from warmswarm_models import CLUSTER_TAG, GPU, Resources

from warmswarm_simulator.config import GIB, InstanceTypeSpec, PlatformOverhead
from warmswarm_simulator.platform import SESSION_LABEL
from warmswarm_simulator.simports import SimEc2, SimSwarmPort
from warmswarm_simulator.world import World

CLUSTER = "osparc"
_NO_SUITABLE_NODE = "no suitable node"


@dataclass(frozen=True, slots=True)
class BaselineSettings:
    poll_interval_s: float = 10.0
    cpu_reserved: float = 1.4
    cpu_min_room: float = 0.5
    memory_share: float = 0.9
    memory_reserved_gib: float = 1.0
    empty_to_drain_s: float = 10.0
    drained_to_terminating_s: float = 60.0
    terminating_to_terminated_s: float = 30.0
    max_start_s: float = 600.0
    describe_calls_per_cycle: int = 4
    share_machines: bool = False


@dataclass(slots=True)
class _Slot:
    room: Resources
    node: Node | None = None
    instance: Instance | None = None
    session: str | None = None  # the session it is pinned to (one machine per session), None when shared
    drained: bool = False
    planned_type: str = ""  # a machine this cycle decides to launch


@dataclass(slots=True)
class _Marks:
    """What osparc keeps as node labels between cycles: when a node became empty, was drained, started terminating."""

    empty_since: dict[str, float] = field(default_factory=dict)
    drained_at: dict[str, float] = field(default_factory=dict)
    terminating_at: dict[str, float] = field(default_factory=dict)

    def clear(self, node_id: str) -> None:
        for marks in (self.empty_since, self.drained_at, self.terminating_at):
            marks.pop(node_id, None)


def platform_room(platform: PlatformOverhead) -> dict[str, float]:
    """The baseline's room knobs for the platform's own overhead, the same room every policy keeps: the type's vCPUs
    and memory less the overhead. osparc's code default (1.4 vCPU, memory x 0.9 - 1 GiB: BaselineSettings' defaults)
    is its sidecar's margin, a sensitivity row."""
    return {
        "cpu_reserved": platform.overhead_cpus,
        "memory_share": 1.0,
        "memory_reserved_gib": platform.overhead_memory_gib,
    }


def machine_room(spec: InstanceTypeSpec, settings: BaselineSettings) -> Resources:
    cpus = max(spec.vcpus - settings.cpu_reserved, settings.cpu_min_room)
    memory = max(0, int(spec.memory_gib * GIB * settings.memory_share - settings.memory_reserved_gib * GIB))
    return Resources(cpus, memory, {GPU: spec.gpus} if spec.gpus else {})


def best_fit(demand: Resources, types: Iterable[InstanceTypeSpec], settings: BaselineSettings) -> str | None:
    """osparc's closest_instance_policy over each type's room; the first type wins a tie. GPU types are offered only
    to work that asks for a GPU (an operator would not list them for the rest)."""
    best, best_score = None, 0.0
    for spec in types:
        if bool(spec.gpus) != bool(demand.gpus):
            continue
        room = machine_room(spec, settings)
        if not demand.fits_in(room):
            continue
        score = 100.0 * (demand.cpus / room.cpus) * (demand.memory_bytes / max(room.memory_bytes, 1))
        if best is None or score > best_score:
            best, best_score = spec.name, score
    return best


def session_of(task: Task) -> str | None:
    label = "node.labels." + SESSION_LABEL
    return next((c.value for c in task.constraints if c.key == label and c.op == "=="), None)


class Baseline:
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
        self._marks = _Marks()
        self._launched_for: dict[str, str] = {}  # instance id -> the session it was launched for
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
        live = [i for i in instances if i.is_live]
        by_addr = {i.private_ip: i for i in live}
        ours = {n.id: n for n in nodes if n.addr in by_addr}
        joined = {by_addr[n.addr].id for n in ours.values()}
        used = _used_by_node(tasks)
        await self._label_new(ours.values(), by_addr, tasks)
        claimed = await self._scale_up(now_s, ours, by_addr, live, joined, tasks, used)
        await self._terminate_never_joined(now_s, live, joined)
        await self._scale_down(now_s, ours, by_addr, used, claimed, nodes)

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
            slots.append(_Slot(room, node=node, session=session, drained=drained))
        for instance in live:
            if instance.id not in joined:
                session = None if shared else self._launched_for.get(instance.id)
                room = machine_room(self._types[instance.instance_type], self.settings)
                slots.append(_Slot(room, instance=instance, session=session))
        slots.sort(key=lambda s: (s.node is None, s.drained))  # active nodes, drained nodes, starting machines
        pending = [t for t in tasks if t.state == "pending" and _NO_SUITABLE_NODE in t.err and t.node_id is None]
        planned: list[_Slot] = []
        claimed: set[str] = set()
        for task in pending:  # in creation order: oldest first
            session = session_of(task)
            slot = next((s for s in slots if _fits(s, task, session, shared)), None)
            if slot is None and shared:
                slot = next((s for s in planned if task.reservations.fits_in(s.room)), None)
            if slot is not None:
                slot.room = slot.room.minus(task.reservations)
                if slot.drained and slot.node is not None:
                    slot.drained, slot.session = False, session
                    claimed.add(slot.node.id)
                    self._marks.clear(slot.node.id)
                    labels = {SESSION_LABEL: session} if session is not None else None
                    await self._swarm.update_node(slot.node.id, labels=labels, availability="active")
                continue
            name = best_fit(task.reservations, self._types.values(), self.settings)
            if name is None or len(live) + len(planned) >= self._max_instances:
                continue
            room = machine_room(self._types[name], self.settings).minus(task.reservations)
            planned.append(_Slot(room, session=session, planned_type=name))
        await self._launch(planned)
        return claimed

    async def _launch(self, planned: list[_Slot]) -> None:
        by_type: dict[str, list[_Slot]] = {}
        for slot in planned:
            by_type.setdefault(slot.planned_type, []).append(slot)
        for name, batch in by_type.items():
            for zone in self._zones:  # a zone out of capacity for this type: the next one
                try:
                    made = await self._ec2.run_batch(name, zone, len(batch), {CLUSTER_TAG: CLUSTER})
                except PortError as error:
                    if "InsufficientInstanceCapacity" in str(error):
                        continue
                    break  # throttled or refused: the next cycle plans again
                for instance_id, slot in zip(made, batch, strict=True):
                    if slot.session is not None:
                        self._launched_for[instance_id] = slot.session
                break

    async def _terminate_never_joined(self, now_s: float, live: list[Instance], joined: set[str]) -> None:
        late = [
            i.id
            for i in live
            if i.id not in joined and now_s - self._world.to_day_s(i.launched_at) >= self.settings.max_start_s
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
    # One machine per session: its own node or machine, or a drained node that is relabelled for it.
    return slot.session == session or (slot.drained and slot.node is not None)


def _used_by_node(tasks: list[Task]) -> dict[str, Resources]:
    used: dict[str, Resources] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active:
            used[task.node_id] = used.get(task.node_id, Resources()) + task.reservations
    return used
