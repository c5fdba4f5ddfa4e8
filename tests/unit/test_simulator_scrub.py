"""The simulator's scrub boot (issue 33): a recycled machine started while its scrub is pending comes back later than a
plain restart, its node carrying the proof of that generation's scrub; a plain restart carries none; the strip of
the owner's node labels takes them off the node that comes back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from warmswarm_models import (
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_SCRUB_TAG,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
    Owner,
)
from warmswarm_simulator.cloud import Cloud
from warmswarm_simulator.config import load_model
from warmswarm_simulator.machines import Machines
from warmswarm_simulator.swarm import Swarm
from warmswarm_simulator.vclock import VirtualLoop
from warmswarm_simulator.world import World

MODEL = load_model()
ZONE_A = MODEL.availability_zones[0]
ALICE = Owner("alice", "p1", "n1")
# A stopped machine started again: running after start_pending_s, its node back restart_boot_s later.
PLAIN_RESTART_S = MODEL.ec2.start_pending_s + MODEL.ec2.restart_boot_s


class Parts:
    """EC2, the swarm and warmswarm's boots on a virtual clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.loop = VirtualLoop()
        self.world = World(self.loop, MODEL.day_epoch_s)
        self.cloud = Cloud(self.world, MODEL)
        self.swarm = Swarm(self.world, MODEL.swarm)
        self.machines = Machines(self.world, MODEL, self.cloud, self.swarm, join_availability="drain", device_wait_s=0)

    def advance(self, seconds: float) -> None:
        self.loop.run_until_complete(asyncio.sleep(seconds))

    def stopped_owners_machine(self) -> tuple[str, str]:
        """(instance id, node id) of a machine that joined, was labelled for Alice, and is stopped now."""
        (instance_id,) = self.cloud.run_instances("t3.medium", ZONE_A, 1, ALICE.labels())
        self.advance(MODEL.ec2.pending_s + MODEL.ec2.boot_to_join_s + 1)
        node_id = self.machines.node_of[instance_id]
        self.swarm.update_node(node_id, ALICE.labels(), "active")
        self.cloud.stop_instances([instance_id])
        self.advance(MODEL.ec2.stop_s + MODEL.swarm.node_down_after_s + 1)
        assert (self.cloud.instances[instance_id].state, self.swarm.nodes[node_id].state) == ("stopped", "down")
        return instance_id, node_id

    def seconds_until_ready(self, node_id: str, *, within_s: float) -> float:
        """Virtual seconds from now until the node is ready again, stepping by 0.5 s."""
        waited_s = 0.0
        while self.swarm.nodes[node_id].state != "ready":
            assert waited_s <= within_s, f"node {node_id} not back within {within_s} s"
            self.advance(0.5)
            waited_s += 0.5
        return waited_s


@pytest.fixture
def parts() -> Iterator[Parts]:
    made = Parts()
    yield made
    made.loop.close()


def test_a_start_with_the_scrub_pending_comes_back_scrub_s_later_with_the_proof_and_without_the_owners_labels(
    parts: Parts,
) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    # The recycle's strip and mark, as the autoscaler writes them while the machine is stopped.
    parts.cloud.untag_instance(instance_id, list(ALICE.labels()))
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}3.1700000000"})
    parts.swarm.update_node(node_id, None, "drain", remove_labels=tuple(ALICE.labels()))

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)

    assert back_after_s >= PLAIN_RESTART_S + MODEL.ec2.scrub_s
    node = parts.swarm.nodes[node_id]
    # The scrub token's proof (docs: the scrub token contract, issue 42), the whole token as the tag said it.
    assert node.engine_labels == {ENGINE_LABEL_INSTANCE_ID: instance_id, ENGINE_LABEL_SCRUBBED: "3.1700000000"}
    assert node.value().scrubbed == "3.1700000000"  # as the autoscaler reads it
    assert not any(key in node.labels for key in ALICE.labels())
    assert parts.machines.scrubs == 1


def test_a_plain_restart_comes_back_sooner_and_proves_no_scrub(parts: Parts) -> None:
    instance_id, node_id = parts.stopped_owners_machine()

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + 5)

    assert back_after_s < PLAIN_RESTART_S + MODEL.ec2.scrub_s
    node = parts.swarm.nodes[node_id]
    assert ENGINE_LABEL_SCRUBBED not in node.engine_labels
    assert node.value().scrubbed is None
    assert node.value().owner == ALICE  # nothing stripped: still Alice's
    assert parts.machines.scrubs == 0


def test_a_scrub_proven_and_marked_done_is_not_scrubbed_again_and_its_next_boot_carries_no_proof(parts: Parts) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}1"})
    parts.cloud.start_instances([instance_id])
    parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: f"{SCRUB_DONE_PREFIX}1"})
    parts.cloud.stop_instances([instance_id])
    parts.advance(MODEL.ec2.stop_s + MODEL.swarm.node_down_after_s + 1)

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + 5)

    assert back_after_s < PLAIN_RESTART_S + MODEL.ec2.scrub_s
    assert ENGINE_LABEL_SCRUBBED not in parts.swarm.nodes[node_id].engine_labels
    assert parts.machines.scrubs == 1


def test_a_pending_scrub_of_no_readable_generation_is_scrubbed_without_a_proof(parts: Parts) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}x"})

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)

    assert back_after_s >= PLAIN_RESTART_S + MODEL.ec2.scrub_s
    assert ENGINE_LABEL_SCRUBBED not in parts.swarm.nodes[node_id].engine_labels
