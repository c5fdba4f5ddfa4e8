"""The cycle benchmark's stand-ins answer the real adapters: every machine of the fleet read, nothing planned."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import ec2_client

# The stand-ins live with the benchmark that uses them (benchmarks/ is no package: a script's folder).
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from cycle_ec2_answers import SHAPES, Shape
from cycle_measure import REGION, autoscaler
from cycle_servers import DockerAnswers, Ec2Answers, docker_app, ec2_app, serving
from cycle_world import Fleet, fleet

MACHINES = 50
NOW_S = 1_790_000_000.0  # for the fleet's own determinism; the cycles below run on the real clock


@asynccontextmanager
async def standins(made: Fleet, shape: Shape) -> AsyncIterator[tuple[str, str, Ec2Answers, DockerAnswers]]:
    ec2_answers, docker_answers = Ec2Answers(made, shape), DockerAnswers(made)
    async with serving(ec2_app(ec2_answers)) as ec2_url, serving(docker_app(docker_answers)) as docker_url:
        yield ec2_url, docker_url, ec2_answers, docker_answers


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    # botocore signs every request; the stand-in checks no signature, so any key does.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "bench")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "bench")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_same_seed_same_fleet() -> None:
    assert fleet(20, seed=7, now_s=NOW_S) == fleet(20, seed=7, now_s=NOW_S)
    assert fleet(20, seed=7, now_s=NOW_S) != fleet(20, seed=8, now_s=NOW_S)


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_cycle_reads_every_machine_and_plans_nothing(shape: Shape) -> None:
    made = fleet(MACHINES, seed=1, now_s=time.time())
    async with (
        standins(made, shape) as (ec2_url, docker_url, ec2_answers, docker_answers),
        autoscaler(ec2_url, docker_url, made.cluster, MACHINES) as stack,
    ):
        first = await stack.reconciler.cycle()
        snapshot = stack.reconciler.last.snapshot
        assert first.ok, first.error
        assert first.actions == 0
        assert snapshot is not None
        assert {i.id for i in snapshot.instances} == {m.instance_id for m in made.machines}
        assert {n.id for n in snapshot.nodes} == {m.node_id for m in made.machines}
        assert {t.id for t in snapshot.tasks} == {m.task_id for m in made.machines}
        assert {v.id for v in snapshot.volumes} == {v.volume_id for v in made.volumes}
        assert all(len(i.tags) == 10 and i.owner is not None for i in snapshot.instances)
        assert set(snapshot.instance_types) == {"t3.medium", "m5.large"}

        docker_answers.touch()
        busy = await stack.reconciler.cycle()
        assert busy.ok
        assert busy.actions == 0
        assert stack.reconciler.last.snapshot is not None
        # The touched task alone was read again (a new version); every other reading was reused.
        reread = [new is not old for new, old in zip(stack.reconciler.last.snapshot.tasks, snapshot.tasks, strict=True)]
        assert reread == [index == 1 for index in range(MACHINES)]
    # EC2 was listed by the first cycle only: in the second nothing could move (every machine steady, its node ready,
    # launched long ago, nothing acted on), so the EC2 book read nothing (ec2_book.py).
    assert ec2_answers.calls == {"DescribeInstances": 1, "DescribeVolumes": 1, "DescribeInstanceTypes": 1}


async def test_instances_come_in_pages() -> None:
    made = fleet(MACHINES, seed=2, now_s=NOW_S)
    async with standins(made, "reference") as (ec2_url, _, ec2_answers, _), ec2_client(ec2_url, REGION, 1) as client:
        listed = await AiobotocoreEc2(client, page_size=20).list_instances(made.cluster)
    assert [i.id for i in listed] == [m.instance_id for m in made.machines]
    assert ec2_answers.calls == {"DescribeInstances": 3}
