"""apply(): each kind of action becomes exactly the adapter call it stands for, with the tags, the ids and the
flags it carries; an adapter's failure becomes that action's outcome and no other's; a closed gate sends nothing."""

from __future__ import annotations

from typing import Any

import pytest
from warmswarm_autoscaling import tags
from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    AttachVolume,
    BindMachine,
    ClaimBufferMachine,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    ExpireVolume,
    LabelNode,
    LaunchBatch,
    MarkScrubbed,
    RecycleMachine,
    ReleaseVolume,
    RemoveNode,
    RenewVolume,
    SetVolumeTtl,
    StripOwner,
    Terminate,
)
from warmswarm_autoscaling.apply import apply
from warmswarm_autoscaling.ports import (
    Ec2Error,
    SwarmError,
)
from warmswarm_autoscaling.requests import LaunchTemplate
from warmswarm_autoscaling.userdata import render_user_data
from warmswarm_models import (
    CLUSTER_TAG,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    LAUNCH_REASON_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    OWNER_KEYS,
    ROLE_CACHE,
    ROLE_TAG,
    ROLE_WORKER,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    format_timestamp,
)
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

from .factories import ALICE, ALICE_N1, NOW, TEMPLATE, ZONE_A, ZONE_B, launch, volume
from .fakes import JOIN, Recorder, one

# What a LabelNode for alice's t3.medium i-0aa writes: her ids and the machine's (no cache volume).
LABELS = {
    "user_id": "alice",
    NODE_LABEL_INSTANCE_ID: "i-0aa",
    NODE_LABEL_INSTANCE_TYPE: "t3.medium",
    NODE_LABEL_AVAILABILITY_ZONE: ZONE_A,
}

# -- the swarm's calls ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "call"),
    [
        (Drain("node-1", "idle for 10 min"), ("update_node", "node-1", None, "drain")),
        (Activate("node-1", "its owner is back"), ("update_node", "node-1", None, "active")),
        (
            LabelNode("node-1", ALICE, "i-0aa", "t3.medium", ZONE_A, None, "joined"),
            ("update_node", "node-1", LABELS, "active"),
        ),
        (RemoveNode("node-1", "its instance is gone"), ("remove_node", "node-1")),
    ],
    ids=["drain", "activate", "label-and-activate", "remove-node"],
)
async def test_each_swarm_action_is_its_one_call(action: Action, call: tuple[Any, ...]) -> None:
    ports = Recorder()

    outcome = await one(action, ports)

    assert ports.calls == [call]
    assert outcome.ok
    assert (outcome.error, outcome.skipped, outcome.instance_id, outcome.volume_id) == (None, None, None, None)


# -- EC2's calls ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "call"),
    [
        (Terminate("i-0aa", "idle", cause="idle"), ("terminate_instances", ["i-0aa"])),
        (BindMachine("i-0aa", ALICE, "bound"), ("tag_instance", "i-0aa", {"user_id": "alice"})),
        (
            ClaimBufferMachine("i-0aa", ALICE, None, 3600, NOW, "claimed"),
            (
                "tag_instance",
                "i-0aa",
                {"user_id": "alice", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW), INSTANCE_WARM_TTL_TAG: "3600"},
            ),
        ),
        (AttachVolume("vol-0a", "i-0aa", "/dev/sdf", "its owner's"), ("attach_volume", "vol-0a", "i-0aa", "/dev/sdf")),
        (DetachVolume("vol-0a", "i-0aa", False, "released"), ("detach_volume", "vol-0a", "i-0aa", False)),
        (DetachVolume("vol-0a", "i-0aa", True, "stuck"), ("detach_volume", "vol-0a", "i-0aa", True)),
        (
            ReleaseVolume("vol-0a", NOW, NOW + 3600, None, "released"),
            (
                "tag_volume",
                "vol-0a",
                {VOLUME_RELEASED_AT_TAG: format_timestamp(NOW), VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW + 3600)},
                (),
            ),
        ),
        (
            RenewVolume("vol-0a", "its owner is back"),
            ("tag_volume", "vol-0a", {}, (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG)),
        ),
        (SetVolumeTtl("vol-0a", 7200, "policy"), ("tag_volume", "vol-0a", {VOLUME_TTL_TAG: "7200"}, ())),
        (
            ExpireVolume("vol-0a", NOW, "an operator's"),
            ("tag_volume", "vol-0a", {VOLUME_EXPIRES_AT_TAG: format_timestamp(NOW)}, ()),
        ),
    ],
    ids=[
        "terminate",
        "bind-machine",
        "claim-buffer-machine",
        "attach",
        "detach",
        "detach-forced",
        "release-volume",
        "renew-volume",
        "set-volume-ttl",
        "expire-volume",
    ],
)
async def test_each_ec2_action_is_its_one_call(action: Action, call: tuple[Any, ...]) -> None:
    ports = Recorder()

    outcome = await one(action, ports)

    assert ports.calls == [call]
    assert outcome.ok


