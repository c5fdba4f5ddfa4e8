"""Faults of the world itself, struck between cycles: nodes removed or dropping out, devices that never appear,
image pulls that fail, and work that is nobody's with cache labels. The calm undoes what the world would heal."""

from __future__ import annotations

from warmswarm_models import INSTANCE_BUFFER_TAG, INSTANCE_VOLUME_TAG, CachePolicy, Resources

from warmswarm_simulator.config import GIB
from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.worldparts import BUFFER, Parts, cache_in_place, owner_of, whose_instance
from warmswarm_simulator.platform import SESSION_IMAGE

_DROP_S = (5.0, 20.0, 60.0)  # how long a node that drops out for a while is away
_PULL_FAILS_S = (20.0, 60.0)  # how long a node's pulls fail
_FOREIGN_S = (30.0, 120.0)  # how long foreign work runs


class WorldFaults:
    def __init__(self, parts: Parts, dice: Dice) -> None:
        self._parts = parts
        self._dice = dice
        self._foreign: list[str] = []  # service ids of the foreign work still running
        self._registry_down = False  # the buffer's image cannot be pulled (until the calm)
        self._joined_without: set[str] = set()  # machines that joined without a device that never appeared

    def _note(self, text: str) -> None:
        self._dice.history.notes.append((self._dice.cycle, text))

    def strike(self) -> None:
        """Before a cycle while faults are on: each world kind may strike once."""
        self._node()
        self._device()
        self._pull()
        self._foreign_work()

    def count_strikes(self) -> None:
        """After a cycle: each machine that joined without a device a fault keeps from appearing is a strike of
        that fault (one fault, a machine each time its owner's volume is attached to another)."""
        parts = self._parts
        for instance_id, node_id in parts.machines.node_of.items():
            instance = parts.cloud.instances.get(instance_id)
            node = parts.swarm.nodes.get(node_id)
            if instance is None or node is None or instance_id in self._joined_without:
                continue
            volume_id = instance.tags.get(INSTANCE_VOLUME_TAG)
            if volume_id in parts.machines.missing_devices and not cache_in_place(node, instance):
                self._joined_without.add(instance_id)
                self._dice.history.strikes[(whose_instance(instance), f"device {volume_id}")] += 1

    def calm(self) -> None:
        """Faults stop: volumes show their devices again, pulls work, foreign work ends (a node gone stays gone)."""
        parts = self._parts
        parts.machines.missing_devices.clear()
        parts.swarm.failing_pulls.clear()
        self._registry_down = False
        for service_id in self._foreign:
            parts.swarm.remove_service(service_id)
        self._foreign.clear()

    def _node(self) -> None:
        parts, dice = self._parts, self._dice
        nodes = sorted(parts.swarm.nodes)
        if not nodes:
            return
        cycle = dice.cycle
        node_id = dice.pick(nodes, f"c{cycle} node which")
        node = parts.swarm.nodes[node_id]
        instance = parts.instance_of(node)
        whose = whose_instance(instance) if instance is not None else ""
        how = dice.pick(("removed", "drops out for a while", "drops out for good"), f"c{cycle} node how")
        away_s = dice.pick(_DROP_S, f"c{cycle} node away")
        detail = f"node {node_id} ({node.state}, of {whose or 'no machine'}) {how}"
        if how == "drops out for a while":
            detail += f" ({away_s:g} s)"
        if not dice.fires("node", "world node", detail, owner=whose):
            return
        if instance is not None and how != "drops out for a while":
            parts.nodes_struck.add(instance.id)
        if how == "removed":
            parts.swarm.remove_node(node_id)
            return
        parts.swarm.node_lost(node_id)
        if how == "drops out for a while":
            parts.world.after(away_s, self._back, node_id)

    def _back(self, node_id: str) -> None:
        parts = self._parts
        node = parts.swarm.nodes.get(node_id)
        instance = parts.instance_of(node) if node is not None else None
        if node is not None and node.state == "down" and instance is not None and instance.state == "running":
            parts.swarm.node_back(node_id, node.engine_labels)
            self._note(f"node {node_id} is back")

    def _device(self) -> None:
        parts, dice = self._parts, self._dice
        volumes = sorted(v for v in parts.cloud.volumes.volumes if v not in parts.machines.missing_devices)
        if not volumes:
            return
        volume_id = dice.pick(volumes, f"c{dice.cycle} device which")
        owner = owner_of(parts.cloud.volumes.volumes[volume_id].tags)
        detail = f"volume {volume_id} of {owner}: its device does not appear on the machine it is attached to"
        if dice.fires("device", "world device", detail, owner=str(owner)):
            parts.machines.missing_devices.add(volume_id)

    def _pull(self) -> None:
        """A booting buffer machine's pull fails; or the registry refuses the buffer's image until the calm (every
        buffer machine booting meanwhile never joins); or a node's pulls fail for a while (tasks are rejected)."""
        parts, dice = self._parts, self._dice
        cycle = dice.cycle
        booting = sorted(
            i.id
            for i in parts.cloud.instances.values()
            if i.tags.get(INSTANCE_BUFFER_TAG) == "true"
            and i.state in ("pending", "running")
            and i.id not in parts.machines.node_of
            and i.id not in parts.machines.boots_failed
        )
        if self._registry_down:
            for instance_id in booting:
                parts.machines.fail_pull(instance_id)
                dice.history.strikes[(BUFFER, "registry")] += 1
            return
        how = dice.pick(("machine", "registry", "node"), f"c{cycle} pull how")
        if how == "registry" and parts.machines.buffer_images:
            detail = "the registry refuses the buffer's image until the calm: no buffer machine's boot completes"
            if dice.fires("pull", "world pull", detail, owner=BUFFER):
                self._registry_down = True
                for instance_id in booting:
                    parts.machines.fail_pull(instance_id)
            return
        if how == "machine" and booting:
            instance_id = dice.pick(booting, f"c{cycle} pull which machine")
            detail = f"buffer machine {instance_id}: the image pull of its boot fails (it never joins)"
            if dice.fires("pull", "world pull", detail, owner=BUFFER):
                parts.machines.fail_pull(instance_id)
            return
        nodes = sorted(n.id for n in parts.swarm.nodes.values() if n.state == "ready")
        if not nodes:
            return
        node_id = dice.pick(nodes, f"c{cycle} pull which node")
        for_s = dice.pick(_PULL_FAILS_S, f"c{cycle} pull how long")
        node = parts.swarm.nodes[node_id]
        instance = parts.instance_of(node)
        whose = whose_instance(instance) if instance is not None else ""
        detail = f"node {node_id} (of {whose or 'no machine'}): image pulls fail for {for_s:g} s"
        if dice.fires("pull", "world pull", detail, owner=whose):
            parts.swarm.failing_pulls.add(node_id)
            parts.world.after(for_s, parts.swarm.failing_pulls.discard, node_id)

    def _foreign_work(self) -> None:
        parts, dice = self._parts, self._dice
        for_s = dice.pick(_FOREIGN_S, f"c{dice.cycle} foreign how long")
        detail = f"a service of nobody's, with cache labels and no owner constraints, for {for_s:g} s"
        if not dice.fires("foreign", "world foreign", detail):
            return
        labels = CachePolicy(enabled=True, ttl_s=60, size_gib=10).to_labels()
        service_id = parts.swarm.create_service(
            f"foreign-{dice.cycle}",
            labels,
            (),
            Resources(0.25, GIB // 4),
            SESSION_IMAGE,
            on_running=lambda _node: None,
            on_interrupted=lambda: None,
        )
        self._foreign.append(service_id)
        parts.world.after(for_s, self._end_foreign, service_id)

    def _end_foreign(self, service_id: str) -> None:
        if service_id in self._foreign:
            self._foreign.remove(service_id)
            self._parts.swarm.remove_service(service_id)
