"""Benchmark: a session's wait (request -> running) by the tier it starts from, on real sandbox nodes; make bench-tiers

A first session from a cold launch, a return to a warm machine (stopped for its owner: started again), a return
after the warm tier ended (cold: a new launch carrying the kept volume), and a first session from the warm buffer
(a stopped anonymous machine claimed and started). Every session has the cache on. Each round uses new owners;
medians last. The cold first session asks for more than the buffered type offers, so that it cannot claim one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from warmswarm_demos.sessions import start_session
from warmswarm_demos.workload import wait_for
from warmswarm_models import INSTANCE_BUFFER_TAG
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.layout import START_TO_BOOT_RATIO
from warmswarm_sandbox.services import FAST_AUTOSCALING, new_ops_token, start_autoscaler, start_director

CLUSTER = "bench-tiers"
MIB = 2**20
WARM_S = 20  # short, so that the cold return comes soon after the warm one
ZONE = "us-east-1a"  # one zone: a buffer of one machine
SETTINGS = {
    "WARMSWARM_CLUSTER": CLUSTER,
    "AUTOSCALING_IDLE_GRACE_S": "2",
    "AUTOSCALING_AVAILABILITY_ZONES": ZONE,
    "AUTOSCALING_WARM_BUFFER": '{"t3.medium": 1}',
}
SMALL = {"cpus": 0.5, "memory_bytes": 256 * MIB}  # fits the buffered t3.medium
LARGE = {"cpus": 1.5, "memory_bytes": 6 * 1024 * MIB}  # does not: a cold launch of a larger type
CASES = (
    "first session, cold launch",
    "return to a warm machine",
    "return after the warm tier (cold)",
    "first session from the buffer",
)


class Bench:
    def __init__(self, sandbox: Sandbox, client: httpx.AsyncClient) -> None:
        self.sandbox = sandbox
        self.client = client
        self.ec2 = aws.ec2_client(sandbox.endpoints.ec2_endpoint_url, sandbox.region)

    async def session(self, owner: dict[str, str], resources: dict[str, float] = LARGE) -> tuple[str, float]:
        """Request the owner's session; its instance and the seconds until the director says it runs."""
        started = time.monotonic()
        image = self.sandbox.endpoints.sandbox_image
        status = await start_session(
            self.client, image, owner, "warm", "sleep 100000", resources=resources, timeout_s=180
        )
        return str(status["instance_id"]), time.monotonic() - started

    async def end(self, owner: dict[str, str], instance_id: str, *states: str, timeout_s: float = 120) -> None:
        (await self.client.delete(f"/v1/services/{owner['node_id']}")).raise_for_status()

        async def reached() -> bool:
            found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
            return found["State"]["Name"] in states

        await wait_for(f"{instance_id} {'/'.join(states)}", reached, timeout_s=timeout_s)

    def machines(self) -> list[tuple[str, str, dict[str, str]]]:
        """Every instance with its state and tags, for a failure's message."""
        return [
            (
                i["InstanceId"],
                i["State"]["Name"],
                {t["Key"]: t["Value"] for t in i.get("Tags", []) if "reason" not in t["Key"]},
            )
            for r in self.ec2.describe_instances()["Reservations"]
            for i in r["Instances"]
        ]

    async def stopped_buffer_machine(self) -> str:
        async def found() -> str | None:
            for reservation in self.ec2.describe_instances()["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                    unclaimed = tags.get(INSTANCE_BUFFER_TAG) == "true" and "user_id" not in tags
                    if unclaimed and instance["State"]["Name"] == "stopped":
                        return str(instance["InstanceId"])
            return None

        instance_id, _ = await wait_for("a stopped buffer machine", found, timeout_s=180)
        return instance_id

    async def round(self) -> list[float]:
        owner, newcomer = (
            {"user_id": f"u-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
            for _ in range(2)
        )
        buffered = await self.stopped_buffer_machine()
        first, cold_first_s = await self.session(owner)
        await self.end(owner, first, "stopped")
        warm, warm_s = await self.session(owner)
        assert warm == first, f"the warm return got {warm}, not {first}"
        await self.end(owner, warm, "shutting-down", "terminated", timeout_s=WARM_S + 120)
        cold, cold_s = await self.session(owner)
        assert cold != first
        claimed, buffer_s = await self.session(newcomer, SMALL)
        assert claimed == buffered, f"the first session got {claimed}, not the buffer's {buffered}: {self.machines()}"
        await self.end(owner, cold, "stopped")
        await self.end(newcomer, claimed, "stopped")
        return [cold_first_s, warm_s, cold_s, buffer_s]


async def run(sandbox: Sandbox, rounds: int) -> list[list[float]]:
    ops_token = new_ops_token()
    url = start_autoscaler(sandbox, settings=SETTINGS, ops_token=ops_token)
    director = start_director(sandbox, autoscaling_url=url, ops_token=ops_token)
    headers = {"Authorization": f"Bearer {director.api_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers) as client:
        warm = {"ebs_cache_enabled": True, "cache_ttl_s": 3600, "cache_size_gib": 1, "warm_ttl_s": WARM_S}
        ops = {"Authorization": f"Bearer {ops_token}"}
        (await client.put("/v1/groups/warm/properties", json=warm, headers=ops)).raise_for_status()
        bench = Bench(sandbox, client)
        results = []
        for number in range(1, rounds + 1):
            results.append(await bench.round())
            print(
                f"round {number}: " + ", ".join(f"{case} {s:.1f} s" for case, s in zip(CASES, results[-1], strict=True))
            )
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--boot-s", type=float, default=1.0, help="the sandbox's emulated launch boot")
    args = parser.parse_args()
    print(f"reproduce: .venv/bin/python benchmarks/bench_tiers.py --rounds {args.rounds} --boot-s {args.boot_s:g}")
    restart_s = args.boot_s * START_TO_BOOT_RATIO
    print(f"sandbox: launch boot {args.boot_s:g} s, start boot {restart_s:.2f} s (ratio {START_TO_BOOT_RATIO:.2f})")
    print(f"autoscaler: {FAST_AUTOSCALING | SETTINGS}; warm_ttl_s={WARM_S}")
    print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="wstiers-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=args.boot_s)
        try:
            sandbox.start()
            results = asyncio.run(run(sandbox, args.rounds))
        finally:
            sandbox.stop()
    print("\nrequest -> running, median of", args.rounds, "round(s):")
    for index, case in enumerate(CASES):
        values = [r[index] for r in results]
        print(f"  {case:<36} {statistics.median(values):6.1f} s   (min {min(values):.1f}, max {max(values):.1f})")
    print(f"  ratio warm / cold first session: {statistics.median(r[1] / r[0] for r in results):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
