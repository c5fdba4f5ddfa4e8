"""Two checks that need a cause found in the world: an offering the autoscaler avoids, and a claim that ends unused.

- avoided offerings: every (type, zone) the leader's plan avoids must have a cause within capacity_backoff_s (plus
  a cycle; the plan keeps its back-offs by AWS's clock, so a replica's clock that steps does not stretch them): AWS
  refused it for capacity, or an owner's (or a batch's) machine of it was live without a node past max_start_s (the
  planner avoids a late machine's offering by design). A buffer machine that does not join is not such a cause: it
  avoids that offering for every owner's launch;
- claims: a warm buffer machine claimed by an owner is started for that owner, unless AWS refused the start (or the
  started-at tag the start writes first) or a fault took its node away; one terminated without a start took a
  buffer slot and the owner's wait for nothing. One that never stopped as the buffer's (the hot buffer's, running
  when claimed) has no start to make: its use is liveness's to judge;
- starts: a warm machine AWS refused to start for capacity is given up (terminated, its owner's work launched anew
  where there is room), not started again and again while its offering is out.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from warmswarm_autoscaling.snapshot import Snapshot
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, INSTANCE_BUFFER_TAG, INSTANCE_STARTED_AT_TAG

from warmswarm_simulator.cloud_values import SimInstance
from warmswarm_simulator.faults.checks import START_RETRIED, UNFOUNDED_CAPACITY, UNUSED_CLAIM
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.scenario import Scenario
from warmswarm_simulator.faults.worldparts import BUFFER, Parts, whose_instance

_SLACK_S = 2.0
STARTED_AT = f"'{INSTANCE_STARTED_AT_TAG}'"  # as a tag call's target names it


def avoided_offerings(marks: Mapping[tuple[str, str], float], snapshot: Snapshot) -> list[tuple[str, str]]:
    """The offerings a plan's capacity marks (`until`, epoch s) still avoid at its snapshot, by AWS's clock: the plan
    keeps its marks by AWS's clock (plan/clock.py), never by the replica's. Read by the replica's, a clock 120 s
    behind AWS's kept a mark that had run out 25 s before in force (seed 20777: a reused plan of the cycle before,
    plan_reuse.py, carried it; the next plan made dropped it)."""
    now = snapshot.aws_now if snapshot.aws_now is not None else snapshot.now
    return [offering for offering, until in marks.items() if until > now]


class Causes:
    def __init__(self, parts: Parts, scenario: Scenario, dice: Dice) -> None:
        self._parts = parts
        self._scenario = scenario
        self._dice = dice
        self._late_at: dict[tuple[str, str], float] = {}  # offering -> last time an owner's machine of it was late
        self._starts: set[str] = set()  # machines started at least once (StartInstances took)
        self._stopped: set[str] = set()  # buffer machines that stopped while nobody's (a hot one never does)
        parts.cloud.listeners.append(self._changed)

    def _changed(self, instance: SimInstance) -> None:
        if instance.started_s is not None:
            self._starts.add(instance.id)
        if instance.state in ("stopping", "stopped") and whose_instance(instance) == BUFFER:
            self._stopped.add(instance.id)
        if instance.state != "shutting-down" or instance.tags.get(INSTANCE_BUFFER_TAG) != "true":
            return
        whose = whose_instance(instance)
        # AWS refused its start, or the tag the start writes first (started-at; without it no StartInstances goes).
        refused = any(
            instance.id in c.target
            and c.outcome != "ok"
            and (c.operation == "StartInstances" or (c.operation == "CreateTags" and STARTED_AT in c.target))
            for c in self._dice.history.calls
        )
        struck = instance.id in self._parts.nodes_struck  # its node gone: it cannot come back as the owner's node
        stopped = instance.id in self._stopped
        if whose != BUFFER and stopped and instance.id not in self._starts and not refused and not struck:
            self._dice.history.fail(
                self._dice.cycle,
                UNUSED_CLAIM,
                f"buffer machine {instance.id} was claimed by {whose} and is terminated without having been started",
                instance.id,
            )

    def late(self) -> None:
        """Notes the offerings of owners' machines live without a node past max_start_s (the planner ages a launch by
        AWS's clock, whatever its own says): asked before each cycle, since the cycle terminates them."""
        parts, settings = self._parts, self._scenario.settings
        now_s = parts.world.now_s
        with_node = {
            n.engine_labels.get(ENGINE_LABEL_INSTANCE_ID, "")
            for n in parts.swarm.nodes.values()
            if n.state == "ready" or n.labels
        }
        for instance in parts.cloud.instances.values():
            if instance.state not in ("pending", "running") or instance.id in with_node:
                continue
            if whose_instance(instance) == BUFFER:
                continue
            if now_s - instance.launched_at_s > settings.max_start_s - settings.busy_resync_interval_s:
                self._late_at[(instance.instance_type, instance.availability_zone)] = now_s

    def after_cycle(self, avoided: Iterable[tuple[str, str]], terms_s: Sequence[float]) -> None:
        """`avoided`: the offerings the leader's plan of this cycle avoids; `terms_s`: when each of the leader's terms
        began (a new term forgets failed starts, by design)."""
        settings = self._scenario.settings
        self.late()
        refused_starts = Counter(
            (c.target, bisect.bisect_right(terms_s, c.at_s))
            for c in self._dice.history.calls
            if c.replica == "A"
            and c.operation == "StartInstances"
            and c.outcome == "refused InsufficientInstanceCapacity"
        )
        for (instance_id, _term), times in sorted(refused_starts.items()):
            if times > 1:
                self._dice.history.fail(
                    self._dice.cycle,
                    START_RETRIED,
                    f"StartInstances {instance_id} refused for capacity {times} times in one term: the machine is not"
                    " given up",
                    instance_id,
                )
        now_s = self._parts.world.now_s
        window_s = settings.capacity_backoff_s + settings.busy_resync_interval_s + _SLACK_S
        for instance_type, zone in sorted(avoided):
            refused = any(
                (t, z) == (instance_type, zone) and now_s - at_s <= window_s
                for at_s, t, z in self._dice.history.refused_offerings
            )
            late = now_s - self._late_at.get((instance_type, zone), float("-inf")) <= window_s
            if not refused and not late:
                self._dice.history.fail(
                    self._dice.cycle,
                    UNFOUNDED_CAPACITY,
                    f"{instance_type} in {zone} is avoided as out of capacity, but AWS refused it no capacity and no"
                    f" owner's machine of it was late within {window_s:.0f} s",
                    f"{instance_type} {zone}",
                )
