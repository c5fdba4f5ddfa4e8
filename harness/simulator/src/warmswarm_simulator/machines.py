"""What an instance's boot does, as warmswarm's user data does it: boot, wait for its cache volume, mount, join.

A machine launched for a volume (tagged warmswarm:volume-id) waits up to device_wait_s for it to be attached, mounts
it, and only then joins the swarm with the cache label on its daemon; without it by then, it joins without the label.
A machine of a buffer (tagged warmswarm:buffer=true) pulls the buffer's images before it joins; a pull that
fails stops its boot (`set -eu`): it never joins. A volume attached to a running machine that joined, and that its
tags name (a hot claim), is mounted while it runs (node_cache.sh's hot mode): the node's cache label appears
hot_mount_s after the attach. A stopped machine that starts again comes back as the same node
(per-boot units mount the volume again). A boot that starts while the machine's warmswarm:scrub tag is
pending-<n> (a recycled machine) scrubs the previous owner's traces before Docker starts: it takes scrub_s longer,
and its node carries the proof warmswarm.scrubbed=<n> for that boot only (the label is written by the boot that
scrubbed, as the cache label is by the boot that mounted). A machine that stops or terminates is seen "down" by the
swarm a heartbeat timeout later. The fault campaign (faults/) breaks boots on purpose: `missing_devices` (volumes
whose device never shows up on the machine they are attached to) and `fail_pull` (a buffer machine whose pull fails);
the day never sets either.

The baseline's warm buffer is osparc's: a machine launched with OSPARC_WARM_BUFFER_TAG=true runs
ec2_warm_buffer_startup_script on its first boot (pull the images, no swarm join) and is tagged with what it pulled
(OSPARC_PRE_PULLED_IMAGES_TAG; osparc's autoscaler writes that tag once its SSM pull command succeeded: the SSM round
trip is folded into the boot here). The images stay on its root disk; when it is started again (its user data then
the join command) its node joins with them.
"""

from __future__ import annotations

from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_models import (
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_BUFFER_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_VOLUME_TAG,
    SCRUB_PENDING_PREFIX,
    Resources,
)

from warmswarm_simulator.cache_writes import boot_fill_label
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_values import SimInstance, SimVolume
from warmswarm_simulator.config import Model
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.world import World

# osparc-simcore's tag keys (services/autoscaling/src/simcore_service_autoscaling/constants.py): its
# WARM_BUFFER_MACHINE_TAG_KEY ("true" while in the pool, "false" once activated) and
# INSTANCE_PRE_PULLED_IMAGES_EC2_TAG_KEY.
OSPARC_WARM_BUFFER_TAG = "io.simcore.autoscaling.warm_buffer_machine"
OSPARC_PRE_PULLED_IMAGES_TAG = "io.simcore.autoscaling.pre_pulled_images"


