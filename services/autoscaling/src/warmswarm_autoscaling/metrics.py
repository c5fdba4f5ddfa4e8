"""Prometheus metrics of the autoscaler, written by hand in the text exposition format 0.0.4.

Every label value comes from a small closed set (an unknown value becomes `other`), never from free text such
as a reason or an error message: those are in the log and in `/v1/status`.

| metric | type | labels | meaning |
|---|---|---|---|
| `warmswarm_nodes` | gauge | `state`, `availability` | All swarm nodes (managers too), as last observed. |
| `warmswarm_pending_tasks` | gauge | `unschedulable` | Tasks waiting for capacity, as last observed. |
| `warmswarm_volumes` | gauge | `state` | This cluster's EBS cache volumes, as last observed. |
| `warmswarm_launches_total` | counter | `reason` | Instances launched (RunInstances succeeded). |
| `warmswarm_terminations_total` | counter | `reason` | Instances terminated (TerminateInstances succeeded). |
| `warmswarm_actions_total` | counter | `action`, `outcome` | Actions applied; a dry run or a follower applies none. |
| `warmswarm_aws_calls_total` | counter | `operation`, `code` | EC2 API calls; each page of a paginated call is one. |
| `warmswarm_cycle_duration_seconds` | histogram | `le` | Wall time of a reconcile cycle (observe, plan, apply). |
| `warmswarm_cycles_total` | counter | `outcome` | Reconcile cycles; `error`: nothing was applied. |
| `warmswarm_last_success_timestamp_seconds` | gauge | | Start of the last successful cycle (epoch s); 0 before. |
| `warmswarm_leader` | gauge | | 1 while this replica is the leader (the one that acts), else 0. |
| `warmswarm_dry_run` | gauge | | 1 when `AUTOSCALING_DRY_RUN` is on: it observes and plans only. |

| label | values |
|---|---|
| `state` of nodes | `ready`, `down`, `unknown`, `disconnected`, `other` (swarm's node status) |
| `availability` | `active`, `pause`, `drain`, `other` |
| `unschedulable` | `true`: no launch can help, the request must change; `false`: waits for a machine |
| `state` of volumes | `creating`, `available`, `in-use`, `deleting`, `deleted`, `error`, `other` (EC2's) |
| `reason` of launches | `pending_work`: tasks wait and no node of their owner has room |
| `reason` of terminations | `idle`: drained, idle past `idle_grace_s`; `start_timeout`: not joined in `max_start_s`; |
| | `node_down`: its node lost the swarm (down) for `max_start_s` while the instance ran |
| `action` | `launch`, `label_node`, `drain`, `activate`, `terminate`, `remove_node`, `create_volume`, |
| | `attach_volume`, `detach_volume`, `tag_volume`, `delete_volume`, `expire_volume` (an operator's) |
| `outcome` | `ok`, `error` (for actions: the adapter call failed; for cycles: observation failed or a crash) |
| `operation` | the EC2 API name (`DescribeInstances`, `RunInstances`, `CreateTags`, ...) |
| `code` | `ok`, the AWS error code (`RequestLimitExceeded`, ...), `ConnectionError`, `other` |

Gauges are absent until the first successful cycle (unknown is not zero). Instances that are not this
cluster's are never terminated, so no reason exists for them. Counters start at 0 for every known label value
and restart with the process.
"""

from __future__ import annotations

import bisect
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final, Literal, Protocol, runtime_checkable

from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    LabelNode,
    Launch,
    RemoveNode,
    TagVolume,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.snapshot import Snapshot

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

LaunchReason = Literal["pending_work"]
TerminationReason = Literal["idle", "start_timeout", "node_down"]
Outcome = Literal["ok", "error"]

LAUNCH_REASONS: Final[tuple[LaunchReason, ...]] = ("pending_work",)
TERMINATION_REASONS: Final[tuple[TerminationReason, ...]] = ("idle", "start_timeout", "node_down")
OUTCOMES: Final[tuple[Outcome, ...]] = ("ok", "error")
# Not a planned action: an operator's POST /v1/volumes/{id}/expire.
EXPIRE_VOLUME: Final = "expire_volume"
_ACTION_KINDS: Final[Mapping[type, str]] = {
    Launch: "launch",
    LabelNode: "label_node",
    Drain: "drain",
    Activate: "activate",
    Terminate: "terminate",
    RemoveNode: "remove_node",
    CreateVolume: "create_volume",
    AttachVolume: "attach_volume",
    DetachVolume: "detach_volume",
    TagVolume: "tag_volume",
    DeleteVolume: "delete_volume",
}
ACTION_KINDS: Final[tuple[str, ...]] = (*_ACTION_KINDS.values(), EXPIRE_VOLUME)

