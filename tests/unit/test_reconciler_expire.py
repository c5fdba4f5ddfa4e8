"""The reconciler's operator path (POST /v1/volumes/{id}/expire) without the API: it reads this cluster's volumes
and instances afresh, refuses with a reason when it may not act, and wakes the loop for the janitor."""

from __future__ import annotations

import pytest
from warmswarm_autoscaling.ports import PortError
from warmswarm_autoscaling.reconciler import NotLeader, ReadOnly, VolumeBusy, VolumeNotFound
from warmswarm_models import format_timestamp

from .factories import NOW, kept
from .fakes import ClusterEc2, FakeSwarm, autoscaler


async def test_expire_reads_this_clusters_volumes_and_tags_it_to_expire_now() -> None:
    ec2 = ClusterEc2(volumes=[kept()])
    scaler = autoscaler(FakeSwarm(), ec2)

    answer = await scaler.expire_volume("vol-a")

    assert answer.volume_id == "vol-a"
    assert [call[0] for call in ec2.tag_calls] == ["vol-a"]
    assert answer.expires_at == next(iter(ec2.tag_calls[-1][1].values()))
    assert answer.expires_at <= format_timestamp(NOW + 60)


async def test_expire_in_a_dry_run_says_it_changes_nothing() -> None:
    ec2 = ClusterEc2(volumes=[kept()])
    scaler = autoscaler(FakeSwarm(), ec2, dry_run=True)

    with pytest.raises(ReadOnly, match=r"^dry run \(AUTOSCALING_DRY_RUN=true\): this autoscaler changes nothing$"):
        await scaler.expire_volume("vol-a")
    assert ec2.tag_calls == []


async def test_expire_on_a_replica_that_does_not_lead_says_to_ask_the_leader() -> None:
    ec2 = ClusterEc2(volumes=[kept()])
    valid = [False]
    scaler = autoscaler(FakeSwarm(), ec2, lease_valid=lambda: valid[0])

    with pytest.raises(NotLeader, match=r"^not the leader; ask the leader$"):
        await scaler.expire_volume("vol-a")
    valid[0] = True
    scaler.set_leader(False)
    with pytest.raises(NotLeader):
        await scaler.expire_volume("vol-a")
    assert ec2.tag_calls == []


async def test_expire_of_a_missing_or_busy_volume_is_refused_with_the_reason() -> None:
    ec2 = ClusterEc2(volumes=[kept("vol-busy", attached_to=["i-0aa"])])
    scaler = autoscaler(FakeSwarm(), ec2)

    with pytest.raises(VolumeNotFound):
        await scaler.expire_volume("vol-gone")
    with pytest.raises(VolumeBusy):
        await scaler.expire_volume("vol-busy")
    assert ec2.tag_calls == []


async def test_expire_whose_tagging_fails_is_an_error_and_recorded() -> None:
    ec2 = ClusterEc2(volumes=[kept()])
    ec2.failing["CreateTags"] = "UnauthorizedOperation"
    scaler = autoscaler(FakeSwarm(), ec2)

    with pytest.raises(PortError, match="EC2 CreateTags failed with UnauthorizedOperation") as failed:
        await scaler.expire_volume("vol-a")

    assert type(failed.value) is PortError  # the outcome's error, said again
    (decision,) = scaler.journal.decisions
    assert decision.error is not None
    assert decision.kind == "expire_volume"


async def test_expire_is_refused_while_this_replicas_clock_disagrees_with_aws_either_way() -> None:
    """An expiry is a deadline: written by a clock behind AWS's, it is already past for the next leader; ahead, it
    lies in the future. Either way nothing is tagged, and the refusal says why (issue 19, behaviour 1)."""
    for behind_s, direction in ((600.0, "ahead of"), (-600.0, "behind")):
        ec2 = ClusterEc2(volumes=[kept()])
        ec2.aws_behind_s = behind_s
        scaler = autoscaler(FakeSwarm(), ec2)

        with pytest.raises(
            VolumeBusy, match=f"^volume vol-a does not expire now: this replica's clock is 600 s {direction}"
        ):
            await scaler.expire_volume("vol-a")
        assert ec2.tag_calls == []
