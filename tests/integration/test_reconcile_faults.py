"""The reconcile loop with its real adapters against the sandbox, while the strict EC2 layer injects AWS's failures."""

from __future__ import annotations

import json
import os
import re
import urllib.request
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import LAUNCH_CLIENT_ATTEMPTS, ec2_client
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.reconciler import Reconciler
from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_autoscaling.wiring import build_reconciler
from warmswarm_demos.workload import create_service
from warmswarm_sandbox.cloud import Endpoints
from warmswarm_sandbox.services import SANDBOX_IMAGE_ID

ZONES = ("us-east-1a", "us-east-1b")


def strict(endpoints: Endpoints, path: str, body: dict[str, Any] | None = None, method: str = "POST") -> Any:
    request = urllib.request.Request(
        f"{endpoints.ec2_endpoint_url}/strict/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer) if answer.status != 204 else None


def run_instances_answered(endpoints: Endpoints, code: str) -> int:
    calls = strict(endpoints, "calls", method="GET")
    return int(calls["answers"].get("RunInstances", {}).get(code, 0))


def run_instances_ok(endpoints: Endpoints) -> int:
    return run_instances_answered(endpoints, "ok")


@pytest.fixture
async def autoscaler(endpoints: Endpoints) -> AsyncIterator[Reconciler]:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    cluster = f"faults-{uuid.uuid4().hex[:6]}"
    settings = AutoscalingSettings.model_construct(
        cluster=cluster,
        image_id=SANDBOX_IMAGE_ID,
        aws_region="us-east-1",
        availability_zones=list(ZONES),
        allowed_instance_types=["t3.medium", "m5.large"],
        price_per_hour={"t3.medium": 0.0416, "m5.large": 0.096},
        node_overhead_cpus=0.1,
        node_overhead_memory_bytes=256 * 2**20,
        idle_grace_s=3600,
    )
    # As main.py wires them: reads retried by botocore (two attempts here), launches not retried.
    async with (
        aiodocker.Docker(url=endpoints.docker_host) as docker,
        ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region, 2) as client,
        ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region, LAUNCH_CLIENT_ATTEMPTS) as launch_client,
    ):
        ec2 = AiobotocoreEc2(client, launch_client=launch_client)
        yield build_reconciler(settings, swarm=AiodockerSwarm(docker), ec2=ec2)
        for service in await docker.services.list():
            if service["Spec"]["Name"].startswith("faults-"):
                await docker.services.delete(service["ID"])
        instances = await ec2.list_instances(cluster)
        await ec2.terminate_instances([i.id for i in instances])
    strict(endpoints, "fail", method="DELETE")
    for instance_type in settings.allowed_instance_types:
        strict(endpoints, "capacity", {"instance_type": instance_type, "available": True})


async def pending_service(endpoints: Endpoints) -> str:
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        owner = {"user_id": f"u-{uuid.uuid4().hex[:6]}"}
        return await create_service(
            docker, f"faults-{uuid.uuid4().hex[:6]}", endpoints.sandbox_image, owner=owner, cpus=1
        )


async def until_pending(autoscaler: Reconciler) -> None:
    # The scheduler marks the new task "no suitable node" within moments; plan only launches then.
    for _ in range(50):
        report = await autoscaler.cycle()
        if report.ok and autoscaler.last.plan and autoscaler.last.plan.waiting:
            return
    raise AssertionError("the new service's task never showed as pending")


async def test_a_cycle_whose_observation_failed_applies_nothing(autoscaler: Reconciler, endpoints: Endpoints) -> None:
    await pending_service(endpoints)
    launches_before = run_instances_ok(endpoints)
    # More failures than botocore's attempts: the read fails for the cycle, as a real outage would.
    strict(endpoints, "fail", {"action": "DescribeInstances", "code": "InternalError", "status": 500, "times": 2})

    report = await autoscaler.cycle()

    assert not report.ok
    assert "InternalError" in (report.error or "")
    assert run_instances_ok(endpoints) == launches_before
    assert list(autoscaler.journal.decisions) == []

    await until_pending(autoscaler)  # the outage is over: the next cycles see the world and launch
    assert run_instances_ok(endpoints) == launches_before + 1


