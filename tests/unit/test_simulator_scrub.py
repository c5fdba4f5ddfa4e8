"""The simulator's scrub boot (issues 33 and 42): a recycled machine started while its scrub is pending comes back later
than a plain restart, its node carrying the proof of exactly the token its tag asks for; the proof lives on the disk
(daemon.json) across boots, as the real node's does, and every boot that owes a scrub drops it first; a token the
scrub cannot read is refused (the boot never joins); a reboot is a boot of its own, and a second run of the scrub in
one boot skips only the token this boot scrubbed."""

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


TOKEN = "3.1772409600"  # <n>.<t>: recycle generation 3, marked at that epoch second
NEXT = "4.1772413200"


def _mark(parts: Parts, instance_id: str, value: str) -> None:
    parts.cloud.tag_instance(instance_id, {INSTANCE_SCRUB_TAG: value})


def _stop(parts: Parts, instance_id: str) -> None:
    parts.cloud.stop_instances([instance_id])
    parts.advance(MODEL.ec2.stop_s + MODEL.swarm.node_down_after_s + 1)


def test_a_start_with_the_scrub_pending_comes_back_scrub_s_later_with_the_proof_and_without_the_owners_labels(
    parts: Parts,
) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    # The recycle's strip and mark, as the autoscaler writes them while the machine is stopped.
    parts.cloud.untag_instance(instance_id, list(ALICE.labels()))
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.swarm.update_node(node_id, None, "drain", remove_labels=tuple(ALICE.labels()))

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)

    assert back_after_s >= PLAIN_RESTART_S + MODEL.ec2.scrub_s
    node = parts.swarm.nodes[node_id]
    assert node.engine_labels == {ENGINE_LABEL_INSTANCE_ID: instance_id, ENGINE_LABEL_SCRUBBED: TOKEN}
    assert node.value().scrubbed == TOKEN  # as the autoscaler reads it: the whole token
    assert not any(key in node.labels for key in ALICE.labels())
    assert parts.machines.scrubs == 1
    assert parts.machines.last_scrub[instance_id] == (parts.cloud.instances[instance_id].boots, TOKEN)


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


def test_the_proof_stays_on_the_disk_across_boots_as_daemon_json_keeps_it(parts: Parts) -> None:
    """The real node's proof is a daemon.json label: a later boot that owes no scrub joins with it still (issue 42:
    the simulator kept it for one boot only, so no campaign could meet a stale proof)."""
    instance_id, node_id = parts.stopped_owners_machine()
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.cloud.start_instances([instance_id])
    parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    _mark(parts, instance_id, f"{SCRUB_DONE_PREFIX}{TOKEN}")
    _stop(parts, instance_id)

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + 5)

    assert back_after_s < PLAIN_RESTART_S + MODEL.ec2.scrub_s  # not scrubbed again
    assert parts.swarm.nodes[node_id].engine_labels[ENGINE_LABEL_SCRUBBED] == TOKEN  # the earlier boot's proof
    assert parts.machines.scrubs == 1


def test_a_boot_that_owes_a_scrub_drops_the_proof_on_the_disk_before_anything_else(parts: Parts) -> None:
    """Set back to the token whose proof is on the disk, the boot scrubs again all the same; one stopped in the middle
    of its scrub leaves no proof at all, of that token or another."""
    instance_id, node_id = parts.stopped_owners_machine()
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.cloud.start_instances([instance_id])
    parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    _stop(parts, instance_id)
    assert parts.machines.proofs_on_disk[instance_id] == TOKEN

    parts.cloud.start_instances([instance_id])  # its tag still pending-TOKEN: a proof of it on the disk
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    assert back_after_s >= PLAIN_RESTART_S + MODEL.ec2.scrub_s
    assert parts.machines.scrubs == 2

    _stop(parts, instance_id)
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{NEXT}")
    parts.cloud.start_instances([instance_id])
    parts.advance(MODEL.ec2.start_pending_s + MODEL.ec2.scrub_s / 2)  # in the middle of its scrub
    assert instance_id not in parts.machines.proofs_on_disk
    parts.cloud.stop_instances([instance_id])
    parts.advance(MODEL.ec2.stop_s + MODEL.ec2.scrub_s + MODEL.ec2.restart_boot_s)
    assert instance_id not in parts.machines.proofs_on_disk
    assert parts.machines.last_scrub[instance_id][1] == TOKEN  # the cut scrub finished nothing


