"""The modelled EC2: instances from RunInstances to terminated, stop and start, capacity per type and zone, billing.

States and timings follow AWS's lifecycle: pending -> running (billed) -> stopping -> stopped (disks only) ->
pending -> running, or -> shutting-down -> terminated (root disk deleted, cache volumes released). A ClientToken
answers a retried RunInstances with the instances it made the first time, in whatever state they are now. AWS's rules
(transitions, tokens, capacity) are warmswarm_ec2rules'; this model keeps the world, its timers and its meter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from warmswarm_ec2rules import instances
from warmswarm_ec2rules.capacity import Offering, capacity_refusal
from warmswarm_ec2rules.refusals import Refusal, client_error, instance_not_found
from warmswarm_ec2rules.tokens import ClientTokens
from warmswarm_models import CLUSTER_TAG, INSTANCE_BUFFER_TAG

from warmswarm_simulator.billing import BUFFER_MEMBER_TAG, BUFFER_ROOT, ROOT, Meter
from warmswarm_simulator.cloud_values import LISTED_STATES, CloudError, SimInstance
from warmswarm_simulator.cloud_volumes import VolumeStore
from warmswarm_simulator.config import Model
from warmswarm_simulator.world import World

InstanceListener = Callable[[SimInstance], None]


class Cloud:
    """One account and region: its instances (here) and its volumes (`volumes`), on the world's clock."""

    def __init__(self, world: World, model: Model) -> None:
        self._world = world
        self._model = model
        self.meter = Meter(model.prices, model.price_per_hour)
        self.instances: dict[str, SimInstance] = {}  # every instance ever launched, terminated ones too
        self._present: dict[str, SimInstance] = {}  # those not terminated: what DescribeInstances lists
        self._tokens: ClientTokens[list[str]] = ClientTokens()
        self._next = 0
        self.listeners: list[InstanceListener] = []
        self.volumes = VolumeStore(world, model.ebs, self.meter, self.instances.get)
        self.peak_live = 0
        self._live = 0
        # (day seconds, machines pending or running, machines stopped), one entry per change.
        self.fleet_series: list[tuple[float, int, int]] = [(0.0, 0, 0)]
        self._stopped = 0
        # (day seconds, warmswarm's hot buffer machines held, its warm buffer machines held), nobody's yet, one entry
        # per change: what a buffer's target (fixed or sized by demand) keeps over the day.
        self.buffer_series: list[tuple[float, int, int]] = [(0.0, 0, 0)]
        # The warm tier's own figures: StopInstances and StartInstances that took, and the time machines spent
        # stopping or stopped (no compute billed, their disks are), closed when they start or terminate. The warm
        # buffer's are apart: its machines stopped once pulled, and those started for the owner who claimed them
        # (their time stopped in the buffer is the buffer's bill, billing.py; once claimed, the warm tier's).
        self.stops = 0
        self.starts = 0
        self.buffer_stops = 0
        self.buffer_starts = 0
        self._stopped_since: dict[str, float] = {}
        self._stopped_s = 0.0

    # -- instances ---------------------------------------------------------------------------------------------

    def run_instances(
        self, instance_type: str, zone: str, count: int, tags: Mapping[str, str], token: str = ""
    ) -> list[str]:
        """Launch `count` instances (MinCount = MaxCount = count); raises CloudError as AWS answers."""
        arguments = (instance_type, zone, count, tuple(sorted(tags.items())))
        replay = self._tokens.recall("RunInstances", token, arguments)
        if isinstance(replay, Refusal):
            raise CloudError("RunInstances", replay)
        if replay is not None:
            return list(replay.answer)
        if instance_type not in self._model.instance_types:
            unknown = client_error("InvalidParameterValue", f"unknown instance type {instance_type}")
            raise CloudError("RunInstances", unknown)
        if zone not in self._model.availability_zones:
            raise CloudError("RunInstances", client_error("InvalidParameterValue", f"unknown availability zone {zone}"))
        no_room = capacity_refusal(self._unavailable(), instance_type, zone)
        if no_room is not None:
            raise CloudError("RunInstances", no_room)
        made = [self._launch(instance_type, zone, tags) for _ in range(count)]
        self._tokens.remember("RunInstances", token, arguments, made, succeeded=True)
        return made

    def _launch(self, instance_type: str, zone: str, tags: Mapping[str, str]) -> str:
        self._next += 1
        number = self._next
        instance_id = f"i-{number:017x}"
        address = f"10.{(number >> 16) & 0xFF}.{(number >> 8) & 0xFF}.{number & 0xFF}"
        now_s = self._world.now_s
        instance = SimInstance(instance_id, instance_type, zone, address, dict(tags), now_s, self._world.day_epoch_s)
        self.instances[instance_id] = instance
        self._present[instance_id] = instance
        if _buffer_member(instance):
            self.meter.buffer_joined(instance_id)
        self._meter_root(instance, now_s)
        self._set(instance, "pending")
        self._world.after(self._model.ec2.pending_s, self._now_running, instance, instance.generation)
        return instance_id

    def _meter_root(self, instance: SimInstance, now_s: float) -> None:
        kind = BUFFER_ROOT if self.meter.in_buffer(instance.id) else ROOT
        self.meter.disk_created(_root_disk(instance.id), kind, self._model.ec2.root_volume_gib, now_s)

    def _now_running(self, instance: SimInstance, generation: int) -> None:
        if instance.generation == generation and instance.state == "pending":
            instance.boots += 1
            self.meter.instance_running(instance.id, instance.instance_type, self._world.now_s)
            self._set(instance, "running")

    def terminate_instances(self, instance_ids: Iterable[str]) -> None:
        for instance_id in instance_ids:
            instance = self.instances.get(instance_id)
            if instance is None:
                raise CloudError("TerminateInstances", instance_not_found(instance_id))
            state = instances.terminate(instance.state)
            if state is None:
                continue
            self.meter.instance_not_running(instance.id, self._world.now_s)
            self._stopped_ended(instance)
            self._set(instance, state)
            self._world.after(self._model.ec2.shutdown_s, self._terminated, instance, instance.generation)

    def _terminated(self, instance: SimInstance, generation: int) -> None:
        if instance.generation != generation:
            return
        self.meter.disk_deleted(_root_disk(instance.id), self._world.now_s)
        del self._present[instance.id]
        self._set(instance, "terminated")
        self.volumes.released_by(instance)

    def stop_instances(self, instance_ids: Iterable[str]) -> None:
        """Stop: compute billing ends, the root disk and attached volumes stay (and are billed)."""
        for instance_id in instance_ids:
            instance = self._existing("StopInstances", instance_id)
            state = instances.stop(instance_id, instance.state)
            if state is None:
                continue
            if isinstance(state, Refusal):
                raise CloudError("StopInstances", state)
            self.meter.instance_not_running(instance.id, self._world.now_s)
            if self.meter.in_buffer(instance.id):
                self.buffer_stops += 1
            else:
                self.stops += 1
                self._stopped_since[instance.id] = self._world.now_s
            self._set(instance, state)
            self._world.after(self._model.ec2.stop_s, self._stopped_now, instance, instance.generation)

    def _stopped_now(self, instance: SimInstance, generation: int) -> None:
        if instance.generation == generation:
            self._set(instance, "stopped")

    def start_instances(self, instance_ids: Iterable[str]) -> None:
        """Start a stopped instance: it may find no capacity (none is reserved while stopped)."""
        for instance_id in instance_ids:
            instance = self._existing("StartInstances", instance_id)
            no_room = capacity_refusal(self._unavailable(), instance.instance_type, instance.availability_zone)
            state = instances.start(instance_id, instance.state, capacity_refusal=no_room)
            if state is None:
                continue
            if isinstance(state, Refusal):
                raise CloudError("StartInstances", state)
            # A claimed buffer machine's first start is the claim's; any later one resumes a warm machine.
            if instance.tags.get(INSTANCE_BUFFER_TAG) == "true" and instance.boots <= 1:
                self.buffer_starts += 1
            else:
                self.starts += 1
            instance.started_s = self._world.now_s
            self._stopped_ended(instance)
            self._set(instance, state)
            self._world.after(self._model.ec2.start_pending_s, self._now_running, instance, instance.generation)

    def _stopped_ended(self, instance: SimInstance) -> None:
        since_s = self._stopped_since.pop(instance.id, None)
        if since_s is not None:
            self._stopped_s += self._world.now_s - since_s

    def stopped_hours(self, now_s: float) -> float:
        """Machine-hours spent stopping or stopped up to now_s, those still stopped counted until then."""
        open_s = sum(now_s - since_s for since_s in self._stopped_since.values())
        return (self._stopped_s + open_s) / 3600.0

    def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        instance = self._existing("CreateTags", instance_id)
        instance.tags.update(tags)
        instance.touch()
        self._metered(instance)

    def untag_instance(self, instance_id: str, keys: Iterable[str]) -> None:
        """DeleteTags by keys only: whatever their values; a key the instance does not carry is no error."""
        instance = self._existing("DeleteTags", instance_id)
        for key in keys:
            instance.tags.pop(key, None)
        instance.touch()
        self._metered(instance)

    def mark_for_meter(self, instance_id: str, *, buffer_member: bool) -> None:
        """The meter's own note of whether a machine is a buffer's or a session's (BUFFER_MEMBER_TAG), kept where the
        meter reads it: no EC2 call, so nothing a policy pays for. Nothing for a machine that is gone."""
        instance = self.instances.get(instance_id)
        if instance is None:
            return
        instance.tags[BUFFER_MEMBER_TAG] = "true" if buffer_member else "false"
        instance.touch()
        self._metered(instance)

    def _metered(self, instance: SimInstance) -> None:
        """The meter follows a machine into the buffers' rule or out of it, as its tags now say."""
        instance_id = instance.id
        if not self.meter.in_buffer(instance_id) and _buffer_member(instance) and instance.state == "running":
            self.meter.buffer_entered(instance_id, _root_disk(instance_id), self._world.now_s)
        elif self.meter.in_buffer(instance_id) and not _buffer_member(instance):
            # Claimed: the owner's from now on (billed in full), a warm machine if it is stopped.
            now_s = self._world.now_s
            self.meter.buffer_left(instance_id, _root_disk(instance_id), now_s)
            if instance.state in ("stopping", "stopped"):
                self._stopped_since[instance_id] = now_s
        self._note_buffer()

    def _note_buffer(self) -> None:
        held = [i.value() for i in self._present.values() if i.value().in_buffer]
        hot = sum(1 for i in held if i.hot and i.is_live)
        warm = sum(1 for i in held if not i.hot)
        if self.buffer_series[-1][1:] != (hot, warm):
            self.buffer_series.append((self._world.now_s, hot, warm))

    def _unavailable(self) -> set[Offering]:
        """The offerings with no capacity now: the model's scheduled outages under way."""
        now_s = self._world.now_s
        return {
            (instance_type, o.availability_zone)
            for o in self._model.outages
            if o.from_s <= now_s < o.to_s
            for instance_type in o.instance_types
        }

    def _existing(self, operation: str, instance_id: str) -> SimInstance:
        instance = self.instances.get(instance_id)
        if instance is None or instance.state == instances.TERMINATED:
            raise CloudError(operation, instance_not_found(instance_id))
        return instance

    def _set(self, instance: SimInstance, state: str) -> None:
        before = instance.state if instance.generation else ""
        instance.set_state(state)
        self._live += (state in ("pending", "running")) - (before in ("pending", "running"))
        self._stopped += (state == "stopped") - (before == "stopped")
        self.peak_live = max(self.peak_live, self._live)
        self.fleet_series.append((self._world.now_s, self._live, self._stopped))
        self._note_buffer()
        for listener in self.listeners:
            listener(instance)

    # -- what DescribeInstances and DescribeVolumes answer ----------------------------------------------------

    def listed(self, cluster: str) -> list[SimInstance]:
        return [i for i in self._present.values() if i.state in LISTED_STATES and i.tags.get(CLUSTER_TAG) == cluster]

    def any_present(self) -> bool:
        """Some instance is not terminated yet (pending, running, stopping, stopped or shutting down)."""
        return bool(self._present)

    def only_standing_buffer(self) -> bool:
        """Every instance not terminated is a stopped machine of the warm buffer that nobody claimed (or there is
        none): nothing is left of the day but the buffer at rest, which stands on (billing.py bills it the day)."""
        return all(self.meter.in_buffer(i.id) and i.state == "stopped" for i in self._present.values())

    @property
    def root_volume_gib(self) -> int:
        return self._model.ec2.root_volume_gib

    @property
    def live_count(self) -> int:
        return self._live

    @property
    def stopped_count(self) -> int:
        return self._stopped


def _root_disk(instance_id: str) -> str:
    return f"root-{instance_id}"


def _buffer_member(instance: SimInstance) -> bool:
    """In a standing buffer, for the meter: warmswarm's (read as the autoscaler reads it: buffer tag, no owner) or
    one of the baseline's (the simulator's own mark)."""
    return instance.value().in_buffer or instance.tags.get(BUFFER_MEMBER_TAG) == "true"