NODE_STATES: Final = ("ready", "down", "unknown", "disconnected")
NODE_AVAILABILITIES: Final = ("active", "pause", "drain")
VOLUME_STATES: Final = ("creating", "available", "in-use", "deleting", "deleted", "error")
OTHER: Final = "other"

# A cycle is a few EC2 and Docker reads plus the actions' calls: tens of milliseconds in a
# quiet cluster, seconds when EC2 throttles or many machines start at once.
CYCLE_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# AWS error codes look like "InvalidVolume.NotFound"; anything else (a long exception text) is not a label value.
_CODE_PATTERN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,63}")


@runtime_checkable
class AwsCallCounts(Protocol):
    """An EC2 port that counts its calls: `call_counts[(operation, code)]`, code "ok" on success."""

    @property
    def call_counts(self) -> Mapping[tuple[str, str], int]: ...


def action_kind(action: Action) -> str:
    """The action's kind as a metric label and a log field: `launch`, `tag_volume`, ..."""
    return _ACTION_KINDS[type(action)]


class Metrics:
    """Counters the loop and the API add to; gauges are read from the last snapshot when scraped."""

    def __init__(self, *, aws_calls: AwsCallCounts | None = None, dry_run: bool = False) -> None:
        self._aws_calls = aws_calls
        self._dry_run = dry_run
        self._leader = True  # one replica, no election: it is the leader
        # Every known label value starts at 0, so rate() and alerts see a series before its first event.
        self._launches: Counter[str] = Counter(dict.fromkeys(LAUNCH_REASONS, 0))
        self._terminations: Counter[str] = Counter(dict.fromkeys(TERMINATION_REASONS, 0))
        self._actions: Counter[tuple[str, str]] = Counter(
            {(kind, outcome): 0 for kind in ACTION_KINDS for outcome in OUTCOMES}
        )
        self._cycles: Counter[str] = Counter(dict.fromkeys(OUTCOMES, 0))
        self._cycle_bucket_counts = [0] * (len(CYCLE_BUCKETS_S) + 1)  # the last one is +Inf
        self._cycle_sum_s = 0.0
        self._last_success_at = 0.0

    @property
    def leader(self) -> bool:
        return self._leader

    def set_leader(self, is_leader: bool) -> None:
        """For the leader election: only the leader applies actions and expires volumes."""
        self._leader = is_leader

    @property
    def dry_run(self) -> bool:
        return self._dry_run

    def record_cycle(self, duration_s: float, *, ok: bool, started_at: float | None = None) -> None:
        self._cycles["ok" if ok else "error"] += 1
        self._cycle_bucket_counts[bisect.bisect_left(CYCLE_BUCKETS_S, duration_s)] += 1
        self._cycle_sum_s += duration_s
        if ok and started_at is not None:
            self._last_success_at = started_at

    def record_crash(self) -> None:
        """A cycle that raised: counted, not timed (it may have died anywhere)."""
        self._cycles["error"] += 1

    def record_action(self, kind: str, *, ok: bool) -> None:
        self._actions[(kind, "ok" if ok else "error")] += 1

    def record_launch(self, reason: LaunchReason) -> None:
        self._launches[reason] += 1

    def record_termination(self, reason: TerminationReason) -> None:
        self._terminations[reason] += 1

    def exposition(self, snapshot: Snapshot | None, plan: Plan | None) -> str:
        """The text format 0.0.4 body of GET /metrics."""
        out: list[str] = []
        nodes: Counter[tuple[str, str]] = Counter()
        volumes: Counter[str] = Counter()
        pending: Counter[str] = Counter()
        if snapshot is not None:
            nodes.update(
                (_closed(n.state, NODE_STATES), _closed(n.availability, NODE_AVAILABILITIES)) for n in snapshot.nodes
            )
            volumes.update(_closed(v.state, VOLUME_STATES) for v in snapshot.volumes)
        if plan is not None:
            # Both values always, once known: "no unschedulable task" is 0, not a missing series.
            pending.update({"true": 0, "false": 0})
            pending.update("true" if w.unschedulable else "false" for w in plan.waiting)

        _family(out, "warmswarm_nodes", "gauge", "Swarm nodes by state and availability, as last observed.")
        for (state, availability), count in sorted(nodes.items()):
            _sample(out, "warmswarm_nodes", {"state": state, "availability": availability}, count)
        _family(out, "warmswarm_pending_tasks", "gauge", "Tasks waiting for capacity, as last observed.")
        for unschedulable, count in sorted(pending.items()):
            _sample(out, "warmswarm_pending_tasks", {"unschedulable": unschedulable}, count)
        _family(out, "warmswarm_volumes", "gauge", "This cluster's cache volumes by state, as last observed.")
        for state, count in sorted(volumes.items()):
            _sample(out, "warmswarm_volumes", {"state": state}, count)

        _family(out, "warmswarm_launches_total", "counter", "Instances launched, by reason.")
        for reason, count in sorted(self._launches.items()):
            _sample(out, "warmswarm_launches_total", {"reason": reason}, count)
        _family(out, "warmswarm_terminations_total", "counter", "Instances terminated, by reason.")
        for reason, count in sorted(self._terminations.items()):
            _sample(out, "warmswarm_terminations_total", {"reason": reason}, count)
        _family(out, "warmswarm_actions_total", "counter", "Actions applied, by kind and outcome.")
        for (kind, outcome), count in sorted(self._actions.items()):
            _sample(out, "warmswarm_actions_total", {"action": kind, "outcome": outcome}, count)

        _family(out, "warmswarm_aws_calls_total", "counter", "EC2 API calls, by operation and result code.")
        calls: Counter[tuple[str, str]] = Counter()
        if self._aws_calls is not None:
            for (operation, code), count in list(self._aws_calls.call_counts.items()):
                calls[(_code(operation), _code(code))] += count
        for (operation, code), count in sorted(calls.items()):
            _sample(out, "warmswarm_aws_calls_total", {"operation": operation, "code": code}, count)

        name = "warmswarm_cycle_duration_seconds"
        _family(out, name, "histogram", "Wall time of a reconcile cycle (observe, plan, apply).")
        cumulative = 0
        for bound, count in zip((*CYCLE_BUCKETS_S, math.inf), self._cycle_bucket_counts, strict=True):
            cumulative += count
            _sample(out, f"{name}_bucket", {"le": _number(bound)}, cumulative)
        _sample(out, f"{name}_sum", {}, self._cycle_sum_s)
        _sample(out, f"{name}_count", {}, cumulative)
        _family(out, "warmswarm_cycles_total", "counter", "Reconcile cycles, by outcome.")
        for outcome, count in sorted(self._cycles.items()):
            _sample(out, "warmswarm_cycles_total", {"outcome": outcome}, count)
        _family(
            out,
            "warmswarm_last_success_timestamp_seconds",
            "gauge",
            "When the last successful cycle started (epoch seconds); 0 before the first.",
        )
        _sample(out, "warmswarm_last_success_timestamp_seconds", {}, self._last_success_at)

        _family(out, "warmswarm_leader", "gauge", "1 while this replica is the leader (the one that acts).")
        _sample(out, "warmswarm_leader", {}, int(self._leader))
        _family(out, "warmswarm_dry_run", "gauge", "1 when the autoscaler applies nothing (AUTOSCALING_DRY_RUN).")
        _sample(out, "warmswarm_dry_run", {}, int(self._dry_run))
        return "\n".join(out) + "\n"


def _closed(value: str, known: Iterable[str]) -> str:
    return value if value in known else OTHER


def _code(value: str) -> str:
    return value if _CODE_PATTERN.fullmatch(value) else OTHER


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _sample(out: list[str], name: str, labels: Mapping[str, str], value: float) -> None:
    if labels:
        inner = ",".join(f'{key}="{_escape(str(v))}"' for key, v in labels.items())
        out.append(f"{name}{{{inner}}} {_number(value)}")
    else:
        out.append(f"{name} {_number(value)}")


def _escape(value: str) -> str:
    # The three escapes the text format defines for label values.
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(value)
