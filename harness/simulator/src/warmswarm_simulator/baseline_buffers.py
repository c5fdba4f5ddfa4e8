"""The osparc-like baseline's buffers, per instance type, as osparc-simcore's code keeps them.

Paths in its current tree (ITISFoundation/osparc-simcore, paths in its
current tree; before its refactor #8002 of July 2025 sort_drained_nodes was in
services/autoscaling/src/simcore_service_autoscaling/utils/auto_scaling_core.py and the pool in
modules/buffer_machines_pool_core.py). Both are set per type in EC2_INSTANCES_ALLOWED_TYPES[<type>], osparc's
EC2InstanceBootSpecific (packages/aws-library/src/aws_library/ec2/_models.py), default 0:

- hot buffer (`hot_buffer_count`; here `hot_buffers`): sort_drained_nodes
  (services/autoscaling/src/simcore_service_autoscaling/utils/cluster_scaling.py) takes, per type, the first that
  many drained nodes not yet terminating as the hot buffer, kept out of the termination flow. Each gets its
  `pre_pull_images` pulled (_pre_pull_docker_images_on_idle_hot_buffers, an SSM command; here the session image).
  A pending task takes one by first fit (it is activated, and labelled for its session), and the buffer is
  refilled (_compute_hot_buffer_missing counts the hot-buffer nodes and the machines launched for it still coming;
  the missing ones start from the warm pool first, then launch). A node launched for it joins active here and is
  drained as the first thing of the next cycle (osparc's default AUTOSCALING_DOCKER_JOIN_DRAINED joins it drained).
  `hot_buffer_max_inactivity_time` is not modelled (its default, None, keeps a hot buffer 24/7).
- warm buffer (`buffer_count`; here `warm_buffers`): modules/cluster_scaling/_warm_buffer_machines_pool_core.py
  ("a buffer machine is a stopped pre-initialized EC2 instance with pre-pulled Docker images") launches that many
  machines tagged as the pool's, which pull the images and are stopped; _try_start_warm_buffer_instances
  (modules/cluster_scaling/_auto_scaling_core.py) starts one a pending task fits (StartInstances, a restart boot
  that joins with the images on disk) or one a hot buffer of its type misses; it is activated (tagged) and never
  returns to the pool, which launches a replacement. A start refused for capacity sends its tasks to new machines.

`release_buffers` sets both counts to 0 when the day's sessions are over, as an operator would, so that the world
ends empty and the bill holds every buffer machine from the day's start to its end.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping

from warmswarm_autoscaling.ports import PortError
from warmswarm_autoscaling.snapshot import Instance, Node
from warmswarm_models import CLUSTER_TAG, Resources

from warmswarm_simulator.baseline_rules import NodeMarks
from warmswarm_simulator.billing import BUFFER_MEMBER_TAG
from warmswarm_simulator.config import InstanceTypeSpec
from warmswarm_simulator.machines import OSPARC_PRE_PULLED_IMAGES_TAG, OSPARC_WARM_BUFFER_TAG
from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.simports import SimEc2, SimSwarmPort

CLUSTER = "osparc"
# osparc's pre_pull_images of every type: the image every session runs (the platform's one service).
PRE_PULL_IMAGES: tuple[str, ...] = (SESSION_IMAGE,)


class OsparcBuffers:
    """The hot buffer's drained nodes and the warm pool's stopped machines, over the state Baseline keeps."""

    _types: dict[str, InstanceTypeSpec]
    _zones: tuple[str, ...]
    _ec2: SimEc2
    _swarm: SimSwarmPort
    _marks: NodeMarks
    _hot_targets: dict[str, int]
    _warm_targets: dict[str, int]
    _for_hot_buffer: set[str]
    _pre_pulled: set[str]
    _started_at: dict[str, float]

    def _in_warm_pool(self, instance: Instance) -> bool:
        return instance.tags.get(OSPARC_WARM_BUFFER_TAG) == "true" and instance.id not in self._started_at

    async def _drain_joined_for_hot_buffer(
        self, now_s: float, ours: dict[str, Node], by_addr: dict[str, Instance], used: dict[str, Resources]
    ) -> None:
        """A machine launched for the hot buffer joined (active, as the modelled boot joins): drained before this
        cycle places anything, as osparc's AUTOSCALING_DOCKER_JOIN_DRAINED would have it join and its
        _try_attach_pending_ec2s classify it hot in the same cycle."""
        for node in list(ours.values()):
            instance_id = by_addr[node.addr].id
            if instance_id in self._for_hot_buffer and node.availability == "active" and node.id not in used:
                await self._swarm.update_node(node.id, availability="drain")
                ours[node.id] = dataclasses.replace(node, availability="drain")
                self._marks.clear(node.id)
                self._marks.drained_at[node.id] = now_s

    def _forget_hot_buffer_launches(
        self, live: list[Instance], ours: dict[str, Node], by_addr: dict[str, Instance], used: dict[str, Resources]
    ) -> None:
        """A machine launched for the hot buffer counts as coming until its node is drained (then sort_drained_nodes
        classifies it), or until it is gone or some task took it."""
        coming = {i.id for i in live}
        for node in ours.values():
            if node.availability != "active" or node.id in used:
                coming.discard(by_addr[node.addr].id)
        self._for_hot_buffer &= coming

    def _hot_buffer_nodes(self, ours: dict[str, Node], by_addr: dict[str, Instance]) -> set[str]:
        """osparc's sort_drained_nodes: per type, the first hot_buffer_count drained nodes not terminating."""
        hot: set[str] = set()
        if not self._hot_targets:
            return hot
        taken: Counter[str] = Counter()
        for node in ours.values():
            if node.state != "ready" or node.availability == "active" or node.id in self._marks.terminating_at:
                continue
            name = by_addr[node.addr].instance_type
            if taken[name] < self._hot_targets.get(name, 0):
                taken[name] += 1
                hot.add(node.id)
        return hot

    def _mark_members(self, hot: set[str], ours: dict[str, Node], by_addr: dict[str, Instance]) -> None:
        """A drained node osparc counts in the hot buffer (a session's former node, say) is a buffer member for the
        meter from now on, as the machines launched for it are. The meter's note, not a call osparc makes."""
        for node_id in sorted(hot):
            instance = by_addr[ours[node_id].addr]
            if instance.tags.get(BUFFER_MEMBER_TAG) != "true":
                self._ec2.mark_for_meter(instance.id, buffer_member=True)

    def _claimed(self, instance: Instance) -> None:
        """A hot-buffer machine taken by a session leaves the buffer: the meter bills it in full from now on."""
        if instance.tags.get(BUFFER_MEMBER_TAG) == "true":
            self._ec2.mark_for_meter(instance.id, buffer_member=False)

    async def _pre_pull(self, hot_nodes: list[Node], by_addr: dict[str, Instance]) -> None:
        """osparc's _pre_pull_docker_images_on_idle_hot_buffers: each hot-buffer node pulls pre_pull_images once."""
        for node in hot_nodes:
            instance_id = by_addr[node.addr].id
            if instance_id not in self._pre_pulled:
                await self._swarm.pre_pull(node.id, PRE_PULL_IMAGES)
                self._pre_pulled.add(instance_id)

    async def _run_batch(self, name: str, count: int, tags: Mapping[str, str]) -> list[str]:
        """One RunInstances for `count` machines of a type; [] when every zone refused it or the call failed."""
        for zone in self._zones:  # a zone out of capacity for this type: the next one
            try:
                return await self._ec2.run_batch(name, zone, count, tags)
            except PortError as error:
                if "InsufficientInstanceCapacity" in str(error):
                    continue
                break  # throttled or refused: the next cycle plans again
        return []

    async def _keep_warm_pool(self, pool: list[Instance]) -> None:
        """osparc's warm buffer pool (_warm_buffer_machines_pool_core.py): per type, buffer_count machines; those
        whose images are pulled are stopped, the missing launched, the ones over the count terminated."""
        pool = [i for i in pool if self._in_warm_pool(i)]  # less those this cycle started
        by_type: dict[str, list[Instance]] = {}
        for instance in pool:
            if instance.state != "shutting-down":
                by_type.setdefault(instance.instance_type, []).append(instance)
        surplus: list[str] = []
        for name in self._types:
            kept = by_type.get(name, [])
            target = self._warm_targets.get(name, 0)
            surplus.extend(i.id for i in kept[target:])
            if target > len(kept):
                await self._run_batch(
                    name,
                    target - len(kept),
                    {CLUSTER_TAG: CLUSTER, OSPARC_WARM_BUFFER_TAG: "true", BUFFER_MEMBER_TAG: "true"},
                )
        if surplus:
            await self._ec2.terminate_instances(surplus)
        pulled = [
            i.id
            for i in pool
            if i.state == "running" and OSPARC_PRE_PULLED_IMAGES_TAG in i.tags and i.id not in surplus
        ]
        if pulled:
            await self._ec2.stop_instances(pulled)

    def release_buffers(self) -> None:
        """Both buffers to 0 (the day is over): their machines go the normal way, drained then terminated."""
        self._hot_targets, self._warm_targets = {}, {}
