"""apply() of a launch or claim for a volume the same plan creates: the volume first, then the call with its id; none
when the create fails."""

from __future__ import annotations

import dataclasses

from warmswarm_autoscaling.actions import AttachVolume, ClaimBufferMachine, CreateVolume, Launch, Start
from warmswarm_autoscaling.apply import apply
from warmswarm_autoscaling.ports import Ec2Error
from warmswarm_models import INSTANCE_VOLUME_TAG

from .factories import ALICE_N1, TEMPLATE, ZONE_A, launch
from .fakes import Recorder

CREATED = "vol-0000000000000001"  # what the Recorder's CreateVolume answers


def create() -> CreateVolume:
    return CreateVolume(ALICE_N1, ZONE_A, 20, "gp3", 3600, "tok-vol-1", "alice has no volume")


def launch_for_new_volume() -> Launch:
    return dataclasses.replace(launch(), volume_token="tok-vol-1")


def hot_claim_for_new_volume() -> ClaimBufferMachine:
    return ClaimBufferMachine(
        "i-hot", ALICE_N1, None, 0, None, "alice claims i-hot", hot=True, claimed_at=1.0, volume_token="tok-vol-1"
    )


async def test_the_launch_goes_after_the_create_with_the_new_volumes_id_in_its_boot_and_tags() -> None:
    ports = Recorder()

    made, launched = await apply((create(), launch_for_new_volume()), ports, ports, TEMPLATE)

    assert made.volume_id == CREATED
    assert launched.ok, launched.error
    assert isinstance(launched.action, Launch)
    assert launched.action.volume_id == CREATED
    assert [c[0] for c in ports.calls].index("create_volume") < [c[0] for c in ports.calls].index("run_instance")
    (request,) = ports.launches
    assert request.tags[INSTANCE_VOLUME_TAG] == CREATED
    assert f"volume_id='{CREATED}'" in request.user_data


async def test_no_launch_when_its_volume_could_not_be_created() -> None:
    ports = Recorder()
    ports.fail["create_volume"] = Ec2Error("CreateVolume", "VolumeLimitExceeded", "too many volumes")

    made, launched = await apply((create(), launch_for_new_volume()), ports, ports, TEMPLATE)

    assert made.error is not None
    assert launched.skipped is not None
    assert launched.skipped.startswith("not launched: its owner's cache volume was not created in this cycle")
    assert ports.launches == [], "no machine for an owner whose data has no volume"


async def test_a_hot_claim_names_the_new_volume_and_leaves_its_attach_to_the_janitor() -> None:
    ports = Recorder()

    made, claimed = await apply((create(), hot_claim_for_new_volume()), ports, ports, TEMPLATE)

    assert made.volume_id == CREATED
    assert claimed.ok, claimed.error
    tagged = [c for c in ports.calls if c[0] == "tag_instance"]
    assert [(c[1], c[2][INSTANCE_VOLUME_TAG]) for c in tagged] == [("i-hot", CREATED)]
    # A volume made a moment ago is "creating", which AWS refuses to attach: the janitor attaches it once available.
    assert [c for c in ports.calls if c[0] == "attach_volume"] == []


async def test_no_claim_when_its_volume_could_not_be_created() -> None:
    ports = Recorder()
    ports.fail["create_volume"] = Ec2Error("CreateVolume", "VolumeLimitExceeded", "too many volumes")

    _, claimed = await apply((create(), hot_claim_for_new_volume()), ports, ports, TEMPLATE)

    assert claimed.skipped is not None
    assert claimed.skipped.startswith("not claimed")
    assert [c for c in ports.calls if c[0] == "tag_instance"] == [], "the machine stays nobody's, in the buffer"


async def test_a_stopped_machines_attach_is_sent_before_its_start() -> None:
    # AWS attaches to a stopped machine, never to a pending one: in one plan, the attach goes first.
    ports = Recorder()
    start = Start("i-b1", "alice's claimed machine", started_at=1.0)
    attach = AttachVolume("vol-a", "i-b1", "/dev/sdf", "it waits for alice's volume")

    outcomes = await apply((start, attach), ports, ports, TEMPLATE)

    assert all(o.ok for o in outcomes)
    assert [o.action for o in outcomes] == [start, attach], "outcomes in the plan's order"
    called = [c[0] for c in ports.calls]
    assert called.index("attach_volume") < called.index("start_instances")