class Machines:
    def __init__(
        self,
        world: World,
        model: Model,
        cloud: Cloud,
        swarm: Swarm,
        *,
        join_availability: str,
        device_wait_s: float,
        buffer_images: tuple[str, ...] = (),
    ) -> None:
        self._world = world
        self._model = model
        self._cloud = cloud
        self._swarm = swarm
        self._join_availability = join_availability  # warmswarm's boot joins drained; osparc's nodes join active
        self._device_wait_s = device_wait_s
        self.buffer_images = buffer_images  # what a buffer machine's first boot pulls (warmswarm's before it joins)
        self.images_on_disk: dict[str, tuple[str, ...]] = {}  # instance id -> images its root disk holds, unjoined
        self.node_of: dict[str, str] = {}  # instance id -> its swarm node id, once joined
        self._waiting_device: dict[str, str] = {}  # instance id -> the volume its boot waits for
        cloud.listeners.append(self._instance_changed)
        cloud.volumes.listeners.append(self._volume_changed)
        self.joined_without_cache = 0
        # Volumes whose device does not show up on the machine they are attached to, for now (an impaired volume,
        # a device the kernel never sees): a boot that waits for one times out and joins without the cache.
        self.missing_devices: set[str] = set()
        self._failing_pulls: set[str] = set()  # buffer machines whose first boot's image pull fails
        self.boots_failed: set[str] = set()  # machines whose boot stopped before the join: they never join
        # instance id -> the generation its boot under way scrubbed for (None: a scrub owed but unreadable, done
        # without a proof); absent: this boot owes no scrub.
        self._scrub_of_boot: dict[str, int | None] = {}
        self.scrubs = 0  # boots that scrubbed

    @classmethod
    def of_warmswarm(
        cls, world: World, model: Model, cloud: Cloud, swarm: Swarm, settings: AutoscalingSettings
    ) -> Machines:
        """Machines as warmswarm's user data boots them: nodes join drained, a boot waits device_wait_s for its
        volume, and a buffer machine pulls buffer_images before it joins (apply.py's pull_images)."""
        return cls(
            world,
            model,
            cloud,
            swarm,
            join_availability="drain",
            device_wait_s=float(settings.device_wait_s),
            buffer_images=tuple(settings.buffer_images),
        )

    def _instance_changed(self, instance: SimInstance) -> None:
        if instance.state == "running":
            ec2 = self._model.ec2
            boot_s = ec2.boot_to_join_s if instance.boots <= 1 else ec2.restart_boot_s
            # The boot reads the tag as it starts (instance metadata tags): what is written later is for the next boot.
            scrub = instance.tags.get(INSTANCE_SCRUB_TAG, "")
            if scrub.startswith(SCRUB_PENDING_PREFIX):
                self.scrubs += 1
                self._scrub_of_boot[instance.id] = _generation(scrub[len(SCRUB_PENDING_PREFIX) :])
                boot_s += ec2.scrub_s
            else:
                self._scrub_of_boot.pop(instance.id, None)
            self._world.after(boot_s, self._booted, instance, instance.generation)
        elif instance.state in ("stopping", "shutting-down"):
            self._waiting_device.pop(instance.id, None)
            self._scrub_of_boot.pop(instance.id, None)  # a next boot owes its own scrub, read as it starts
            node_id = self.node_of.get(instance.id)
            if node_id is not None:
                self._world.after(self._model.swarm.node_down_after_s, self._swarm.node_lost, node_id)

    def _booted(self, instance: SimInstance, generation: int) -> None:
        if instance.generation != generation or instance.id in self.boots_failed:
            return  # stopped or terminated while booting; or its first boot stopped (user data runs once)
        volume_id = instance.tags.get(INSTANCE_VOLUME_TAG)
        if instance.boots <= 1 and instance.tags.get(OSPARC_WARM_BUFFER_TAG) == "true":
            self._world.after(self._model.swarm.image_pull_s, self._pulled_to_disk, instance, generation)
        elif volume_id is None and instance.boots <= 1 and instance.tags.get(INSTANCE_BUFFER_TAG) == "true":
            self._world.after(self._model.swarm.image_pull_s, self._pulled, instance, generation)
        elif volume_id is None:
            self._join(instance, None)
        elif self._attached_here(volume_id, instance.id) and volume_id not in self.missing_devices:
            self._world.after(self._model.ebs.mount_s, self._mounted, instance, generation, volume_id)
        else:
            self._waiting_device[instance.id] = volume_id
            self._world.after(self._device_wait_s, self._device_timeout, instance, generation, volume_id)

    def fail_pull(self, instance_id: str) -> None:
        """The buffer machine's image pull fails (a registry that refuses it): its first boot stops, it never joins."""
        self._failing_pulls.add(instance_id)

    def _pulled(self, instance: SimInstance, generation: int) -> None:
        if instance.generation != generation:
            return
        if instance.id in self._failing_pulls:
            self.boots_failed.add(instance.id)
            return
        self._join(instance, None)
        node = self._swarm.nodes.get(self.node_of[instance.id])
        if node is not None:
            node.images.update(self.buffer_images)

    def _pulled_to_disk(self, instance: SimInstance, generation: int) -> None:
        """An osparc warm buffer's images are pulled: on its disk, tagged for the autoscaler (which then stops it)."""
        if instance.generation != generation:
            return
        self.images_on_disk[instance.id] = self.buffer_images
        self._cloud.tag_instance(instance.id, {OSPARC_PRE_PULLED_IMAGES_TAG: ",".join(self.buffer_images)})

    def _attached_here(self, volume_id: str, instance_id: str) -> bool:
        volume = self._cloud.volumes.get(volume_id)
        attachment = volume.attachment if volume is not None else None
        return attachment is not None and attachment.instance_id == instance_id and attachment.state == "attached"

    def _volume_changed(self, volume: SimVolume) -> None:
        attachment = volume.attachment
        if attachment is None or attachment.state != "attached":
            return
        if self._hot_attached(volume.id, attachment.instance_id):
            return
        if self._waiting_device.get(attachment.instance_id) != volume.id or volume.id in self.missing_devices:
            return
        del self._waiting_device[attachment.instance_id]
        instance = self._cloud.instances[attachment.instance_id]
        self._world.after(self._model.ebs.mount_s, self._mounted, instance, instance.generation, volume.id)

    def _hot_attached(self, volume_id: str, instance_id: str) -> bool:
        """A volume attached to a machine that runs, joined, and whose tags name it: mounted while it runs."""
        instance = self._cloud.instances.get(instance_id)
        node = self._swarm.nodes.get(self.node_of.get(instance_id, ""))
        if instance is None or node is None or node.state != "ready" or instance.state != "running":
            return False
        if instance_id in self._waiting_device or instance.tags.get(INSTANCE_VOLUME_TAG) != volume_id:
            return False
        if volume_id not in self.missing_devices:
            self._world.after(self._model.ebs.hot_mount_s, self._hot_mounted, instance, instance.generation, volume_id)
        return True

    def _hot_mounted(self, instance: SimInstance, generation: int, volume_id: str) -> None:
        node_id = self.node_of.get(instance.id)
        if instance.generation == generation and node_id is not None:
            self._swarm.engine_labels_reloaded(node_id, self._engine_labels(instance, volume_id))

    def _device_timeout(self, instance: SimInstance, generation: int, volume_id: str) -> None:
        if instance.generation == generation and self._waiting_device.get(instance.id) == volume_id:
            del self._waiting_device[instance.id]
            self.joined_without_cache += 1
            self._join(instance, None)

    def _mounted(self, instance: SimInstance, generation: int, volume_id: str) -> None:
        if instance.generation == generation:
            self._join(instance, volume_id)

    def _engine_labels(self, instance: SimInstance, mounted_volume_id: str | None) -> dict[str, str]:
        """What this boot wrote on the daemon: the instance, the volume it mounted, the scrub it finished."""
        engine_labels = {ENGINE_LABEL_INSTANCE_ID: instance.id}
        if mounted_volume_id is not None:
            engine_labels[ENGINE_LABEL_CACHE_VOLUME] = mounted_volume_id
            # The boot's first check of the mounted file system, before its sessions write (cache_writes.py).
            volume = self._cloud.volumes.get(mounted_volume_id)
            engine_labels.update(boot_fill_label(volume, self._model.writes.fill_step_percent))
        scrubbed = self._scrub_of_boot.get(instance.id)
        if scrubbed is not None:
            engine_labels[ENGINE_LABEL_SCRUBBED] = str(scrubbed)
        return engine_labels

    def _join(self, instance: SimInstance, mounted_volume_id: str | None) -> None:
        engine_labels = self._engine_labels(instance, mounted_volume_id)
        node_id = self.node_of.get(instance.id)
        if node_id is not None and node_id in self._swarm.nodes:
            self._swarm.node_back(node_id, engine_labels)
            return
        node_id = self.node_of[instance.id] = self._swarm.join(
            instance.id,
            instance.private_ip,
            self.node_resources(instance.instance_type),
            engine_labels,
            self._join_availability,
        )
        self._swarm.nodes[node_id].images.update(self.images_on_disk.get(instance.id, ()))

    def node_resources(self, instance_type: str) -> Resources:
        """What the node reports to swarm: the type's CPUs and GPUs, and the memory its kernel leaves."""
        spec = self._model.instance_types[instance_type].resources
        memory_bytes = int(spec.memory_bytes * self._model.swarm.node_memory_share)
        return Resources(spec.cpus, memory_bytes, spec.generic)


def _generation(raw: str) -> int | None:
    """The generation a pending scrub names, as the boot's scrub reads it (ASCII digits, from 1; nine digits at most,
    far past any recycle count, so a garbled tag is not parsed at length); None otherwise: such a boot scrubs all the
    same but writes no proof."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        return None
    return int(raw) or None