@pytest.mark.parametrize("value", [f"{SCRUB_PENDING_PREFIX}3", f"{SCRUB_PENDING_PREFIX}x", f"{SCRUB_PENDING_PREFIX}3."])
def test_a_token_the_scrub_cannot_read_is_refused_docker_never_starts_and_no_proof_stays(
    parts: Parts, value: str
) -> None:
    """The contract: a legacy pending-<n> (no moment) or a garbled token is refused, after the proof is dropped."""
    instance_id, node_id = parts.stopped_owners_machine()
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.cloud.start_instances([instance_id])
    parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    _stop(parts, instance_id)
    _mark(parts, instance_id, value)

    parts.cloud.start_instances([instance_id])
    parts.advance(PLAIN_RESTART_S + MODEL.ec2.scrub_s + 60)

    assert parts.cloud.instances[instance_id].state == "running"
    assert parts.swarm.nodes[node_id].state == "down"  # this boot never joins
    assert instance_id not in parts.machines.proofs_on_disk
    assert (parts.machines.scrubs, parts.machines.scrub_refusals) == (1, 1)


def test_a_reboot_while_the_scrub_is_owed_scrubs_again_and_a_second_run_in_one_boot_skips_only_its_own_token(
    parts: Parts,
) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.cloud.start_instances([instance_id])
    parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 5)
    boots = parts.cloud.instances[instance_id].boots

    parts.machines.reboot(instance_id)
    assert parts.swarm.nodes[node_id].state == "down"
    back_after_s = parts.seconds_until_ready(node_id, within_s=MODEL.ec2.restart_boot_s + MODEL.ec2.scrub_s + 5)
    assert back_after_s >= MODEL.ec2.restart_boot_s + MODEL.ec2.scrub_s
    assert parts.machines.scrubs == 2
    assert parts.machines.last_scrub[instance_id] == (boots + 1, TOKEN)

    parts.machines.scrub_again(instance_id)  # the same token, this very boot scrubbed it: skipped, proof kept
    parts.advance(MODEL.ec2.scrub_s + 1)
    assert parts.machines.scrubs == 2
    assert parts.swarm.nodes[node_id].engine_labels[ENGINE_LABEL_SCRUBBED] == TOKEN

    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{NEXT}")
    parts.machines.scrub_again(instance_id)  # another token: dropped, scrubbed, proven anew
    # The daemon's labels change at its reload, once that scrub is over; the disk's proof is gone at once.
    assert parts.swarm.nodes[node_id].engine_labels[ENGINE_LABEL_SCRUBBED] == TOKEN
    assert instance_id not in parts.machines.proofs_on_disk
    parts.advance(MODEL.ec2.scrub_s + 1)
    assert parts.machines.scrubs == 3
    assert parts.swarm.nodes[node_id].engine_labels[ENGINE_LABEL_SCRUBBED] == NEXT


def test_a_late_metadata_service_delays_the_scrub_boot_and_the_machine_still_comes_up(parts: Parts) -> None:
    instance_id, node_id = parts.stopped_owners_machine()
    _mark(parts, instance_id, f"{SCRUB_PENDING_PREFIX}{TOKEN}")
    parts.machines.metadata_late_s = lambda _instance: 30.0

    parts.cloud.start_instances([instance_id])
    back_after_s = parts.seconds_until_ready(node_id, within_s=PLAIN_RESTART_S + MODEL.ec2.scrub_s + 35)

    assert back_after_s >= PLAIN_RESTART_S + MODEL.ec2.scrub_s + 30.0
    assert parts.swarm.nodes[node_id].engine_labels[ENGINE_LABEL_SCRUBBED] == TOKEN
