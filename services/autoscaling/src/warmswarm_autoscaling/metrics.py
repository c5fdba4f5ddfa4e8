"""Prometheus metrics of the autoscaler, on prometheus-client: counters the journal adds to, gauges of the last cycle.

Every label value comes from a small closed set (an unknown value becomes `other`), never from free text such
as a reason or an error message: those are in the log and in `/v1/status`.

| metric | type | labels | meaning |
|---|---|---|---|
| `warmswarm_nodes` | gauge | `state`, `availability` | All swarm nodes (managers too), as last observed. |
| `warmswarm_pending_tasks` | gauge | `unschedulable` | Tasks waiting for capacity, as last observed. |
| `warmswarm_volumes` | gauge | `state` | This cluster's EBS cache volumes, as last observed. |
| `warmswarm_machines` | gauge | `tier` | Instances by tier (`hot`, `warm`, `cold`, `buffer`), as last observed. |
| `warmswarm_owners_with_live_machines` | gauge | | Owners with a pending or running machine, as last observed. |
| `warmswarm_pending_task_oldest_age_seconds` | gauge | | Since swarm created the oldest waiting task; 0: none. |
| `warmswarm_volumes_past_expiry` | gauge | | Cache volumes deletable by the janitor's rule for 5 min, still there. |
| `warmswarm_stopped_instances` | gauge | | Instances stopped or stopping, as last observed. |
| `warmswarm_max_stopped_instances` | gauge | | The cap on them (`AUTOSCALING_MAX_STOPPED_INSTANCES`). |
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
| `reason` of launches | `pending_work`: tasks wait and no node of their owner has room; |
| | `buffer`: the warm buffer's refill |
| `reason` of terminations | `idle`: drained, idle past `idle_grace_s`; `start_timeout`: not joined in `max_start_s`; |
| | `node_down`: its node lost the swarm (down) for `max_start_s` while the instance ran; |
| | `stopped`: stopped by someone else (no warm-until of ours) for `max_start_s`; |
| | `warm_expired`: its warm tier (`warm_ttl_s`) ended; `start_failed`: a warm machine could not be started; |
| | `volume_missing`: it joined without the cache volume it was launched for mounted; |
| | `outgrown`: a warm machine its owner's new work does not fit (its volume goes to a machine that does); |
| | `buffer_surplus`: a buffer machine that never ran anyone's work, beyond its part's target or the stop cap |
| `action` | the kind of change: `launch`, `launch_batch`, `tag_instance` (binding a batch machine, claiming a |
| | buffer machine), `label_node`, `drain`, `activate`, `terminate`, `stop`, `start`, `remove_node`, |
| | `create_volume`, `attach_volume`, `detach_volume`, `modify_volume` (growing a cache volume), `tag_volume` |
| | (releasing, renewing a volume, its TTL), `delete_volume`, `expire_volume` (an operator's) |
| `outcome` | `ok`, `error` (for actions: the adapter call failed; for cycles: observation failed or a crash) |
| `operation` | the EC2 API name (`DescribeInstances`, `RunInstances`, `CreateTags`, ...) |
| `code` | `ok`, the AWS error code (`RequestLimitExceeded`, ...), `ConnectionError`, `other` |

Gauges are absent until the first successful cycle (unknown is not zero), but for the settings (`leader`,
`dry_run`, `max_stopped_instances`), known from the start. The oldest waiting task's age reads each task's
CreatedAt (the manager's clock) against the cycle's; a task whose CreatedAt is unreadable is left out. A volume
past its expiry is one the janitor's own rule (plan.volumes.deletable) would have deleted `VOLUME_EXPIRY_GRACE_S`
ago: available, unpinned, expired by AWS's clock; the janitor deletes one in the cycle that first sees it expired.
Instances that are not this cluster's are never terminated, so no reason exists for them. Counters start at 0 for
every known label value and restart with the process.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Protocol, get_args, runtime_checkable

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from warmswarm_models.tier import STOPPED_STATES, TIERS

from warmswarm_autoscaling.actions import ACTION_KINDS, LaunchPurpose, TerminationCause
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.clock import DeadlineClock
from warmswarm_autoscaling.plan.tiers import tier_of
from warmswarm_autoscaling.plan.volumes import deletable
from warmswarm_autoscaling.snapshot import Snapshot

CONTENT_TYPE: Final = prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4

# Every value the actions' types allow, from the types themselves: a new cause is counted from 0 without a second list.
LAUNCH_REASONS: Final[tuple[LaunchPurpose, ...]] = get_args(LaunchPurpose)
TERMINATION_REASONS: Final[tuple[TerminationCause, ...]] = get_args(TerminationCause)
OUTCOMES: Final = ("ok", "error")

NODE_STATES: Final = ("ready", "down", "unknown", "disconnected")
NODE_AVAILABILITIES: Final = ("active", "pause", "drain")
VOLUME_STATES: Final = ("creating", "available", "in-use", "deleting", "deleted", "error")
OTHER: Final = "other"

# A cycle is a few EC2 and Docker reads plus the actions' calls: tens of milliseconds in a
# quiet cluster, seconds when EC2 throttles or many machines start at once.
CYCLE_BUCKETS_S: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# AWS error codes look like "InvalidVolume.NotFound"; anything else (a long exception text) is not a label value.
_CODE_PATTERN: Final = re.compile(r"[A-Za-z][A-Za-z0-9_.]{0,63}")

# The janitor deletes an expired volume in the cycle that first sees it expired (the plan's deadline wakes the loop
# at the expiry): one still there this long after is one it failed on, not one it has not got to yet.
VOLUME_EXPIRY_GRACE_S: Final = 300.0


@runtime_checkable
class AwsCallCounts(Protocol):
    """An EC2 port that counts its calls: `call_counts[(operation, code)]`, code "ok" on success."""

    @property
    def call_counts(self) -> Mapping[tuple[str, str], int]: ...


class Metrics:
    """The autoscaler's registry. The journal adds to the counters; `observed` sets what the gauges show."""

    def __init__(
        self, *, aws_calls: AwsCallCounts | None = None, dry_run: bool = False, max_stopped_instances: int | None = None
    ) -> None:
        # `_created` series are OpenMetrics' and no dashboard of ours reads them: the text format stays as it was.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self._snapshot: Snapshot | None = None
        self._plan: Plan | None = None
        self.max_stopped_instances = max_stopped_instances  # None: not told (a Metrics of a test)
        self.registry.register(_LastCycle(self, aws_calls))
        self._launches = Counter(
            "warmswarm_launches", "Instances launched, by reason.", ["reason"], registry=self.registry
        )
        self._terminations = Counter(
            "warmswarm_terminations", "Instances terminated, by reason.", ["reason"], registry=self.registry
        )
        self._actions = Counter(
            "warmswarm_actions", "Actions applied, by kind and outcome.", ["action", "outcome"], registry=self.registry
        )
        self._cycle_duration = Histogram(
            "warmswarm_cycle_duration_seconds",
            "Wall time of a reconcile cycle (observe, plan, apply).",
            buckets=CYCLE_BUCKETS_S,
            registry=self.registry,
        )
        self._cycles = Counter("warmswarm_cycles", "Reconcile cycles, by outcome.", ["outcome"], registry=self.registry)
        self._last_success = Gauge(
            "warmswarm_last_success_timestamp_seconds",
            "When the last successful cycle started (epoch seconds); 0 before the first.",
            registry=self.registry,
        )
        self._leader = Gauge(
            "warmswarm_leader", "1 while this replica is the leader (the one that acts).", registry=self.registry
        )
        self._dry_run = Gauge(
            "warmswarm_dry_run",
            "1 when the autoscaler applies nothing (AUTOSCALING_DRY_RUN).",
            registry=self.registry,
        )
        # Every known label value starts at 0, so rate() and alerts see a series before its first event.
        for reason in LAUNCH_REASONS:
            self._launches.labels(reason)
        for cause in TERMINATION_REASONS:
            self._terminations.labels(cause)
        for kind in ACTION_KINDS:
            for outcome in OUTCOMES:
                self._actions.labels(kind, outcome)
        for outcome in OUTCOMES:
            self._cycles.labels(outcome)
        self._leader.set(1)  # one replica, no election: it is the leader
        self._dry_run.set(int(dry_run))

    def set_leader(self, is_leader: bool) -> None:
        self._leader.set(int(is_leader))

    def observed(self, snapshot: Snapshot, plan: Plan) -> None:
        """What the gauges show from now on: the last successful cycle's view."""
        self._snapshot, self._plan = snapshot, plan

    def record_cycle(self, duration_s: float, *, ok: bool, started_at: float | None = None) -> None:
        self._cycles.labels("ok" if ok else "error").inc()
        self._cycle_duration.observe(duration_s)
        if ok and started_at is not None:
            self._last_success.set(started_at)

    def record_crash(self) -> None:
        """A cycle that raised: counted, not timed (it may have died anywhere)."""
        self._cycles.labels("error").inc()

    def record_action(self, kind: str, *, ok: bool) -> None:
        self._actions.labels(kind, "ok" if ok else "error").inc()

    def record_launch(self, reason: LaunchPurpose, machines: int = 1) -> None:
        self._launches.labels(reason).inc(machines)

    def record_termination(self, reason: TerminationCause) -> None:
        self._terminations.labels(reason).inc()

    def exposition(self) -> bytes:
        """The text format 0.0.4 body of GET /metrics."""
        return prometheus_client.generate_latest(self.registry)


