"""The osparc-like baseline's rules, pure: its settings, a machine's room, the best-fitting type, a task's session, the
buffers' sizes per type and what each node's tasks use (baseline.py runs them, cycle by cycle)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warmswarm_autoscaling.snapshot import Task
from warmswarm_models import GPU, Resources

from warmswarm_simulator.config import GIB, InstanceTypeSpec, PlatformOverhead
from warmswarm_simulator.platform import SESSION_LABEL


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
    # instance type -> osparc's EC2_INSTANCES_ALLOWED_TYPES[<type>].hot_buffer_count: drained running machines,
    # images pre-pulled, kept for the next sessions; and -> .buffer_count: stopped machines with the images on disk.
    hot_buffers: Mapping[str, int] = field(default_factory=dict)
    warm_buffers: Mapping[str, int] = field(default_factory=dict)


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


def targets(name: str, counts: Mapping[str, int], types: Mapping[str, InstanceTypeSpec]) -> dict[str, int]:
    """A buffer's sizes by type, in the model's type order, the zero ones left out; a type the model lacks or a
    negative count is refused (a typo in policies.toml would otherwise be a buffer of nothing)."""
    unknown = sorted(set(counts) - set(types))
    if unknown:
        raise ValueError(f"{name}: no instance type(s) {unknown} in the model")
    if any(count < 0 for count in counts.values()):
        raise ValueError(f"{name}: a buffer's size is a count of machines, not {dict(counts)}")
    return {t: int(counts[t]) for t in types if counts.get(t, 0) > 0}


def used_by_node(tasks: list[Task]) -> dict[str, Resources]:
    used: dict[str, Resources] = {}
    for task in tasks:
        if task.node_id is not None and task.is_active:
            used[task.node_id] = used.get(task.node_id, Resources()) + task.reservations
    return used


@dataclass(slots=True)
class NodeMarks:
    """What osparc keeps as node labels between cycles: when a node became empty, was drained, started terminating."""

    empty_since: dict[str, float] = field(default_factory=dict)
    drained_at: dict[str, float] = field(default_factory=dict)
    terminating_at: dict[str, float] = field(default_factory=dict)

    def clear(self, node_id: str) -> None:
        for marks in (self.empty_since, self.drained_at, self.terminating_at):
            marks.pop(node_id, None)
