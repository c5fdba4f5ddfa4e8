"""What an instance's boot does, as warmswarm's user data does it: boot, wait for its cache volume, mount, join.

A machine launched for a volume (tagged warmswarm:volume-id) waits up to device_wait_s for it to be attached, mounts
it, and only then joins the swarm with the cache label on its daemon; without it by then, it joins without the label.
A machine of a buffer (tagged warmswarm:buffer=true) pulls the buffer's images before it joins; a pull that
fails stops its boot (`set -eu`): it never joins. A volume attached to a running machine that joined, and that its
tags name (a hot claim), is mounted while it runs (node_cache.sh's hot mode): the node's cache label appears
hot_mount_s after the attach. A stopped machine that starts again comes back as the same node
(per-boot units mount the volume again). A recycled machine's scrub keeps the contract of issue 42
(docs/reliability.md): the proof warmswarm.scrubbed=<token> lives in daemon.json (`proofs_on_disk`), survives boots
and is carried by every node that joins from that disk; a boot whose warmswarm:scrub tag reads pending-<token> first
drops any proof, then scrubs (scrub_s longer before Docker starts) and writes the proof of exactly that token; a token
that is not <n>.<t> (a legacy pending-<n>, a garbled tag) is refused: Docker does not start, that boot never joins. A
second run of the scrub within one boot skips only the token this boot already scrubbed (a per-boot marker, /run on
EC2). The boot reads the tag when the metadata service answers it (`metadata_late_s`, the fault campaign's: late
answers that the boot's bounded retries wait out), and a reboot (`reboot`) is a boot of its own. A machine that stops
or terminates is seen "down" by the
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

import re
from collections.abc import Callable

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
# A scrub token as the node's scrub accepts it: <n>.<t>, the recycle generation (from 1) and the mark's moment (whole
# epoch seconds); bounded, so that a garbled tag is not parsed at length.
_TOKEN = re.compile(r"[1-9][0-9]{0,8}\.[0-9]{1,12}")


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
        # daemon.json's proof per machine (the token its last scrub wrote): on the root disk, it survives boots.
        self.proofs_on_disk: dict[str, str] = {}
        # The per-boot marker (/run/warmswarm, a tmpfs): the token this boot scrubbed; emptied at every boot.
        self._scrubbed_this_boot: dict[str, str] = {}
        # Per machine, the last scrub that finished: (the boot it ran in, SimInstance.boots; its token).
        self.last_scrub: dict[str, tuple[int, str]] = {}
        self.scrubs = 0  # scrubs that ran (a boot's, or a second run's for another token)
        self.scrub_refusals = 0  # boots whose scrub refused the tag's token: Docker did not start
        self.boot_began_s: dict[str, float] = {}  # instance id -> when its boot under way began (world s)
        # How late the metadata service answers a boot that starts (the fault campaign's hook): 0 for none.
        self.metadata_late_s: Callable[[SimInstance], float] | None = None

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
            self._boot(instance)
        elif instance.state in ("stopping", "shutting-down"):
            self._waiting_device.pop(instance.id, None)
            self._scrubbed_this_boot.pop(instance.id, None)  # /run goes with the boot
            node_id = self.node_of.get(instance.id)
            if node_id is not None:
                self._world.after(self._model.swarm.node_down_after_s, self._swarm.node_lost, node_id)

    def reboot(self, instance_id: str) -> None:
        """The running machine's OS reboots (EC2 keeps it running): Docker stops at once, its node goes down, and a
        boot of its own runs every per-boot unit again (the scrub's included, with /run emptied)."""
        instance = self._cloud.instances[instance_id]
        if instance.state != "running":
            return
        instance.boots += 1
        instance.generation += 1  # the last boot's timers find it changed and do nothing
        instance.touch()
        self._waiting_device.pop(instance.id, None)
        node_id = self.node_of.get(instance.id)
        if node_id is not None:
            self._swarm.node_lost(node_id)
        self._boot(instance)

    def _boot(self, instance: SimInstance) -> None:
        self._scrubbed_this_boot.pop(instance.id, None)
        self.boot_began_s[instance.id] = self._world.now_s
        late_s = self.metadata_late_s(instance) if self.metadata_late_s is not None else 0.0
        self._world.after(late_s, self._tags_read, instance, instance.generation)

    def _tags_read(self, instance: SimInstance, generation: int) -> None:
        """The metadata service answered: the boot reads the tags as they are now (what is written later is for the
        next boot), scrubs if the scrub tag asks for one, and goes on."""
        if instance.generation != generation:
            return
        ec2 = self._model.ec2
        boot_s = ec2.boot_to_join_s if instance.boots <= 1 else ec2.restart_boot_s
        if not self._scrub_unit(instance, then_boot_s=boot_s):
            self._world.after(boot_s, self._booted, instance, generation)

    def _scrub_unit(self, instance: SimInstance, *, then_boot_s: float | None) -> bool:
        """One run of the scrub unit: False when the tag owes no scrub (the boot goes on at once). Otherwise it drops
        every proof first; it refuses a token it cannot read (this boot never joins), skips a token this boot
        scrubbed already, and scrubs for scrub_s then writes the token's proof; the boot (`then_boot_s`) goes on
        after it, or a daemon that runs reloads its labels (a second run in one boot)."""
        scrub = instance.tags.get(INSTANCE_SCRUB_TAG, "")
        if not scrub.startswith(SCRUB_PENDING_PREFIX):
            return False
        token = scrub[len(SCRUB_PENDING_PREFIX) :]
        self.proofs_on_disk.pop(instance.id, None)  # before anything that could skip the scrub
        if _TOKEN.fullmatch(token) is None:
            self.scrub_refusals += 1
            return True
        if self._scrubbed_this_boot.get(instance.id) == token:
            self.proofs_on_disk[instance.id] = token  # this very boot scrubbed it: nobody's work came since
            self._reload(instance)
            return True
        self.scrubs += 1
        self._world.after(self._model.ec2.scrub_s, self._scrubbed, instance, instance.generation, token, then_boot_s)
        return True

    def _scrubbed(self, instance: SimInstance, generation: int, token: str, then_boot_s: float | None) -> None:
        if instance.generation != generation:
            return  # stopped or rebooted mid-scrub: no proof, the next boot scrubs again
        self.proofs_on_disk[instance.id] = token
        self._scrubbed_this_boot[instance.id] = token
        self.last_scrub[instance.id] = (instance.boots, token)
        if then_boot_s is None:
            self._reload(instance)
        else:
            self._world.after(then_boot_s, self._booted, instance, generation)

    def scrub_again(self, instance_id: str) -> None:
        """A second run of the scrub unit within the boot under way (a unit restarted by hand, by systemd)."""
        instance = self._cloud.instances[instance_id]
        if instance.state == "running":
            self._scrub_unit(instance, then_boot_s=None)

    def _reload(self, instance: SimInstance) -> None:
        node_id = self.node_of.get(instance.id)
        node = self._swarm.nodes.get(node_id) if node_id is not None else None
        if node is not None and node.state == "ready":
            mounted = node.engine_labels.get(ENGINE_LABEL_CACHE_VOLUME)
            self._swarm.engine_labels_reloaded(node.id, self._engine_labels(instance, mounted))

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
        proof = self.proofs_on_disk.get(instance.id)
        if proof is not None:
            engine_labels[ENGINE_LABEL_SCRUBBED] = proof  # whatever daemon.json holds, of this boot or an earlier
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
