"""What must hold after every cycle, checked on the modelled world (never on the autoscaler's beliefs).

- owners: no machine of one owner carries another's node labels, no owner's work runs on another owner's cache, no
  volume is attached to a machine that is not its owner's (an anonymous buffer or batch machine included);
- TTL: no cache volume is deleted before its TTL has run since it was last released (the moment its released-at tag
  was last written, in the world's time: not the tag's value, which is the reconciler's clock, nor the moment it
  became unattached, which may be long before), nor while its expires-at tag is still ahead of AWS's clock;
- evictions: no owner's work is taken off a healthy node of its owner (drained, stopped, terminated or removed while
  it runs there, labelled for its owner, its cache mounted);
- launches: per owner and hour, at most one machine per session, plus one per fault that struck that owner's
  machines or calls (each may cost the machine it strikes), plus two (a start timeout or a capacity refusal may send
  a launch elsewhere with no fault of ours); the buffer likewise, per slot, per claim, per reserved session and per
  machine it gave way to a waiting owner (at most one a session), and a batch per session. Each boot a standing
  fault fails (the registry's outage, a device that never appears) counts as a fault, but only as many as a
  back-off that doubles lets come (_repeated): a fixed back-off fails this. A fault of everyone's counts only for
  those it could cost a machine: a clock episode for the owners with a machine not yet joined, or stopped, while it
  lasted; the stale replica, one per call of its that took effect on an owner's machine or launched one; an unknown
  type, none (EC2 refuses its description, so it is never launched);
- stopped machines (stopped.py): the stopped cap and each stopped machine's deadline;
- the stale leader: no mutating call of it takes effect after its lock expired (its lease's end plus the safety
  margin lease.py keeps, a fifth of the lock's ttl).
"""

from __future__ import annotations

import math
import re
from collections import Counter

from warmswarm_models import (
    ENGINE_LABEL_CACHE_VOLUME,
    INSTANCE_BUFFER_TAG,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    parse_timestamp,
)

from warmswarm_simulator.cloud_values import SimInstance, SimVolume
from warmswarm_simulator.faults.checks import (
    CROSS_OWNER_MACHINE,
    CROSS_OWNER_VOLUME,
    DELETE_BEFORE_TTL,
    EVICTS_WORK,
    LAUNCH_BOUND,
    STALE_LEADER,
)
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.scenario import Scenario
from warmswarm_simulator.faults.stopped import SLACK_S, STOPPED, Stops, check_stopped
from warmswarm_simulator.faults.worldparts import (
    BATCH,
    BUFFER,
    Parts,
    cache_in_place,
    owner_of,
    task_owner,
    whose_instance,
)

_EVICTING = frozenset({"drain node", "remove node", "StopInstances", "TerminateInstances"})


