"""The modelled swarm: nodes that join and leave, one task per service, and a scheduler with swarm's rules.

A task stays "pending" until a ready, active node meets its constraints and has room for its reservations; once
the scheduler has tried it and found none its Status.Err says "no suitable node (...)". Placed, it pulls its
image if the node has not got it (or waits for a pull already under way there, a pre-pull's too), starts, and runs
(a pull that fails, on a node in `failing_pulls`, rejects the task and its service gets a new one). Draining, losing
or removing a node stops its tasks and their services get new pending tasks, as swarm's orchestrator does. Node and
service changes are events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from warmswarm_models import Resources

from warmswarm_simulator.config import SwarmTiming
from warmswarm_simulator.swarm_values import SimNode, SimService, SimTask
from warmswarm_simulator.world import World

NO_SUITABLE_NODE = "no suitable node"


class Swarm:
    def __init__(self, world: World, timing: SwarmTiming) -> None:
        self._world = world
        self._timing = timing
        self.nodes: dict[str, SimNode] = {}
        self.services: dict[str, SimService] = {}
        self.tasks: dict[str, SimTask] = {}  # tasks not yet finished, in creation order
        self._next = 0
        self._subscribers: list[asyncio.Queue[str]] = []
        self._scheduling: asyncio.TimerHandle | None = None
        self.interruptions = 0
        # Nodes whose image pulls fail for now (the fault campaign sets it; a day never does).
        self.failing_pulls: set[str] = set()

    def _id(self, prefix: str) -> str:
        self._next += 1
        return f"{prefix}{self._next:08d}"

    # -- events ------------------------------------------------------------------------------------------------

    def subscribe(self) -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._subscribers.append(queue)
        return queue

    def _emit(self, kind: str) -> None:
        for queue in self._subscribers:
            queue.put_nowait(kind)

    # -- services (the director's side) ------------------------------------------------------------------------

    def create_service(
        self,
        name: str,
        labels: Mapping[str, str],
        constraints: tuple[str, ...],
        reservations: Resources,
        image: str,
        on_running: Callable[[str], None],
        on_interrupted: Callable[[], None],
    ) -> str:
        service = SimService(
            self._id("svc"), name, dict(labels), constraints, reservations, image, on_running, on_interrupted
        )
        self.services[service.id] = service
        self._new_task(service)
        self._emit("service")
        return service.id

    def remove_service(self, service_id: str) -> None:
        service = self.services.pop(service_id, None)
        if service is None:
            return
        if service.task_id is not None:
            self._finish(self.tasks[service.task_id], "shutdown")
        self._emit("service")
        self._schedule_soon()

    def _new_task(self, service: SimService) -> None:
        task = SimTask(self._id("task"), service, self._world.now_s)
        self.tasks[task.id] = task
        service.task_id = task.id
        self._schedule_soon()

    def _finish(self, task: SimTask, state: str) -> None:
        """The task is over (its service removed, or its node drained, down or gone): its room is freed."""
        if task.node_id is not None:
            node = self.nodes.get(task.node_id)
            if node is not None and task.id in node.tasks:
                del node.tasks[task.id]
                node.reserved = node.reserved.minus(task.service.reservations)
        task.desired_state = "shutdown"
        task.set(state)
        self.tasks.pop(task.id, None)

    def _replace(self, task: SimTask, state: str) -> None:
        """Swarm's orchestrator: a task stopped under a live service is replaced by a new pending one."""
        was_running = task.state == "running"
        self._finish(task, state)
        service = task.service
        if service.id in self.services and service.task_id == task.id:
            if was_running:
                self.interruptions += 1
                service.on_interrupted()
            self._new_task(service)

    # -- nodes -------------------------------------------------------------------------------------------------

    def join(
        self,
        instance_id: str,
        addr: str,
        resources: Resources,
        engine_labels: Mapping[str, str],
        availability: str,
    ) -> str:
        node_id = self._id("node")
        hostname = "ip-" + addr.replace(".", "-")
        self.nodes[node_id] = SimNode(node_id, hostname, addr, instance_id, resources, availability)
        self.nodes[node_id].engine_labels = dict(engine_labels)
        self.nodes[node_id].up_since_s = self._world.now_s
        self._emit("node")
        self._schedule_soon()
        return node_id

    def node_back(self, node_id: str, engine_labels: Mapping[str, str]) -> None:
        """A machine that was stopped is back: the same node, its labels kept, engine labels from this boot."""
        node = self.nodes.get(node_id)
        if node is None:
            return
        node.state = "ready"
        node.engine_labels = dict(engine_labels)
        node.up_since_s = self._world.now_s
        node.changed()
        self._emit("node")
        self._schedule_soon()

    def engine_labels_reloaded(self, node_id: str, engine_labels: Mapping[str, str]) -> None:
        """A running node's daemon reloaded its labels (SIGHUP): the manager sees the new ones."""
        node = self.nodes.get(node_id)
        if node is None or node.state != "ready":
            return
        node.engine_labels = dict(engine_labels)
        node.changed()
        self._emit("node")
        self._schedule_soon()

    def node_lost(self, node_id: str) -> None:
        node = self.nodes.get(node_id)
        if node is None or node.state == "down":
            return
        node.state = "down"
        node.changed()
        self._stop_tasks_on(node, "orphaned")
        self._emit("node")

    def update_node(
        self,
        node_id: str,
        labels: Mapping[str, str] | None,
        availability: str | None,
        *,
        remove_labels: tuple[str, ...] = (),
    ) -> bool:
        """Remove the keys `remove_labels` names (absent ones are no error), merge labels, set availability: one
        update and one event, as Docker writes one spec. False (and no event) when nothing changes. Unknown node:
        KeyError."""
        node = self.nodes[node_id]
        new_labels = {key: value for key, value in node.labels.items() if key not in remove_labels}
        new_labels.update(labels or {})
        new_availability = availability or node.availability
        if new_labels == node.labels and new_availability == node.availability:
            return False
        node.labels = new_labels
        node.availability = new_availability
        node.changed()
        if new_availability == "drain":
            self._stop_tasks_on(node, "shutdown")
        self._emit("node")
        self._schedule_soon()
        return True

    def remove_labels(self, node_id: str, keys: tuple[str, ...]) -> None:
        node = self.nodes[node_id]
        if any(k in node.labels for k in keys):
            node.labels = {k: v for k, v in node.labels.items() if k not in keys}
            node.changed()
            self._emit("node")

    def remove_node(self, node_id: str) -> None:
        node = self.nodes.pop(node_id, None)
        if node is not None:
            self._stop_tasks_on(node, "orphaned")
            self._emit("node")

    def _stop_tasks_on(self, node: SimNode, state: str) -> None:
        for task_id in list(node.tasks):
            task = self.tasks.get(task_id)
            if task is not None:
                self._replace(task, state)

    def pre_pull(self, node_id: str, images: tuple[str, ...]) -> None:
        """The node's daemon pulls `images` with no task asking (osparc's SSM pull on a hot buffer): each is there
        image_pull_s later; a task placed meanwhile waits for the same pull, not a second one."""
        node = self.nodes.get(node_id)
        if node is None or node.state != "ready":
            return
        for image in images:
            if image in node.images or image in node.pulls:
                continue
            end_s = node.pulls[image] = self._world.now_s + self._timing.image_pull_s
            self._world.at(end_s, self._pre_pulled, node, image, end_s)

    def _pre_pulled(self, node: SimNode, image: str, end_s: float) -> None:
        if self.nodes.get(node.id) is not node or node.pulls.get(image) != end_s:
            return  # removed, or a task's start already ended this pull
        del node.pulls[image]
        if node.state == "ready" and node.id not in self.failing_pulls:
            node.images.add(image)

    # -- the scheduler -----------------------------------------------------------------------------------------

    def _schedule_soon(self) -> None:
        if self._scheduling is None:
            self._scheduling = self._world.after(self._timing.scheduler_delay_s, self._schedule)

    def _schedule(self) -> None:
        self._scheduling = None
        candidates = [n for n in self.nodes.values() if n.state == "ready" and n.availability == "active"]
        unavailable = len(self.nodes) - len(candidates)
        # Nodes by the value of a label, built once per pass for the labels pending tasks pin: an owner's task
        # is only ever tried on its owner's nodes, as swarm's constraint filter would leave it.
        index: dict[str, dict[str, list[SimNode]]] = {}
        for task in [t for t in self.tasks.values() if t.state == "pending"]:
            chosen, unmet, short = _choose_node(task, candidates, index)
            if chosen is not None:
                self._assign(task, chosen)
                continue
            err = _no_suitable_node(unavailable, unmet, short)
            if task.err != err:
                task.set("pending", err=err)

    def _assign(self, task: SimTask, node: SimNode) -> None:
        node.tasks[task.id] = None
        node.reserved = node.reserved + task.service.reservations
        image = task.service.image
        now_s = self._world.now_s
        ready_s = now_s if image in node.images else node.pulls.setdefault(image, now_s + self._timing.image_pull_s)
        task.assigned_s, task.image_ready_s = now_s, ready_s
        task.set("preparing" if ready_s > now_s else "starting", node_id=node.id)
        self._world.at(ready_s + self._timing.container_start_s, self._started, task, task.generation, image)

    def _started(self, task: SimTask, generation: int, image: str) -> None:
        if task.generation != generation or task.id not in self.tasks or task.node_id is None:
            return
        node = self.nodes[task.node_id]
        if image not in node.images and node.id in self.failing_pulls:
            # The pull failed (the registry refused it): swarm rejects the task and its service gets a new one.
            node.pulls.pop(image, None)
            self._replace(task, "rejected")
            return
        node.images.add(image)
        node.pulls.pop(image, None)
        task.set("running")
        task.service.on_running(node.id)