async def test_a_launch_tags_its_owner_its_reason_and_its_volume_and_boots_to_mount_it() -> None:
    ports = Recorder()

    outcome = await one(launch("vol-0abc"), ports)

    assert outcome.ok
    assert outcome.instance_id == "i-0000000000000001"
    assert ports.calls == [("join_info",), ("run_instance", "tok-launch-1")]
    [request] = ports.launches
    assert (
        request.tags.items()
        >= {
            CLUSTER_TAG: "prod",
            ROLE_TAG: ROLE_WORKER,
            LAUNCH_REASON_TAG: "2 tasks of alice wait",
            "Name": f"warmswarm-prod-{ALICE_N1}",
            INSTANCE_VOLUME_TAG: "vol-0abc",
            **ALICE_N1.labels(),
        }.items()
    )
    assert (request.instance_type, request.availability_zone, request.count) == ("m5.large", ZONE_A, 1)
    assert (request.image_id, request.subnet_id, request.client_token) == (
        TEMPLATE.image_id,
        "subnet-aaaa",
        "tok-launch-1",
    )
    assert (request.security_group_ids, request.iam_instance_profile, request.key_name) == (
        ("sg-1", "sg-2"),
        "warmswarm-node",
        "ops-key",
    )
    # The boot script joins the swarm, then waits for this volume and mounts it at the template's path.
    for part in ("SWMTKN-1-abc-def", "10.1.2.3:2377", "vol-0abc", "/srv/warm-cache", "123"):
        assert part in request.user_data
    expected = render_user_data(JOIN, volume_id="vol-0abc", cache_path="/srv/warm-cache", device_wait_s=123)
    assert request.user_data == expected


async def test_a_launch_without_a_volume_has_no_volume_tag_and_the_zone_picks_the_subnet() -> None:
    ports = Recorder()

    await one(launch(zone=ZONE_B), ports)

    [request] = ports.launches
    assert INSTANCE_VOLUME_TAG not in request.tags
    assert request.subnet_id == "subnet-bbbb"
    assert request.user_data == render_user_data(JOIN, cache_path="/srv/warm-cache", device_wait_s=123)


async def test_the_templates_join_address_replaces_the_one_the_swarm_gives() -> None:
    ports = Recorder()
    template = LaunchTemplate(cluster="prod", image_id="ami-1", subnet_ids={}, node_join_addr="manager.internal:2377")

    await apply((launch(),), ports, ports, template)

    [request] = ports.launches
    assert "manager.internal:2377" in request.user_data
    assert "10.1.2.3:2377" not in request.user_data
    assert "SWMTKN-1-abc-def" in request.user_data
    assert request.subnet_id is None


async def test_a_batch_is_one_call_for_all_its_machines_tagged_as_a_batch_and_for_no_owner() -> None:
    ports = Recorder()
    seats = (launch(token="a"), launch(token="b"), launch(token="c"))
    batch = LaunchBatch("m5.large", ZONE_B, seats, "tok-batch", "3 owners' tasks wait")

    outcome = await one(batch, ports)

    assert ports.calls == [("join_info",), ("run_instances", "tok-batch", 3)]
    assert outcome.instance_ids == ("i-0000000000000001", "i-0000000000000002", "i-0000000000000003")
    assert outcome.instance_id == "i-0000000000000001"
    [request] = ports.launches
    assert request.tags == {
        CLUSTER_TAG: "prod",
        ROLE_TAG: ROLE_WORKER,
        LAUNCH_REASON_TAG: "3 owners' tasks wait",
        INSTANCE_BATCH_TAG: "tok-batch",
        "Name": "warmswarm-prod-batch",
    }
    assert (request.instance_type, request.availability_zone, request.subnet_id) == ("m5.large", ZONE_B, "subnet-bbbb")
    assert (request.image_id, request.key_name, request.iam_instance_profile) == (
        TEMPLATE.image_id,
        "ops-key",
        "warmswarm-node",
    )
    assert request.user_data == render_user_data(JOIN, cache_path="/srv/warm-cache")


