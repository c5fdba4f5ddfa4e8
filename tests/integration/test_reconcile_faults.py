"""The reconcile loop with its real adapters against the sandbox, while the strict EC2 layer injects AWS's failures."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiodocker
import pytest
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import LAUNCH_CLIENT_ATTEMPTS, ec2_client
from warmswarm_autoscaling.adapters.swarm_aiodocker import AiodockerSwarm
from warmswarm_autoscaling.ec2_book import Ec2Book
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
    async with sandbox_autoscaler(endpoints) as (reconciler, _ec2):
        yield reconciler


@asynccontextmanager
async def sandbox_autoscaler(
    endpoints: Endpoints, clock: Callable[[], float] = time.time, **settings_changes: Any
) -> AsyncIterator[tuple[Reconciler, AiobotocoreEc2]]:
    """The reconciler on the sandbox, wired as main.py wires it, on `clock`; its EC2 adapter, for its call counts."""
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
        **settings_changes,
    )
    # As main.py wires them: reads retried by botocore (two attempts here), launches not retried.
    async with (
        aiodocker.Docker(url=endpoints.docker_host) as docker,
        ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region, 2) as client,
        ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region, LAUNCH_CLIENT_ATTEMPTS) as launch_client,
    ):
        ec2 = AiobotocoreEc2(client, launch_client=launch_client)
        yield build_reconciler(settings, swarm=AiodockerSwarm(docker), ec2=ec2, clock=clock), ec2
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


async def test_tags_removed_behind_the_autoscalers_back_on_a_steady_machine_are_seen_at_the_first_full_listing(
    endpoints: Endpoints, ec2: Any
) -> None:
    """The EC2 book's bound (ec2_book.py): an idle cycle describes only what can move, so a tag removed by hand on a
    steady machine is not seen by it, and the full listing, `ec2_full_listing_interval_s` after the last, sees it."""
    interval_s = 30.0
    ahead_s = [0.0]  # the loop's clock runs this far ahead of the true one: the interval passes when the test says

    def clock() -> float:
        return time.time() + ahead_s[0]

    async with sandbox_autoscaler(endpoints, clock, ec2_full_listing_interval_s=interval_s) as (autoscaler, adapter):
        # Ten minutes of AWS's clock (a launch's and an action's window) cannot pass in a test: a second does.
        autoscaler.ec2_book = Ec2Book(adapter, autoscaler.policy.cluster, interval_s, moving_window_s=1.0)
        async with aiodocker.Docker(url=endpoints.docker_host) as docker:
            name = f"faults-{uuid.uuid4().hex[:6]}"
            await create_service(docker, name, endpoints.sandbox_image, owner={"user_id": f"u-{name}"}, cpus=1)
        await until_pending(autoscaler)
        machine = await until_steady(autoscaler, adapter, name)

        autoscaler.request_full_listing("the test's starting line")
        assert (await autoscaler.cycle()).ok
        listed_at_s = time.monotonic()
        assert listed(autoscaler, machine).get("user_id") == f"u-{name}"
        ec2.delete_tags(Resources=[machine], Tags=[{"Key": "user_id"}])  # by hand: no action of ours
        reads_before = adapter.call_counts[("DescribeInstances", "ok")]

        for _ in range(3):
            assert (await autoscaler.cycle()).ok
        assert time.monotonic() - listed_at_s < interval_s, "the idle cycles ran before the interval, as meant"
        assert adapter.call_counts[("DescribeInstances", "ok")] == reads_before, "a steady machine is not described"
        assert listed(autoscaler, machine).get("user_id") == f"u-{name}", "not seen before the interval"

        ahead_s[0] = interval_s
        assert (await autoscaler.cycle()).ok
        assert adapter.call_counts[("DescribeInstances", "ok")] == reads_before + 1, "the full listing"
        assert "user_id" not in listed(autoscaler, machine), "seen at the first full listing"


async def until_steady(autoscaler: Reconciler, adapter: AiobotocoreEc2, service_name: str) -> str:
    """The machine the service's task runs on, once a cycle reads nothing of EC2: running, joined and labelled, its
    launch and our last action on it past the book's window."""
    for _ in range(120):
        reads_before = adapter.call_counts[("DescribeInstances", "ok")]
        assert (await autoscaler.cycle()).ok
        snapshot = autoscaler.last.snapshot
        assert snapshot is not None
        nodes = {n.id: n for n in snapshot.nodes}
        running = [t for t in snapshot.tasks if t.service_name == service_name and t.state == "running"]
        node = nodes.get(running[0].node_id or "") if running else None
        if (
            node is not None
            and node.engine_instance_id
            and adapter.call_counts[("DescribeInstances", "ok")] == (reads_before)
        ):
            return node.engine_instance_id
        await asyncio.sleep(0.5)
    raise AssertionError(f"{service_name} never ran on a steady machine: {autoscaler.last.plan}")


def listed(autoscaler: Reconciler, instance_id: str) -> dict[str, str]:
    """The tags of the instance as the last cycle's snapshot holds it."""
    snapshot = autoscaler.last.snapshot
    assert snapshot is not None
    return next(dict(i.tags) for i in snapshot.instances if i.id == instance_id)