class Invariants:
    def __init__(self, parts: Parts, scenario: Scenario, dice: Dice) -> None:
        self._parts = parts
        self._scenario = scenario
        self._dice = dice
        self._history = dice.history
        self._available_since: dict[str, float] = {}  # volume id -> when it was last left unattached (world s)
        # volume id -> (its released-at tag, when that tag was written: world s); a renewal removes the tag.
        self._released: dict[str, tuple[str, float]] = {}
        self._stopped_since: dict[str, float] = {}  # instance id -> when it began stopping (world s)
        self._launched: dict[str, str] = {}  # instance id -> whose launch it counts as
        self._claimed_at: dict[str, float] = {}  # buffer machine id -> when an owner's tags were first seen on it
        # Unclaimed buffer machines terminated while an owner's task waited (given way to it, surplus.py).
        self._gave_way: set[str] = set()
        # The stale replica's leases: (taken, lease end, lock expiry), world s; its calls belong within one.
        self.stale_leases: list[tuple[float, float, float]] = []
        self.term_started_s = 0.0  # when the leader's current term began: its clocks start again then
        # cycle -> whose machines were not yet joined, or stopped, after it: a clock episode may cost them a machine.
        self._unsettled: dict[int, set[str]] = {}
        parts.cloud.listeners.append(self._instance_changed)
        parts.cloud.volumes.listeners.append(self._volume_changed)

    def _fail(self, check: str, message: str, subject: str = "") -> None:
        self._history.fail(self._dice.cycle, check, message, subject)

    # -- what the world does, as it happens ------------------------------------------------------------------------

    def _instance_changed(self, instance: SimInstance) -> None:
        now_s = self._parts.world.now_s
        if instance.id not in self._launched:
            self._launched[instance.id] = whose_instance(instance)
        if instance.state in STOPPED:
            self._stopped_since.setdefault(instance.id, now_s)
        else:
            self._stopped_since.pop(instance.id, None)

    def _volume_changed(self, volume: SimVolume) -> None:
        now_s = self._parts.world.now_s
        released_at = volume.tags.get(VOLUME_RELEASED_AT_TAG)
        if released_at is None:
            self._released.pop(volume.id, None)
        elif self._released.get(volume.id, ("", 0.0))[0] != released_at:
            self._released[volume.id] = (released_at, now_s)
        if volume.state == "deleted":
            self._deleted(volume, now_s)
        elif volume.state == "available" and volume.attachment is None:
            self._available_since.setdefault(volume.id, now_s)
        else:
            self._available_since.pop(volume.id, None)

    def _deleted(self, volume: SimVolume, now_s: float) -> None:
        owner = owner_of(volume.tags)
        unattached_s = self._available_since.pop(volume.id, None)
        released = self._released.pop(volume.id, None)
        # From its release; a volume never released (none of an owner's machines ever had it) from its detach.
        since_s, since = (released[1], "released") if released is not None else (unattached_s, "left unattached")
        ttl = volume.tags.get(VOLUME_TTL_TAG, "")
        if since_s is not None and ttl.isdigit() and now_s - since_s < int(ttl) - SLACK_S:
            self._fail(
                DELETE_BEFORE_TTL,
                f"volume {volume.id} of {owner} deleted {now_s - since_s:.0f} s after it was {since}, before its"
                f" TTL of {ttl} s by AWS's clock",
            )
        expires_at = parse_timestamp(volume.tags.get(VOLUME_EXPIRES_AT_TAG, ""))
        aws_now = self._parts.world.epoch()
        if expires_at is not None and expires_at > aws_now + SLACK_S:
            self._fail(
                DELETE_BEFORE_TTL,
                f"volume {volume.id} of {owner} deleted while its expires-at is {expires_at - aws_now:.0f} s ahead"
                " of AWS's clock",
            )

    def watch(self, replica: str, operation: str, ids: tuple[str, ...]) -> None:
        """Before a call that may take work off a node: it must not be an owner's work on a healthy node of theirs."""
        if operation not in _EVICTING:
            return
        parts = self._parts
        for target in ids:
            node = parts.swarm.nodes.get(target) if operation.endswith("node") else parts.node_of(target)
            if node is None or node.state != "ready":
                continue
            instance = parts.instance_of(node)
            owner = owner_of(node.labels)
            if instance is None or owner is None or owner.is_nobody or not cache_in_place(node, instance):
                continue
            working = [t for t in parts.active_tasks_on(node) if task_owner(t) == owner]
            if working:
                self._fail(
                    EVICTS_WORK,
                    f"{replica} {operation} {target}: node {node.id} of {owner} is healthy (labelled, its cache in"
                    f" place) and runs their task {working[0].id} ({working[0].state})",
                    f"{operation} {target}",
                )

    # -- after every cycle -----------------------------------------------------------------------------------------

    def after_cycle(self) -> None:
        for instance_id, whose in self._launched.items():
            instance = self._parts.cloud.instances[instance_id]
            if whose == BUFFER and instance_id not in self._claimed_at and whose_instance(instance) != BUFFER:
                self._claimed_at[instance_id] = self._parts.world.now_s
        self._note_unsettled()
        self._note_given_way()
        self._owners()
        stops = Stops(self._stopped_since, self._claimed_at, self.term_started_s)
        check_stopped(self._parts, self._scenario, self._dice.cycle, stops, self._fail)
        self._launches()
        self._stale()

    def _note_given_way(self) -> None:
        """Unclaimed buffer machines this cycle terminated while an owner's task was pending: at max_instances the
        buffer gives way to owners' work, and refills once it is served, so each may cost the buffer a launch."""
        parts = self._parts
        waiting = False
        for record in parts.platform.records:
            service = parts.swarm.services.get(record.service_id or "")
            if service is None or record.ended_s is not None:
                continue  # not requested yet, or over
            task = parts.swarm.tasks.get(service.task_id or "")
            waiting = waiting or task is None or task.state == "pending"
        if not waiting:
            return
        for call in self._history.calls:
            if call.cycle != self._dice.cycle or call.operation != "TerminateInstances" or not call.took_effect:
                continue
            for instance_id in call.target.split():
                instance = parts.cloud.instances.get(instance_id)
                if instance is not None and whose_instance(instance) == BUFFER:
                    self._gave_way.add(instance_id)

    def _owners(self) -> None:
        parts = self._parts
        for node in parts.swarm.nodes.values():
            instance = parts.instance_of(node)
            labelled = owner_of(node.labels)
            if instance is None or labelled is None or labelled.is_nobody:
                continue
            whose = whose_instance(instance)
            if whose != str(labelled) and whose != BATCH:  # a batch machine is tagged for its owner a few a cycle
                self._fail(
                    CROSS_OWNER_MACHINE,
                    f"machine {instance.id} of {whose} carries node labels of {labelled}",
                    instance.id,
                )
            mounted = parts.cloud.volumes.get(node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME, ""))
            for task in parts.active_tasks_on(node):
                owner = task_owner(task)
                if mounted is not None and not owner.is_nobody and owner_of(mounted.tags) != owner:
                    self._fail(
                        CROSS_OWNER_VOLUME,
                        f"task {task.id} of {owner} runs on node {node.id}, which mounts volume {mounted.id} of"
                        f" {owner_of(mounted.tags)}",
                        node.id,
                    )
        for volume in parts.cloud.volumes.volumes.values():
            attachment = volume.attachment
            if attachment is None or attachment.state not in ("attaching", "attached"):
                continue
            instance = parts.cloud.instances.get(attachment.instance_id)
            whose = whose_instance(instance) if instance is not None else "no instance"
            if whose != str(owner_of(volume.tags)):
                self._fail(
                    CROSS_OWNER_VOLUME,
                    f"volume {volume.id} of {owner_of(volume.tags)} is {attachment.state} to {attachment.instance_id}"
                    f" of {whose}",
                    volume.id,
                )

    def _note_unsettled(self) -> None:
        parts = self._parts
        unsettled = self._unsettled.setdefault(self._dice.cycle, set())
        for instance in parts.cloud.instances.values():
            node = parts.node_of(instance.id)
            joined = instance.state == "running" and node is not None and node.state == "ready"
            if instance.state in ("pending", "running", *STOPPED) and not joined:
                unsettled.add(whose_instance(instance))

    def _shared(self) -> Counter[str]:
        """Per owner, the faults of everyone's that could cost it a machine (the module's docstring)."""
        shared: Counter[str] = Counter()
        for fault in self._history.faults:
            if fault.owner != "*" or fault.kind != "clock":
                continue
            length = re.search(r"for (\d+) cycles", fault.detail)
            last = fault.cycle + (int(length.group(1)) if length else 0)
            shared.update(set().union(*(self._unsettled.get(c, set()) for c in range(fault.cycle, last + 1))))
        for call in self._history.calls:
            if call.replica != "B" or not call.took_effect:
                continue
            if call.operation == "RunInstances":
                whose = call.target.rsplit(" for ", 1)[-1] if " for " in call.target else BATCH
                shared[whose] += 1
            else:
                shared.update({self._launched[t] for t in call.target.split() if t in self._launched})
        return shared

    def _launches(self) -> None:
        parts, scenario, settings = self._parts, self._scenario, self._scenario.settings
        counts: Counter[str] = Counter()
        for instance_id, whose in self._launched.items():
            if whose == BATCH:
                now_whose = whose_instance(parts.cloud.instances[instance_id])
                whose = now_whose if now_whose != BUFFER else whose
            counts[whose] += 1
        # Hot and warm, per zone (demand sizing keeps at most these); a reservation's sessions on top.
        slots = (sum(settings.warm_buffer.values()) + sum(settings.hot_buffer.values())) * len(settings.zones())
        faults = Counter(f.owner for f in self._history.faults if f.owner != "*") + self._repeated(slots)
        shared = self._shared()
        hours = max(1, math.ceil(parts.world.now_s / 3600.0))
        sessions: Counter[str] = Counter()
        batchable = 0
        for session in scenario.sessions:
            owner = ",".join(
                f"{k}={v}" for k, v in zip(("user_id", "project_id", "node_id"), session.owner, strict=True)
            )
            sessions[owner] += 1
            group = scenario.groups[session.group]
            batchable += not group.ebs_cache_enabled and group.warm_ttl_s == 0
        claims = sum(
            1
            for i in parts.cloud.instances.values()
            if i.tags.get(INSTANCE_BUFFER_TAG) == "true" and whose_instance(i) != BUFFER
        )
        reserved = sum(b.sessions for b in scenario.bookings if b.made_cycle <= self._dice.cycle)
        for whose, launched in sorted(counts.items()):
            # Each buffer machine given way to a waiting owner may be relaunched once, at most one per session.
            gave_way = min(len(self._gave_way), len(parts.platform.records))
            allowed = {BUFFER: slots + claims + reserved + gave_way, BATCH: batchable}.get(whose, sessions[whose])
            bound = hours * (allowed + faults[whose] + 2) + shared[whose]
            if launched > bound:
                self._fail(
                    LAUNCH_BOUND,
                    f"{launched} machines launched for {whose} in {parts.world.now_s:.0f} s, more than {bound} (its"
                    f" {allowed} session(s) or slots, {faults[whose]} fault(s) that struck it, {shared[whose]} of"
                    " everyone's that could cost it a machine, and 2)",
                    whose,
                )

    def _repeated(self, slots: int) -> Counter[str]:
        """The launches a standing fault's strikes may cost, by whose: a failure that repeats the same way backs off,
        doubling from capacity_backoff_s, so in T seconds it strikes at most 1 + log2(T / capacity_backoff_s + 1)
        times, and once more for a machine on its way when it struck. The registry's outage fails every buffer
        machine booting when it strikes (at most the buffers' slots), then one probe at a time."""
        backoff_s = float(self._scenario.settings.capacity_backoff_s)
        waves = 2 + int(math.log2(self._parts.world.now_s / backoff_s + 1.0)) if backoff_s > 0 else 10**6
        allowed: Counter[str] = Counter()
        for (whose, fault), strikes in self._history.strikes.items():
            allowed[whose] += min(strikes, waves + (slots if fault == "registry" else 0))
        return allowed

    def _stale(self) -> None:
        for call in self._history.calls:
            if call.replica != "B" or not call.took_effect:
                continue
            held = [lease for lease in self.stale_leases if lease[0] <= call.at_s]
            if held and call.at_s > held[-1][2]:
                _taken_s, lease_end_s, expiry_s = held[-1]
                self._fail(
                    STALE_LEADER,
                    f"B's {call.operation} {call.target} took effect at {call.at_s:.1f} s, its lease ended at"
                    f" {lease_end_s:.1f} s and its lock expired at {expiry_s:.1f} s",
                    f"{call.at_s} {call.operation} {call.target}",
                )
