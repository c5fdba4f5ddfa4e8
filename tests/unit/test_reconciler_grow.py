"""Growing a cache volume through the real reconciler's cycles (observe, plan, apply) over the fakes of its ports: a
full volume of a working owner grows once, its grown-at tag read back keeps the next cycles from asking again while
its node still reports it full; six hours later it grows again only once its node says the file system took up the
growth (issue 42: one that did not kept reporting full, and the volume grew every six hours to its cap), and never
beyond the owner's largest size."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from warmswarm_models import VOLUME_GROWN_AT_TAG, format_timestamp

from .factories import ALICE_N1, CACHE_ON, NOW, attachment, instance, node_of, running_task, volume
from .fakes import Clock, ClusterEc2, FakeSwarm, autoscaler

SIX_HOURS_S = 6 * 3600.0


async def test_a_full_volume_grows_then_waits_six_hours_and_for_its_file_system_then_up_to_its_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice = instance("i-0aa", ALICE_N1, volume_id="vol-a")
    node = node_of(alice, cache_fill="vol-a:90:20480")  # 90 % of a 20 GiB file system
    task = running_task("t1", node, ALICE_N1, service_labels=dataclasses.replace(CACHE_ON, max_size_gib=60).to_labels())
    full = volume("vol-a", state="in-use", size_gib=20, attached_to=[attachment("i-0aa")])
    ec2 = ClusterEc2(instances=[alice], volumes=[full])
    clock = Clock()
    swarm = FakeSwarm(nodes=[node], tasks=[task])
    scaler = autoscaler(swarm, ec2, clock=clock)

    await scaler.cycle()
    assert ec2.modified == [("vol-a", 40)]
    assert ec2.volumes[0].size_gib == 40
    assert ec2.volumes[0].tags[VOLUME_GROWN_AT_TAG] == format_timestamp(NOW)

    for _ in range(3):  # the next cycles read the tag back: nothing asked of AWS, which would refuse
        clock.now += 600.0
        await scaler.cycle()
    assert ec2.modified == [("vol-a", 40)]

    # Six hours on, the node still says 90 % of 20 GiB: its file system did not take up the growth. Not grown again.
    clock.now = NOW + SIX_HOURS_S + 1.0
    with caplog.at_level(logging.WARNING):
        await scaler.cycle()
    assert ec2.modified == [("vol-a", 40)]
    assert any(
        "vol-a" in r.getMessage() and "did not take up the last growth" in r.getMessage() for r in caplog.records
    )

    # Its file system grown (xfs_growfs ran), and full again: it grows.
    swarm.nodes = [node_of(alice, cache_fill="vol-a:90:40960")]
    clock.now += 600.0
    await scaler.cycle()
    assert ec2.modified == [("vol-a", 40), ("vol-a", 60)]  # doubled, capped at the owner's 60 GiB

    swarm.nodes = [node_of(alice, cache_fill="vol-a:90:61440")]
    clock.now += SIX_HOURS_S + 1.0
    await scaler.cycle()
    assert ec2.modified == [("vol-a", 40), ("vol-a", 60)]  # at its largest: never beyond