def _choose_node(
    task: SimTask, candidates: list[SimNode], index: dict[str, dict[str, list[SimNode]]]
) -> tuple[SimNode | None, int, int]:
    """Swarm's filters for one pending task: its constraints, then room; spread over the nodes left. Also the
    counts of nodes whose constraints failed and of nodes short of room, which its Status.Err reports.

    `index` (nodes by the value of a label, filled as pinned labels are met) is shared by one scheduling pass.
    """
    pool = candidates
    pinned = task.service.pinned_label
    if pinned is not None:
        label, value = pinned
        by_value = index.get(label)
        if by_value is None:
            by_value = index[label] = {}
            for node in candidates:
                if label in node.labels:
                    by_value.setdefault(node.labels[label].casefold(), []).append(node)
        pool = by_value.get(value.casefold(), [])
    unmet, short = len(candidates) - len(pool), 0
    chosen: SimNode | None = None
    for node in pool:
        if not all(c.holds(node.attributes()) for c in task.service.constraints):
            unmet += 1
        elif not task.service.reservations.fits_in(node.room):
            short += 1
        elif chosen is None or len(node.tasks) < len(chosen.tasks):
            chosen = node  # spread: the eligible node with the fewest tasks, the first on a tie
    return chosen, unmet, short


def _no_suitable_node(unavailable: int, unmet: int, short: int) -> str:
    reasons = []
    if unavailable:
        reasons.append(f"{unavailable} node{'s' if unavailable > 1 else ''} not available for new tasks")
    if unmet:
        reasons.append(f"scheduling constraints not satisfied on {unmet} node{'s' if unmet > 1 else ''}")
    if short:
        reasons.append(f"insufficient resources on {short} node{'s' if short > 1 else ''}")
    return f"{NO_SUITABLE_NODE} ({'; '.join(reasons)})" if reasons else NO_SUITABLE_NODE
