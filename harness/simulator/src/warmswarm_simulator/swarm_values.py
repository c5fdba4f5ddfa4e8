"""The modelled swarm's mutable records (nodes, services, tasks), with the typed views the autoscaler reads (built
with its own readings.py, as its swarm adapter builds them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from warmswarm_autoscaling.readings import read_node, read_task
from warmswarm_autoscaling.snapshot import Node, Task
from warmswarm_models import Resources
from warmswarm_models.constraint import LABEL_PREFIX, Constraint

# Swarm task states in which a task holds its node's resources (assigned and on).
HOLDING_STATES = frozenset({"assigned", "accepted", "preparing", "starting", "running"})


@dataclass(slots=True)
class SimNode:
    id: str
    hostname: str
    addr: str
    instance_id: str
    resources: Resources
    availability: str
    state: str = "ready"
    labels: dict[str, str] = field(default_factory=dict)
    engine_labels: dict[str, str] = field(default_factory=dict)
    images: set[str] = field(default_factory=set)
    pulls: dict[str, float] = field(default_factory=dict)  # image -> day s its pull ends
    tasks: dict[str, None] = field(default_factory=dict)  # ids of the tasks holding room here, in order
    reserved: Resources = field(default_factory=Resources)
    up_since_s: float = 0.0  # day s it joined, or came back from a stop (the phases of a wait start from it)
    _value: Node | None = None
    _attributes: dict[str, str] | None = None

    def changed(self) -> None:
        self._value = None
        self._attributes = None

    def value(self) -> Node:
        if self._value is None:
            self._value = read_node(
                id=self.id,
                hostname=self.hostname,
                state=self.state,
                availability=self.availability,
                role="worker",
                resources=self.resources,
                labels=self.labels,
                engine_labels=self.engine_labels,
                addr=self.addr,
            )
        return self._value

    def attributes(self) -> dict[str, str]:
        """What swarm's placement constraints test: node id, hostname, role, platform and labels."""
        if self._attributes is None:
            attributes = {
                "node.id": self.id,
                "node.hostname": self.hostname,
                "node.role": "worker",
                "node.platform.os": "linux",
                "node.platform.arch": "x86_64",
            }
            attributes.update({LABEL_PREFIX + k: v for k, v in self.labels.items()})
            self._attributes = attributes
        return self._attributes

    @property
    def room(self) -> Resources:
        return self.resources.minus(self.reserved)


@dataclass(slots=True)
class SimService:
    id: str
    name: str
    labels: dict[str, str]
    constraint_texts: tuple[str, ...]
    reservations: Resources
    image: str
    # The platform's hooks: the task runs on a node (node id), or an earlier running task was stopped.
    on_running: Callable[[str], None]
    on_interrupted: Callable[[], None]
    constraints: tuple[Constraint, ...] = ()
    # A node label (name, value) the constraints require, used to look up candidate nodes; None without one.
    pinned_label: tuple[str, str] | None = None
    task_id: str | None = None

    def __post_init__(self) -> None:
        self.constraints = tuple(Constraint.parse(text) for text in self.constraint_texts)
        pinned = next((c for c in self.constraints if c.op == "==" and c.label is not None), None)
        if pinned is not None and pinned.label is not None:
            self.pinned_label = (pinned.label, pinned.value)


@dataclass(slots=True)
class SimTask:
    id: str
    service: SimService
    created_s: float
    state: str = "pending"
    desired_state: str = "running"
    node_id: str | None = None
    err: str = ""
    generation: int = 0
    assigned_s: float | None = None  # day s the scheduler put it on a node
    image_ready_s: float | None = None  # day s its image was on that node (its pull's end, or assigned_s)
    _value: Task | None = None

    def set(self, state: str, *, node_id: str | None = None, err: str = "") -> None:
        self.state = state
        self.node_id = node_id if node_id is not None else self.node_id
        self.err = err
        self.generation += 1
        self._value = None

    def value(self) -> Task:
        if self._value is None:
            self._value = read_task(
                id=self.id,
                service_id=self.service.id,
                service_name=self.service.name,
                state=self.state,
                desired_state=self.desired_state,
                reservations=self.service.reservations,
                constraints=self.service.constraint_texts,
                node_id=self.node_id,
                err=self.err,
                service_labels=self.service.labels,
                global_service=False,
            )
        return self._value
