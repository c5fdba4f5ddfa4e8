"""Benchmark: what one "no capacity" answer to RunInstances costs before the planner may try the next offering.

Run: .venv/bin/python benchmarks/bench_capacity_fallback.py [--repeat 5]   (as root: it starts the sandbox)
Against the sandbox's strict EC2 layer (which answers InsufficientInstanceCapacity, HTTP 500, as AWS
does), it times a refused RunInstances through a client with botocore's standard retries at
5 attempts (AUTOSCALING_EC2_MAX_ATTEMPTS' default) and at 1 (the launch client main.py wires).
Prints the median and spread of each; machines here are shared, so read the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import LAUNCH_CLIENT_ATTEMPTS, ec2_client
from warmswarm_autoscaling.ports import Ec2Error, LaunchRequest
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import SANDBOX_IMAGE_ID

TYPE, ZONE = "t3.medium", "us-east-1a"


def admin(ec2_endpoint_url: str, path: str, body: dict[str, object] | None = None) -> dict[str, object]:
    request = urllib.request.Request(
        f"{ec2_endpoint_url}/strict/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method="GET" if body is None else "POST",
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        found: dict[str, object] = json.load(answer)
        return found


def run_instances_calls(ec2_endpoint_url: str) -> int:
    answers = admin(ec2_endpoint_url, "calls")["answers"]
    assert isinstance(answers, dict)
    return sum(answers.get("RunInstances", {}).values())


async def refused_launch_s(ec2_endpoint_url: str, region: str, attempts: int, repeat: int) -> list[float]:
    timings: list[float] = []
    async with ec2_client(ec2_endpoint_url, region, attempts) as client:
        ec2 = AiobotocoreEc2(client)
        for _ in range(repeat):
            request = LaunchRequest(TYPE, ZONE, SANDBOX_IMAGE_ID, "", {}, client_token=uuid.uuid4().hex)
            started = time.perf_counter()
            try:
                await ec2.run_instance(request)
            except Ec2Error as error:
                if error.code != "InsufficientInstanceCapacity":
                    raise
            else:
                raise RuntimeError("the strict layer launched an instance it was told had no capacity")
            timings.append(time.perf_counter() - started)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with tempfile.TemporaryDirectory(prefix="wsbench-") as state:
        sandbox = Sandbox(Path(state) / "cloud")
        try:
            endpoints = sandbox.start()
            url = endpoints.ec2_endpoint_url
            admin(url, "capacity", {"instance_type": TYPE, "availability_zone": ZONE, "available": False})
            # A bucket too large to run dry: the figures are botocore's backoff, not the layer's throttling.
            admin(url, "throttle", {"bucket": "run_instances", "burst": 10_000, "refill_per_s": 1_000})
            print(f"one refused RunInstances ({TYPE} in {ZONE}), {args.repeat} runs each")
            print("attempts  median s   min s   max s   calls per refusal")
            for attempts in (5, LAUNCH_CLIENT_ATTEMPTS):
                calls_before = run_instances_calls(url)
                runs = asyncio.run(refused_launch_s(url, endpoints.aws_region, attempts, args.repeat))
                calls = (run_instances_calls(url) - calls_before) / args.repeat
                print(f"{attempts:8d}  {statistics.median(runs):8.3f} {min(runs):7.3f} {max(runs):7.3f}   {calls:g}")
        finally:
            sandbox.stop()


if __name__ == "__main__":
    main()