async def test_a_new_volume_carries_its_owner_its_ttl_and_the_cache_role() -> None:
    ports = Recorder()
    create = CreateVolume(ALICE_N1, ZONE_B, 20, "gp3", 7200, "tok-vol-1", "alice's cache")

    outcome = await one(create, ports)

    assert outcome.ok
    assert outcome.volume_id == "vol-0000000000000001"
    assert ports.calls == [("create_volume", "tok-vol-1")]
    [request] = ports.volume_requests
    assert request.tags == {
        CLUSTER_TAG: "prod",
        ROLE_TAG: ROLE_CACHE,
        VOLUME_TTL_TAG: "7200",
        "Name": f"warmswarm-prod-cache-{ALICE_N1}",
        **ALICE_N1.labels(),
    }
    assert (request.availability_zone, request.size_gib, request.volume_type) == (ZONE_B, 20, "gp3")


# -- the janitor's delete: read again, asked again ---------------------------------------------------------


async def test_a_delete_goes_ahead_when_the_volume_read_again_may_still_go() -> None:
    ports = Recorder()
    ports.volumes["vol-0a"] = volume("vol-0a", expires_at=NOW - 1)

    outcome = await one(DeleteVolume("vol-0a", "expired"), ports)

    assert outcome.ok
    assert ports.calls == [("describe_volume", "vol-0a"), ("delete_volume", "vol-0a")]


async def test_a_delete_of_a_volume_already_gone_is_sent_all_the_same() -> None:
    ports = Recorder()

    outcome = await one(DeleteVolume("vol-0a", "expired"), ports)

    assert outcome.ok
    assert ports.calls == [("describe_volume", "vol-0a"), ("delete_volume", "vol-0a")]


async def test_a_delete_is_skipped_when_the_volume_read_again_expires_later() -> None:
    ports = Recorder()
    ports.volumes["vol-0a"] = volume("vol-0a", expires_at=NOW + 60)

    outcome = await one(DeleteVolume("vol-0a", "expired"), ports)

    assert ports.calls == [("describe_volume", "vol-0a")]
    assert outcome.skipped is not None
    assert outcome.skipped.startswith("not deleted: read again, vol-0a expires at")
    assert not outcome.ok


async def test_a_delete_whose_reread_fails_is_an_error_and_deletes_nothing() -> None:
    ports = Recorder()
    ports.fail["describe_volume"] = Ec2Error("DescribeVolumes", "RequestLimitExceeded", "slow down")

    outcome = await one(DeleteVolume("vol-0a", "expired"), ports)

    assert ports.calls == [("describe_volume", "vol-0a")]
    assert outcome.error is not None
    assert outcome.error.startswith("could not read vol-0a again before deleting it: EC2 DescribeVolumes failed")
    assert outcome.skipped is None


async def test_the_volumes_expiry_is_judged_by_the_clock_given() -> None:
    ports = Recorder()
    ports.volumes["vol-0a"] = volume("vol-0a", expires_at=NOW + 60)

    outcome = (await apply((DeleteVolume("vol-0a", "x"),), ports, ports, TEMPLATE, clock=lambda: NOW + 61))[0]

    assert outcome.ok
    assert ports.calls[-1] == ("delete_volume", "vol-0a")


# -- a claim: the tags, then the plan's attach, never the attach alone ----------------------------------

CLAIM = ClaimBufferMachine("i-0aa", ALICE, "vol-0a", 0, NOW, "claimed with alice's cache")
CLAIM_TAGS = {"user_id": "alice", INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW), INSTANCE_VOLUME_TAG: "vol-0a"}
CLAIM_ATTACH = AttachVolume("vol-0a", "i-0aa", "/dev/sdf", "claimed by alice: attached before its start")


