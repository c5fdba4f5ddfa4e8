"""Cases the property test (test_plan_total.py) found, each kept as an example that names the rule it broke."""

from __future__ import annotations

from warmswarm_autoscaling.actions import AttachVolume, DeleteVolume, LabelNode, Launch
from warmswarm_autoscaling.readings import read_node
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID

from .factories import (
    ALICE_N1,
    BOB,
    NOW,
    ZONE_A,
    actions_of,
    attachment,
    instance,
    node_of,
    pending_task,
    run,
    snapshot,
    volume,
)


def test_a_node_someone_labelled_for_another_owner_is_neither_relabelled_nor_given_work() -> None:
    """Relabelling would evict alice's work and hand the node (and the cache its boot mounted) to bob on a guess."""
    bobs_machine = instance("i-01", BOB)
    joined = node_of(bobs_machine, labelled=False)
    hand_labelled = read_node(
        id=joined.id,
        hostname=joined.hostname,
        state="ready",
        availability="active",
        role="worker",
        resources=joined.resources,
        labels={"user_id": "alice"},  # an operator's `docker node update --label-add`, no instance id of ours
        engine_labels={ENGINE_LABEL_INSTANCE_ID: bobs_machine.id},
        addr=joined.addr,
    )
    bobs_task = pending_task("t-bob", BOB)

    result = run(snapshot(nodes=[hand_labelled], instances=[bobs_machine], tasks=[bobs_task]))

    assert actions_of(result, LabelNode) == []
    assert [launch.owner for launch in actions_of(result, Launch)] == [BOB]  # bob gets a machine of his own
    assert any(joined.hostname in n and "owner labels for user_id=alice" in n for n in result.notices)


def test_an_expired_volume_that_a_late_machine_still_names_is_not_deleted_while_that_machine_lives() -> None:
    expired = volume("vol-1", ALICE_N1, released_at=NOW - 7200, expires_at=NOW - 3600)
    late = instance("i-01", ALICE_N1, volume_id="vol-1", launched_at=NOW - 10_000)  # never joined: terminated now
    stopped = instance("i-02", ALICE_N1, volume_id="vol-1", state="stopped")

    for machine in (late, stopped):
        result = run(snapshot(instances=[machine], volumes=[expired]))
        assert actions_of(result, DeleteVolume) == [], machine.state

    gone = instance("i-01", ALICE_N1, volume_id="vol-1", state="shutting-down")
    assert [d.volume_id for d in actions_of(run(snapshot(instances=[gone], volumes=[expired])), DeleteVolume)] == [
        "vol-1"
    ]


def test_a_volume_read_as_available_while_an_attachment_is_still_listed_is_not_attached_again() -> None:
    """DescribeVolumes between two states: attaching it to a second machine would be a second attachment."""
    machine = instance("i-01", ALICE_N1, volume_id="vol-1", zone=ZONE_A)
    between = volume("vol-1", ALICE_N1, attached_to=[attachment("i-09", state="attaching", attached_at=NOW)])
    settled = volume("vol-1", ALICE_N1)

    assert actions_of(run(snapshot(instances=[machine], volumes=[between])), AttachVolume) == []
    [attach] = actions_of(run(snapshot(instances=[machine], volumes=[settled])), AttachVolume)
    assert (attach.volume_id, attach.instance_id) == ("vol-1", "i-01")