async def test_insufficient_capacity_marks_the_offering_and_the_next_fit_is_tried(
    autoscaler: Reconciler, endpoints: Endpoints
) -> None:
    strict(endpoints, "capacity", {"instance_type": "t3.medium", "available": False})  # in every zone
    refusals_before = run_instances_answered(endpoints, "InsufficientInstanceCapacity")
    await pending_service(endpoints)
    await until_pending(autoscaler)

    tried: list[tuple[str, str, str | None]] = []
    for _ in range(6):
        await autoscaler.cycle()
        for decision in autoscaler.journal.decisions:
            entry = (decision.action, decision.reason, decision.error)
            if decision.action.startswith("Launch") and entry not in tried:
                tried.append(entry)
        if any(error is None for _, _, error in tried):
            break

    failed = [action for action, _, error in tried if error is not None]
    succeeded = [action for action, _, error in tried if error is None]
    # Each zone's t3.medium is tried once and remembered as out of capacity; then the next cheapest type.
    assert sorted(failed) == [f"LaunchBatch 1x t3.medium in {zone}" for zone in ZONES]
    assert len(succeeded) == 1
    assert succeeded[0].startswith("LaunchBatch 1x m5.large")
    plan = autoscaler.last.plan
    assert plan is not None
    assert {("t3.medium", zone) for zone in ZONES} <= set(plan.carried.unavailable_offerings)
    # One RunInstances per unavailable offering: botocore did not retry "no capacity" with backoff.
    assert run_instances_answered(endpoints, "InsufficientInstanceCapacity") - refusals_before == len(ZONES)


def instance_waited_for(autoscaler: Reconciler, service_name: str) -> str | None:
    """The instance the service's pending task waits for, as the last plan says it ("waiting for instance i-… ")."""
    plan = autoscaler.last.plan
    reasons = [w.reason for w in plan.waiting if w.service_name == service_name] if plan else []
    found = re.search(r"waiting for instance (i-[0-9a-f]+)", " ".join(reasons))
    return found.group(1) if found else None


async def test_an_instance_terminated_behind_the_autoscalers_back_is_seen_and_its_work_gets_another(
    autoscaler: Reconciler, endpoints: Endpoints, ec2: Any
) -> None:
    """The level-triggered promise: whatever the listing shows, however it changed, the next plan starts from it (a
    shortcut that reads less must keep this within its bound)."""
    async with aiodocker.Docker(url=endpoints.docker_host) as docker:
        name = f"faults-{uuid.uuid4().hex[:6]}"
        await create_service(docker, name, endpoints.sandbox_image, owner={"user_id": f"u-{name}"}, cpus=1)
    launches_before = run_instances_ok(endpoints)
    await until_pending(autoscaler)
    first = None
    for _ in range(10):  # the launch's cycle names no instance yet: the next one lists it
        assert (await autoscaler.cycle()).ok
        first = instance_waited_for(autoscaler, name)
        if first is not None:
            break
    assert first is not None, autoscaler.last.plan
    assert run_instances_ok(endpoints) == launches_before + 1

    ec2.terminate_instances(InstanceIds=[first])  # by hand: no cycle of ours asked for it
    replacement = None
    for _ in range(20):
        assert (await autoscaler.cycle()).ok
        replacement = instance_waited_for(autoscaler, name)
        if replacement not in (None, first):
            break

    assert replacement not in (None, first), autoscaler.last.plan
    # A new machine, not the first one found again: the first launch's client token, asked once more, answers with
    # the terminated instance, which spends the token (TokenSpent), and the next cycle launches anew.
    described = ec2.describe_instances(InstanceIds=[replacement])["Reservations"][0]["Instances"][0]
    assert described["State"]["Name"] in ("pending", "running")