class _LastCycle(Collector):
    """Gauges read from the last successful cycle when scraped, and the EC2 port's call counts."""

    def __init__(self, metrics: Metrics, aws_calls: AwsCallCounts | None) -> None:
        self._metrics = metrics
        self._aws_calls = aws_calls

    def collect(self) -> Iterator[Metric]:
        snapshot, plan = self._metrics._snapshot, self._metrics._plan
        nodes = GaugeMetricFamily(
            "warmswarm_nodes",
            "Swarm nodes by state and availability, as last observed.",
            labels=["state", "availability"],
        )
        pending = GaugeMetricFamily(
            "warmswarm_pending_tasks", "Tasks waiting for capacity, as last observed.", labels=["unschedulable"]
        )
        volumes = GaugeMetricFamily(
            "warmswarm_volumes", "This cluster's cache volumes by state, as last observed.", labels=["state"]
        )
        machines = GaugeMetricFamily(
            "warmswarm_machines", "This cluster's instances by tier, as last observed.", labels=["tier"]
        )
        owners = GaugeMetricFamily(
            "warmswarm_owners_with_live_machines",
            "Owners with a pending or running machine of this cluster, as last observed.",
        )
        if snapshot is not None:
            live = {i.owner for i in snapshot.instances if i.is_live and i.owner is not None and not i.owner.is_nobody}
            owners.add_metric([], len(live))
            # Every tier always, once known: "no warm machine" is 0, not a missing series.
            tiers = Tally(dict.fromkeys(TIERS, 0))
            tiers.update(tier_of(i)[0] for i in snapshot.instances)
            for tier, count in sorted(tiers.items()):
                machines.add_metric([tier], count)
            by_state = Tally(
                (_closed(n.state, NODE_STATES), _closed(n.availability, NODE_AVAILABILITIES)) for n in snapshot.nodes
            )
            for (state, availability), count in sorted(by_state.items()):
                nodes.add_metric([state, availability], count)
            for state, count in sorted(Tally(_closed(v.state, VOLUME_STATES) for v in snapshot.volumes).items()):
                volumes.add_metric([state], count)
        if plan is not None:
            # Both values always, once known: "no unschedulable task" is 0, not a missing series.
            waits = Tally({"true": 0, "false": 0})
            waits.update("true" if w.unschedulable else "false" for w in plan.waiting)
            for unschedulable, count in sorted(waits.items()):
                pending.add_metric([unschedulable], count)
        calls = CounterMetricFamily(
            "warmswarm_aws_calls", "EC2 API calls, by operation and result code.", labels=["operation", "code"]
        )
        if self._aws_calls is not None:
            summed: Tally[tuple[str, str]] = Tally()
            for (operation, code), count in list(self._aws_calls.call_counts.items()):
                summed[(_code(operation), _code(code))] += count
            for (operation, code), count in sorted(summed.items()):
                calls.add_metric([operation, code], count)
        yield from (nodes, pending, volumes, machines, owners, calls, *self._alerts_read(snapshot, plan))

    def _alerts_read(self, snapshot: Snapshot | None, plan: Plan | None) -> Iterator[Metric]:
        """The gauges the alerts of docs/prometheus-rules.yml read, besides the ones above."""
        oldest = GaugeMetricFamily(
            "warmswarm_pending_task_oldest_age_seconds",
            "Since swarm created the oldest task waiting for capacity (0: none waits), as last observed.",
        )
        past_expiry = GaugeMetricFamily(
            "warmswarm_volumes_past_expiry",
            "This cluster's cache volumes the janitor could have deleted 5 minutes ago or more, as last observed.",
        )
        stopped = GaugeMetricFamily(
            "warmswarm_stopped_instances", "This cluster's instances stopped or stopping, as last observed."
        )
        cap = GaugeMetricFamily(
            "warmswarm_max_stopped_instances", "The most instances this cluster keeps stopped (the setting)."
        )
        if snapshot is not None and plan is not None:
            created = {t.id: t.created_at for t in snapshot.tasks}
            ages = [snapshot.now - at for w in plan.waiting if (at := created.get(w.task_id)) is not None]
            oldest.add_metric([], max([0.0, *ages]))
            # The janitor's own rule and clock (AWS's), moved back by the grace: no second idea of "expired".
            aws_now = DeadlineClock.of(snapshot.now, snapshot.aws_now).aws
            late = sum(1 for v in snapshot.volumes if deletable(v, aws_now - VOLUME_EXPIRY_GRACE_S) is None)
            past_expiry.add_metric([], late)
            stopped.add_metric([], sum(1 for i in snapshot.instances if i.state in STOPPED_STATES))
        if self._metrics.max_stopped_instances is not None:
            cap.add_metric([], self._metrics.max_stopped_instances)
        yield from (oldest, past_expiry, stopped, cap)


def _closed(value: str, known: Iterable[str]) -> str:
    return value if value in known else OTHER


def _code(value: str) -> str:
    return value if _CODE_PATTERN.fullmatch(value) else OTHER
