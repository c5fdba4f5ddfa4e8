"""Pure status decisions: from tasks, node and autoscaler view, whether a service is pending, starting or running."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_ID, NODE_LABEL_VOLUME_ID
from warmswarm_models.answers import ServiceState
from warmswarm_models.start import MachineFacts, StartPath

# Swarm task states in which the task has a node and is on its way to running there.
ON_NODE_STATES: Final = frozenset({"assigned", "accepted", "preparing", "ready", "starting"})
RUNNING: Final = "running"


@dataclass(frozen=True, slots=True)
class TaskView:
    id: str
    state: str
    node_id: str | None
    err: str | None
    message: str | None
    created_at: str  # RFC 3339 as Docker writes it; sorts in time order
    status_at_s: float | None = None  # epoch s: when the task reached its state (Status.Timestamp); None unknown


@dataclass(frozen=True, slots=True)
class Waiting:
    """One entry of the autoscaler's pending list: a task it sees waiting, and why."""

    task_id: str
    service: str
    reason: str
    starting: bool


@dataclass(frozen=True, slots=True)
class AutoscalerView:
    """What the autoscaler said, or why it said nothing (`problem`); `enabled` is False when none is configured."""

    enabled: bool
    waiting: Sequence[Waiting] = ()
    problem: str | None = None
    # The facts of each machine it lists, by instance id: what a session's start path is told from.
    machines: Mapping[str, MachineFacts] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Status:
    state: ServiceState
    reason: str | None
    node: str | None = None
    instance_id: str | None = None
    volume_id: str | None = None
    start_path: StartPath | None = None


def current_task(tasks: Sequence[TaskView]) -> TaskView | None:
    """The task that says most about the service: a running one, else one on a node, else the newest."""
    for wanted in ({RUNNING}, ON_NODE_STATES):
        for task in tasks:
            if task.state in wanted:
                return task
    return max(tasks, key=lambda t: t.created_at, default=None)


def needs_autoscaler(task: TaskView | None) -> bool:
    """Only a task without a node waits on the autoscaler; asking it about others would be a wasted call."""
    return task is None or (task.state != RUNNING and task.state not in ON_NODE_STATES)


def running_status(
    task: TaskView, node_labels: Mapping[str, str], engine_labels: Mapping[str, str], *, cache_enabled: bool
) -> Status:
    # The autoscaler writes the instance id onto the node once it has labelled it; until then the
    # daemon's own label (set at boot) is the same fact from an earlier moment.
    instance_id = node_labels.get(NODE_LABEL_INSTANCE_ID) or engine_labels.get(ENGINE_LABEL_INSTANCE_ID)
    volume_id = node_labels.get(NODE_LABEL_VOLUME_ID) if cache_enabled else None
    return Status("running", None, task.node_id, instance_id or None, volume_id or None)


def waiting_status(task: TaskView | None, service_name: str, autoscaler: AutoscalerView) -> Status:
    """Status of a service whose task is not running: starting on a node, or pending (with the best reason known)."""
    if task is not None and task.state in ON_NODE_STATES:
        detail = f": {task.message}" if task.message else ""
        return Status("starting", f"task is {task.state} on node {task.node_id}{detail}", task.node_id)
    wait = _find_wait(autoscaler.waiting, task, service_name)
    if wait is not None and wait.starting:
        return Status("starting", wait.reason)
    if wait is not None and wait.reason:
        return Status("pending", wait.reason)
    swarm_reason = _swarm_reason(task)
    if autoscaler.problem is not None:
        return Status("pending", f"{autoscaler.problem}; the swarm says: {swarm_reason}")
    return Status("pending", swarm_reason)


def _find_wait(waiting: Sequence[Waiting], task: TaskView | None, service_name: str) -> Waiting | None:
    # By task id first; the service name covers a task replaced since the autoscaler's last cycle.
    if task is not None:
        for wait in waiting:
            if wait.task_id == task.id:
                return wait
    for wait in waiting:
        if wait.service == service_name:
            return wait
    return None


def _swarm_reason(task: TaskView | None) -> str:
    if task is None:
        return "the swarm has not created a task for the service yet"
    if task.err:
        return task.err
    return f"task is {task.state or 'new'}" + (f": {task.message}" if task.message else "")