async def test_a_claim_tags_the_machine_and_its_plans_attach_follows_the_tags() -> None:
    """Apply sends only what the plan says: the claim is the tags, the attach its own action, sent after them
    whatever their order in the plan (issue 32)."""
    ports = Recorder()

    outcomes = await apply((CLAIM_ATTACH, CLAIM), ports, ports, TEMPLATE, clock=lambda: NOW)

    assert all(o.ok for o in outcomes)
    assert ports.calls == [("tag_instance", "i-0aa", CLAIM_TAGS), ("attach_volume", "vol-0a", "i-0aa", "/dev/sdf")]
    alone = Recorder()
    assert (await one(CLAIM, alone)).ok
    assert [call[0] for call in alone.calls] == ["tag_instance"]  # a claim alone is its tags, nothing more


async def test_a_claim_whose_tags_fail_attaches_nothing() -> None:
    """Half a claim would leave the owner's volume on an anonymous buffer machine: the next owner given it would
    find another's data there (issue 19, behaviour 2)."""
    ports = Recorder()
    ports.fail["tag_instance"] = Ec2Error("CreateTags", "RequestLimitExceeded", "slow down")

    claimed, attached = await apply((CLAIM, CLAIM_ATTACH), ports, ports, TEMPLATE, clock=lambda: NOW)

    assert claimed.error is not None
    assert attached.skipped is not None
    assert attached.skipped.startswith("not attached: the claim of i-0aa")
    assert [call[0] for call in ports.calls] == ["tag_instance"]


# -- recycling: each stage's calls, in the order that keeps a machine unoffered until its scrub is proven ---------


async def test_a_recycle_tags_the_owed_scrub_before_it_stops_the_machine() -> None:
    ports = Recorder()

    outcome = await one(RecycleMachine("i-0aa", ALICE, 2, 1_700_000_000, ("bob/p1",), True, "idle"), ports)

    assert outcome.ok
    assert ports.calls == [
        (
            "tag_instance",
            "i-0aa",
            {
                INSTANCE_SCRUB_TAG: "pending-2.1700000000",
                INSTANCE_RECYCLED_TAG: "2",
                INSTANCE_SERVED_OWNERS_TAG: f"bob/p1 {tags.served_owner(ALICE)}",
            },
        ),
        ("stop_instances", ["i-0aa"]),
    ]
    stopped_already = Recorder()
    marked_stopped = RecycleMachine("i-0aa", ALICE, 1, 1_700_000_000, (), False, "warm tier over")
    assert (await one(marked_stopped, stopped_already)).ok
    assert [call[0] for call in stopped_already.calls] == ["tag_instance"]


async def test_a_strip_clears_the_nodes_then_tags_the_buffer_then_removes_the_owner() -> None:
    ports = Recorder()

    outcome = await one(StripOwner("i-0aa", ("n1", "n2"), False, "stopped and detached"), ports)

    assert outcome.ok
    removed_labels = tags.STRIPPED_NODE_LABELS
    assert ports.calls == [
        ("update_node", "n1", None, "drain", removed_labels),
        ("update_node", "n2", None, "drain", removed_labels),
        (
            "tag_instance",
            "i-0aa",
            {
                INSTANCE_BUFFER_TAG: "true",
                "Name": f"warmswarm-{TEMPLATE.cluster}-buffer",
                LAUNCH_REASON_TAG: LAUNCH_REASON_STRIPPED,  # the launch reason named the owner
            },
        ),
        ("untag_instance", "i-0aa", (*tags.STRIPPED_INSTANCE_KEYS, INSTANCE_BUFFER_KIND_TAG)),
    ]
    assert set(OWNER_KEYS) <= set(removed_labels)
    assert set(OWNER_KEYS) <= set(tags.STRIPPED_INSTANCE_KEYS)


async def test_a_strip_whose_node_update_fails_leaves_the_instance_as_it_was() -> None:
    ports = Recorder()
    ports.fail["update_node"] = SwarmError("the manager is away")

    outcome = await one(StripOwner("i-0aa", ("n1",), True, "stopped and detached"), ports)

    assert outcome.error is not None
    assert [call[0] for call in ports.calls] == ["update_node"]


async def test_a_proven_scrub_is_tagged_done() -> None:
    ports = Recorder()

    assert (await one(MarkScrubbed("i-0aa", "3.1700000000", "proven"), ports)).ok
    assert ports.calls == [("tag_instance", "i-0aa", {INSTANCE_SCRUB_TAG: "done-3.1700000000"})]
