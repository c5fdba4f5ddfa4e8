"""The simulator's cloud model keeps AWS's rules: the AZ and single-attach rules, states and timings, ClientTokens,
capacity per type and zone, and a bill computed as AWS computes it (stopped instances cost their disks only)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest
from warmswarm_models import VOLUME_RELEASED_AT_TAG
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.cloud_values import CloudError
from warmswarm_simulator.cloud_volumes import MODIFICATION_TIMING
from warmswarm_simulator.config import Model, Outage, load_model
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE_A, ZONE_B = MODEL.availability_zones[:2]


class Sim:
    """A cloud on a virtual clock that moves only when the test says so."""

    def __init__(self, model: Model = MODEL) -> None:
        self.loop = VirtualLoop()
        self.world = World(self.loop, model.day_epoch_s)
        self.cloud = Cloud(self.world, model)
        self.model = model

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def running_instance(self, zone: str = ZONE_A, instance_type: str = "t3.medium") -> str:
        (instance_id,) = self.cloud.run_instances(instance_type, zone, 1, {})
        self.advance(self.model.ec2.pending_s + 0.1)
        assert self.cloud.instances[instance_id].state == "running"
        return instance_id

    def available_volume(self, zone: str = ZONE_A, size_gib: int = 20) -> str:
        volume_id = self.cloud.volumes.create(zone, size_gib, "gp3", {}, token="")
        self.advance(self.model.ebs.create_s + 0.1)
        return volume_id


@pytest.fixture
def sim() -> Iterator[Sim]:
    made = Sim()
    yield made
    made.loop.close()


def test_an_instance_is_pending_then_running_after_the_modelled_time(sim: Sim) -> None:
    (instance_id,) = sim.cloud.run_instances("t3.medium", ZONE_A, 1, {})
    sim.advance(MODEL.ec2.pending_s - 1)
    assert sim.cloud.instances[instance_id].state == "pending"
    sim.advance(1.1)
    assert sim.cloud.instances[instance_id].state == "running"


def test_a_volume_attaches_only_in_its_own_zone(sim: Sim) -> None:
    volume_id = sim.available_volume(ZONE_A)
    elsewhere = sim.running_instance(ZONE_B)
    with pytest.raises(CloudError) as refused:
        sim.cloud.volumes.attach(volume_id, elsewhere, "/dev/sdf")
    assert refused.value.code == "InvalidVolume.ZoneMismatch"
    assert sim.cloud.volumes.volumes[volume_id].state == "available"


def test_a_volume_is_attached_to_one_instance_at_most(sim: Sim) -> None:
    volume_id = sim.available_volume()
    first, second = sim.running_instance(), sim.running_instance()
    sim.cloud.volumes.attach(volume_id, first, "/dev/sdf")
    with pytest.raises(CloudError) as refused:
        sim.cloud.volumes.attach(volume_id, second, "/dev/sdf")
    assert refused.value.code == "VolumeInUse"
    attachment = sim.cloud.volumes.volumes[volume_id].attachment
    assert attachment is not None
    assert attachment.instance_id == first


def test_attach_takes_its_time_and_needs_a_running_or_stopped_instance(sim: Sim) -> None:
    volume_id = sim.available_volume()
    (pending,) = sim.cloud.run_instances("t3.medium", ZONE_A, 1, {})
    with pytest.raises(CloudError) as refused:
        sim.cloud.volumes.attach(volume_id, pending, "/dev/sdf")
    assert refused.value.code == "IncorrectInstanceState"
    sim.advance(MODEL.ec2.pending_s + 0.1)
    sim.cloud.volumes.attach(volume_id, pending, "/dev/sdf")
    volume = sim.cloud.volumes.volumes[volume_id]
    assert volume.state == "in-use"
    assert volume.attachment is not None
    assert volume.attachment.state == "attaching"
    sim.advance(MODEL.ebs.attach_s + 0.1)
    assert volume.attachment is not None
    assert volume.attachment.state == "attached"


def test_a_tag_change_does_not_cancel_a_pending_attach(sim: Sim) -> None:
    # A claim or a release tags the volume in the cycle that attaches it: the attach still lands after attach_s.
    volume_id = sim.available_volume()
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.cloud.volumes.set_tags(volume_id, {VOLUME_RELEASED_AT_TAG: "2026-03-02T08:00:00Z"})
    sim.advance(MODEL.ebs.attach_s + 0.1)
    volume = sim.cloud.volumes.volumes[volume_id]
    assert volume.attachment is not None
    assert volume.attachment.state == "attached"
    assert VOLUME_RELEASED_AT_TAG in volume.value().tags  # the tag is read all the same


def test_a_tag_change_does_not_cancel_a_pending_create_or_detach(sim: Sim) -> None:
    volume_id = sim.cloud.volumes.create(ZONE_A, 20, "gp3", {"a": "1"}, token="")
    sim.cloud.volumes.delete_tags(volume_id, ["a"])
    sim.advance(MODEL.ebs.create_s + 0.1)
    assert sim.cloud.volumes.volumes[volume_id].state == "available"
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.advance(MODEL.ebs.attach_s + 0.1)
    sim.cloud.volumes.detach(volume_id, instance_id)
    sim.cloud.volumes.set_tags(volume_id, {"b": "2"})
    sim.advance(MODEL.ebs.detach_s + 0.1)
    volume = sim.cloud.volumes.volumes[volume_id]
    assert volume.state == "available"
    assert volume.attachment is None


def test_a_detach_while_attaching_supersedes_the_attach(sim: Sim) -> None:
    # A change of state does cancel the pending one: the volume is never "attached" after it was let go.
    volume_id = sim.available_volume()
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.cloud.volumes.detach(volume_id, instance_id)
    sim.advance(MODEL.ebs.attach_s + 0.1)
    volume = sim.cloud.volumes.volumes[volume_id]
    assert volume.attachment is not None
    assert volume.attachment.state == "detaching"
    sim.advance(MODEL.ebs.detach_s)
    assert volume.state == "available"
    assert volume.attachment is None


def test_a_volume_grows_by_awss_rules_only_larger_one_at_a_time_six_hours_apart(sim: Sim) -> None:
    volume_id = sim.available_volume(size_gib=20)
    volumes = sim.cloud.volumes

    def refusal(size_gib: int) -> str:
        with pytest.raises(CloudError) as refused:
            volumes.modify(volume_id, size_gib)
        return refused.value.code

    assert refusal(10) == "InvalidParameterValue"
    volumes.modify(volume_id, 40)
    assert volumes.volumes[volume_id].size_gib == 40
    assert refusal(80) == "IncorrectModificationState"  # still modifying
    sim.advance(MODIFICATION_TIMING.modifying_s + MODIFICATION_TIMING.optimizing_s + 1)
    assert refusal(80) == "VolumeModificationRateExceeded"  # completed, within six hours
    assert volumes.volumes[volume_id].size_gib == 40  # what was refused changed nothing
    sim.advance(MODIFICATION_TIMING.cooldown_s)
    volumes.modify(volume_id, 80)
    assert volumes.volumes[volume_id].size_gib == 80


def test_a_growth_does_not_cancel_a_pending_attach(sim: Sim) -> None:
    volume_id = sim.available_volume()
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.cloud.volumes.modify(volume_id, 40)
    sim.advance(MODEL.ebs.attach_s + 0.1)
    attachment = sim.cloud.volumes.volumes[volume_id].attachment
    assert attachment is not None
    assert attachment.state == "attached"


def test_a_creating_volume_cannot_be_attached_yet(sim: Sim) -> None:
    instance_id = sim.running_instance()
    volume_id = sim.cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="")
    with pytest.raises(CloudError) as refused:
        sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    assert refused.value.code == "IncorrectState"


def test_terminating_the_instance_releases_its_volume_with_the_data_and_deletes_the_root_disk(sim: Sim) -> None:
    volume_id = sim.available_volume()
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.advance(MODEL.ebs.attach_s + 0.1)
    sim.cloud.volumes.volumes[volume_id].data.add("alice/p1/n1")
    sim.cloud.terminate_instances([instance_id])
    assert sim.cloud.instances[instance_id].state == "shutting-down"
    with pytest.raises(CloudError) as in_use:
        sim.cloud.volumes.delete(volume_id)
    assert in_use.value.code == "VolumeInUse"
    sim.advance(MODEL.ec2.shutdown_s + 0.1)
    volume = sim.cloud.volumes.volumes[volume_id]
    assert sim.cloud.instances[instance_id].state == "terminated"
    assert volume.state == "available"
    assert volume.attachment is None
    assert volume.data == {"alice/p1/n1"}
    sim.cloud.volumes.delete(volume_id)
    assert volume_id not in sim.cloud.volumes.volumes


def test_detach_frees_the_volume_after_the_modelled_time(sim: Sim) -> None:
    volume_id = sim.available_volume()
    instance_id = sim.running_instance()
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.advance(MODEL.ebs.attach_s + 0.1)
    sim.cloud.volumes.detach(volume_id, instance_id)
    assert sim.cloud.volumes.volumes[volume_id].state == "in-use"
    sim.advance(MODEL.ebs.detach_s + 0.1)
    assert sim.cloud.volumes.volumes[volume_id].state == "available"


def test_a_client_token_answers_with_what_it_made_the_first_time(sim: Sim) -> None:
    first = sim.cloud.run_instances("t3.medium", ZONE_A, 1, {}, token="tok-1")
    again = sim.cloud.run_instances("t3.medium", ZONE_A, 1, {}, token="tok-1")
    assert again == first
    assert len(sim.cloud.instances) == 1
    volume = sim.cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="vol-tok")
    assert sim.cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="vol-tok") == volume


def test_no_capacity_is_per_type_zone_and_time() -> None:
    outage = Outage(("t3.medium",), ZONE_A, from_s=100.0, to_s=200.0)
    sim = Sim(dataclasses.replace(MODEL, outages=(outage,)))
    try:
        sim.cloud.run_instances("t3.medium", ZONE_A, 1, {})  # before the outage
        sim.advance(100.0)
        with pytest.raises(CloudError) as refused:
            sim.cloud.run_instances("t3.medium", ZONE_A, 1, {})
        assert refused.value.code == "InsufficientInstanceCapacity"
        sim.cloud.run_instances("t3.medium", ZONE_B, 1, {})  # another zone
        sim.cloud.run_instances("t3.large", ZONE_A, 1, {})  # another type
        sim.advance(100.0)
        sim.cloud.run_instances("t3.medium", ZONE_A, 1, {})  # over
        assert len(sim.cloud.instances) == 4
    finally:
        sim.loop.close()


def test_a_start_finds_no_capacity_reserved_while_stopped() -> None:
    outage = Outage(("t3.medium",), ZONE_A, from_s=500.0, to_s=600.0)
    sim = Sim(dataclasses.replace(MODEL, outages=(outage,)))
    try:
        instance_id = sim.running_instance()
        sim.cloud.stop_instances([instance_id])
        sim.advance(500.0)
        assert sim.cloud.instances[instance_id].state == "stopped"
        with pytest.raises(CloudError) as refused:
            sim.cloud.start_instances([instance_id])
        assert refused.value.code == "InsufficientInstanceCapacity"
        sim.advance(100.0)
        sim.cloud.start_instances([instance_id])
        sim.advance(MODEL.ec2.start_pending_s + 0.1)
        assert sim.cloud.instances[instance_id].state == "running"
        assert sim.cloud.instances[instance_id].boots == 2
    finally:
        sim.loop.close()


def test_running_time_is_billed_per_second_with_a_minute_minimum_and_disks_per_gb_month(sim: Sim) -> None:
    short = sim.running_instance(instance_type="t3.medium")  # running from pending_s on
    sim.advance(10.0)
    sim.cloud.terminate_instances([short])  # 10.1 s running: billed the 60 s minimum
    short_disk_s = sim.world.now_s + MODEL.ec2.shutdown_s  # the root disk lives until terminated
    long_launched_s = sim.world.now_s
    long = sim.running_instance(instance_type="m5.large")
    sim.advance(3600.0)
    sim.cloud.terminate_instances([long])  # 3600.1 s running
    long_disk_s = sim.world.now_s + MODEL.ec2.shutdown_s - long_launched_s
    sim.advance(MODEL.ec2.shutdown_s + 1)
    bill = sim.cloud.meter.bill(sim.world.now_s)
    assert bill.instance_usd == pytest.approx(60 / 3600 * 0.0416 + 3600.1 / 3600 * 0.096, rel=1e-6)
    assert bill.instance_hours_by_type["m5.large"] == pytest.approx(3600.1 / 3600, rel=1e-6)
    root_gib_s = MODEL.ec2.root_volume_gib * (short_disk_s + long_disk_s)
    assert bill.root_usd == pytest.approx(root_gib_s / (730 * 3600) * 0.08, rel=1e-6)
    assert bill.cache_usd == 0.0


def test_a_stopped_instance_costs_its_disks_only(sim: Sim) -> None:
    instance_id = sim.running_instance(instance_type="m5.xlarge")
    volume_id = sim.available_volume(size_gib=100)
    sim.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    sim.cloud.stop_instances([instance_id])
    before = sim.cloud.meter.bill(sim.world.now_s)
    sim.advance(86_400.0)
    after = sim.cloud.meter.bill(sim.world.now_s)
    assert after.instance_usd == before.instance_usd  # no compute while stopped
    disk_usd = (100 + MODEL.ec2.root_volume_gib) * 86_400 / (730 * 3600) * 0.08
    assert after.ebs_usd - before.ebs_usd == pytest.approx(disk_usd, rel=1e-6)
    assert sim.cloud.instances[instance_id].state == "stopped"
    assert sim.cloud.volumes.volumes[volume_id].state == "in-use"  # stays attached while stopped


def test_a_grown_volume_is_billed_at_its_new_size_from_its_growth(sim: Sim) -> None:
    volume_id = sim.available_volume(size_gib=100)
    before = sim.cloud.meter.bill(sim.world.now_s)
    sim.advance(3600.0)
    sim.cloud.volumes.modify(volume_id, 300)
    sim.advance(3600.0)
    after = sim.cloud.meter.bill(sim.world.now_s)
    cache_usd = (100 + 300) * 3600 / (730 * 3600) * 0.08  # an hour at 100 GiB, then an hour at 300
    assert after.cache_usd - before.cache_usd == pytest.approx(cache_usd, rel=1e-6)
