"""The simulator's other model rules: EC2's token buckets, swarm's scheduler, machines that wait for their cache volume,
and the ports the real autoscaler is driven through (throttles answered with RequestLimitExceeded)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity, LaunchRequest, TokenSpent, VolumeRequest
from warmswarm_ec2rules.throttling import BucketSize, TokenBucket
from warmswarm_models import ENGINE_LABEL_CACHE_VOLUME, INSTANCE_VOLUME_TAG, Owner, Resources
from warmswarm_simulator.buckets import Throttle
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import GIB, Outage, Throttling, load_model
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.simports import THROTTLED, SimEc2, SimSwarmPort
from warmswarm_simulator.swarm import NO_SUITABLE_NODE, Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE_A = MODEL.availability_zones[0]


def test_a_bucket_holds_its_capacity_and_refills_at_its_rate() -> None:
    bucket = TokenBucket.full(BucketSize(burst=5, refill_per_s=2))
    assert [bucket.take(0.0) for _ in range(6)] == [True] * 5 + [False]
    assert not bucket.take(0.4)  # 0.8 of a token
    assert bucket.take(0.5)  # one token after half a second
    assert bucket.level(100.0) == 5  # never above its capacity


def test_a_throttled_call_takes_no_token_and_buckets_are_per_api() -> None:
    throttle = Throttle(
        Throttling(
            request={"describe": BucketSize(2, 1), "mutating": BucketSize(1, 1), "RunInstances": BucketSize(1, 1)},
            resource={"RunInstances": BucketSize(3, 1)},
        )
    )
    assert throttle.admit("DescribeInstances", 0.0)
    assert throttle.admit("DescribeInstances", 0.0)
    assert not throttle.admit("DescribeInstances", 0.0)
    assert throttle.admit("DescribeVolumes", 0.0)  # its own bucket
    assert not throttle.admit("RunInstances", 0.0, instances=4)  # the resource bucket holds 3 instances
    assert throttle.admit("RunInstances", 0.0, instances=3)  # the refused call took no request token
    assert throttle.refused == {"DescribeInstances": 1, "RunInstances": 1}


class Parts:
    def __init__(self, *, join_availability: str = "drain") -> None:
        self.loop = VirtualLoop()
        self.world = World(self.loop, MODEL.day_epoch_s)
        self.cloud = Cloud(self.world, MODEL)
        self.swarm = Swarm(self.world, MODEL.swarm)
        self.machines = Machines(
            self.world, MODEL, self.cloud, self.swarm, join_availability=join_availability, device_wait_s=300.0
        )
        self.running: list[str] = []

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def service(self, constraints: tuple[str, ...] = (), cpus: float = 1.0) -> str:
        return self.swarm.create_service(
            "svc", {}, constraints, Resources(cpus, 2 * GIB), "img", self.running.append, lambda: None
        )


def test_a_task_waits_with_no_suitable_node_until_a_node_of_its_owner_has_room() -> None:
    parts = Parts(join_availability="active")
    alice = Owner("alice", "p1", "n1")
    service_id = parts.service(tuple(alice.constraints()))
    parts.advance(1.0)
    (task,) = parts.swarm.tasks.values()
    assert task.state == "pending"
    assert task.err.startswith(NO_SUITABLE_NODE)
    (instance_id,) = parts.cloud.run_instances("t3.medium", ZONE_A, 1, {})
    parts.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 1)
    node_id = parts.machines.node_of[instance_id]
    assert task.state == "pending"
    assert "scheduling constraints not satisfied on 1 node" in task.err
    parts.swarm.update_node(node_id, alice.labels(), None)
    parts.advance(1.0)
    assert task.state == "preparing"
    assert task.node_id == node_id
    parts.advance(MODEL.swarm.image_pull_s + MODEL.swarm.container_start_s)
    assert task.state == "running"
    assert parts.running == [node_id]
    assert parts.swarm.services[service_id].task_id == task.id
    parts.loop.close()


def test_draining_a_node_stops_its_tasks_and_their_services_get_new_pending_ones() -> None:
    parts = Parts(join_availability="active")
    parts.cloud.run_instances("t3.medium", ZONE_A, 1, {})
    parts.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 1)
    service_id = parts.service()
    parts.advance(MODEL.swarm.image_pull_s + MODEL.swarm.container_start_s + 1)
    (node_id,) = parts.swarm.nodes
    parts.swarm.update_node(node_id, None, "drain")
    parts.advance(1.0)
    (replacement,) = parts.swarm.tasks.values()
    assert replacement.state == "pending"
    assert replacement.node_id is None
    assert parts.swarm.services[service_id].task_id == replacement.id
    assert parts.swarm.interruptions == 1
    parts.loop.close()


def test_a_machine_launched_for_a_volume_joins_once_it_is_attached_and_mounted() -> None:
    parts = Parts()
    volume_id = parts.cloud.volumes.create(ZONE_A, 20, "gp3", {}, token="")
    (instance_id,) = parts.cloud.run_instances("t3.medium", ZONE_A, 1, {INSTANCE_VOLUME_TAG: volume_id})
    parts.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 60)
    assert instance_id not in parts.machines.node_of  # its boot waits for the device
    parts.cloud.volumes.attach(volume_id, instance_id, "/dev/sdf")
    parts.advance(MODEL.ebs.attach_s + MODEL.ebs.mount_s + 0.1)
    node = parts.swarm.nodes[parts.machines.node_of[instance_id]]
    assert node.engine_labels[ENGINE_LABEL_CACHE_VOLUME] == volume_id
    assert node.availability == "drain"  # warmswarm's boot joins drained
    parts.loop.close()


def test_a_machine_whose_volume_never_comes_joins_without_the_cache_label() -> None:
    parts = Parts()
    (instance_id,) = parts.cloud.run_instances("t3.medium", ZONE_A, 1, {INSTANCE_VOLUME_TAG: "vol-0000000000000dead"})
    parts.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 300.0 + 1)
    node = parts.swarm.nodes[parts.machines.node_of[instance_id]]
    assert ENGINE_LABEL_CACHE_VOLUME not in node.engine_labels
    assert parts.machines.joined_without_cache == 1
    parts.loop.close()


def test_the_ports_answer_throttles_and_no_capacity_as_aws_does() -> None:
    outage = Outage(("t3.medium",), ZONE_A, 0.0, 3600.0)
    model = dataclasses.replace(MODEL, outages=(outage,))
    loop = VirtualLoop()
    world = World(loop, model.day_epoch_s)
    cloud = Cloud(world, model)
    throttling = dataclasses.replace(
        model.throttling, request={**model.throttling.request, "mutating": BucketSize(1, 0.1)}
    )
    ec2 = SimEc2(world, model, cloud, Throttle(throttling))

    async def calls() -> None:
        with pytest.raises(InsufficientCapacity):
            await ec2.run_batch("t3.medium", ZONE_A, 1, {})
        request = VolumeRequest(ZONE_A, 20, "gp3", {}, "token-1")
        await ec2.create_volume(request)
        with pytest.raises(Ec2Error) as throttled:
            await ec2.create_volume(VolumeRequest(ZONE_A, 20, "gp3", {}, "token-2"))
        assert throttled.value.code == THROTTLED

    loop.run_until_complete(calls())
    loop.close()
    assert ec2.call_counts[("RunInstances", "InsufficientInstanceCapacity")] == 1
    assert ec2.call_counts[("CreateVolume", "ok")] == 1
    assert ec2.call_counts[("CreateVolume", THROTTLED)] == 1
    assert len(cloud.volumes.volumes) == 1  # the throttled call made nothing


def test_the_ports_answer_a_token_first_used_with_other_arguments_as_spent() -> None:
    """As the adapter reads AWS's IdempotentParameterMismatch: the decision takes the next generation's token."""
    loop = VirtualLoop()
    world = World(loop, MODEL.day_epoch_s)
    cloud = Cloud(world, MODEL)
    ec2 = SimEc2(world, MODEL, cloud, Throttle(MODEL.throttling))

    async def calls() -> None:
        await ec2.create_volume(VolumeRequest(ZONE_A, 20, "gp3", {}, "vol-token"))
        with pytest.raises(TokenSpent) as volume:
            await ec2.create_volume(VolumeRequest(ZONE_A, 40, "gp3", {}, "vol-token"))
        assert (volume.value.token, volume.value.code) == ("vol-token", "IdempotentParameterMismatch")
        launch = LaunchRequest("t3.medium", ZONE_A, "ami-1", "", {}, "launch-token")
        await ec2.run_instance(launch)
        with pytest.raises(TokenSpent) as instance:
            await ec2.run_instance(dataclasses.replace(launch, instance_type="m5.large"))
        assert (instance.value.token, instance.value.code) == ("launch-token", "IdempotentParameterMismatch")

    loop.run_until_complete(calls())
    loop.close()
    assert ec2.call_counts[("CreateVolume", "IdempotentParameterMismatch")] == 1
    assert ec2.call_counts[("RunInstances", "IdempotentParameterMismatch")] == 1


def test_the_ports_strip_a_machine_as_the_adapters_do() -> None:
    """A recycled machine's strip: DeleteTags of the owner's keys (others stay, absent ones are no error, a gone
    instance is NotFound), and one node update that removes the owner's labels and merges the new ones."""
    parts = Parts(join_availability="active")
    ec2 = SimEc2(parts.world, MODEL, parts.cloud, Throttle(MODEL.throttling))
    swarm = SimSwarmPort(parts.world, MODEL, parts.swarm)
    alice = Owner("alice", "p1", "n1")
    (instance_id,) = parts.cloud.run_instances("t3.medium", ZONE_A, 1, {"keep": "1", **alice.labels()})
    parts.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 1)
    node_id = parts.machines.node_of[instance_id]
    parts.swarm.update_node(node_id, {"keep": "1", **alice.labels()}, None)
    events = parts.swarm.subscribe()

    async def calls() -> None:
        await ec2.untag_instance(instance_id, [*alice.labels(), "never-set"])
        await swarm.update_node(node_id, labels={"new": "2"}, remove_labels=[*alice.labels(), "never-set"])
        assert events.qsize() == 1  # one update: one node event
        parts.cloud.terminate_instances([instance_id])
        await asyncio.sleep(MODEL.ec2.shutdown_s + 1)
        with pytest.raises(Ec2Error) as gone:
            await ec2.untag_instance(instance_id, ["keep"])
        assert gone.value.code == "InvalidInstanceID.NotFound"

    parts.loop.run_until_complete(calls())
    assert parts.cloud.instances[instance_id].tags == {"keep": "1"}
    assert parts.swarm.nodes[node_id].labels == {"keep": "1", "new": "2"}
    assert ec2.call_counts[("DeleteTags", "ok")] == 1
    assert ec2.call_counts[("DeleteTags", "InvalidInstanceID.NotFound")] == 1
    parts.loop.close()
