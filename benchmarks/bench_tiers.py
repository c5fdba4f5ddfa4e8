"""Benchmark: a session's wait (request -> running) by its start path, on real sandbox nodes; make bench-tiers

Then, on a cluster of one machine whose group recycles (--recycled-rounds): the time from a session's end to its
machine recycled and offered again (stop, detach, strip, scrub boot, proof), the scrub's own time as the machine's
boot log reports it, and the next owner's wait on that recycled machine (a hot claim).

Per round, one session of each path: a first session claiming a running machine of the hot buffer (its new volume
hot-attached), a first session claiming a stopped machine of the warm buffer (claimed and started), a first session
from a cold launch, a return to a warm machine (stopped for its owner: started again), and a return after the warm
tier ended (a cache return: a new launch carrying the kept volume). Every session has the cache on. Each round uses
new owners; medians last. The cold sessions ask for more than the buffered type offers, so that they cannot claim.
The director's own `start_path` for each session is printed beside it (and must be the one the case expects).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from warmswarm_demos.sessions import start_session
from warmswarm_demos.workload import wait_for
from warmswarm_models import BUFFER_KIND_HOT, ENGINE_LABEL_INSTANCE_ID, INSTANCE_BUFFER_KIND_TAG, INSTANCE_BUFFER_TAG
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.engine import Engine
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
    "AUTOSCALING_HOT_BUFFER": '{"t3.medium": 1}',
}
SMALL = {"cpus": 0.5, "memory_bytes": 256 * MIB}  # fits the buffered t3.medium
LARGE = {"cpus": 1.5, "memory_bytes": 6 * 1024 * MIB}  # does not: a cold launch of a larger type
# (what the case is, the start path the director must say)
CASES = (
    ("first session, hot-buffer claim", "hot_claim"),
    ("first session, warm-buffer claim", "buffer_claim"),
    ("first session, cold launch", "cold_launch"),
    ("return to a warm machine", "warm_resume"),
    ("return after the warm tier (cold)", "cache_return"),
)


class Bench:
    def __init__(self, sandbox: Sandbox, client: httpx.AsyncClient) -> None:
        self.sandbox = sandbox
        self.client = client
        self.ec2 = aws.ec2_client(sandbox.endpoints.ec2_endpoint_url, sandbox.region)

    async def session(
        self, owner: dict[str, str], resources: dict[str, float] = LARGE
    ) -> tuple[str, float, str | None]:
        """Request the owner's session; its instance, the seconds until the director says it runs, and the start path
        the director tells (a moment after "running" at most: it asks the autoscaler once)."""
        started = time.monotonic()
        image = self.sandbox.endpoints.sandbox_image
        status = await start_session(
            self.client, image, owner, "warm", "sleep 100000", resources=resources, timeout_s=180
        )
        took_s = time.monotonic() - started
        path = status.get("start_path")
        if path is None:
            path = (await self.client.get(f"/v1/services/{owner['node_id']}")).json().get("start_path")
        return str(status["instance_id"]), took_s, path

    def check(self, case: int, path: str | None) -> None:
        name, expected = CASES[case]
        assert path == expected, f"{name}: the director says {path}, not {expected}: {self.machines()}"

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

    async def buffer_machine(self, *, hot: bool) -> str:
        """An unclaimed machine of the hot buffer (running, its node joined drained) or the warm one (stopped)."""
        manager = Engine(self.sandbox.endpoints.docker_host)

        async def found() -> str | None:
            joined = {
                n["Description"]["Engine"].get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID)
                for n in manager.get("/nodes")
                if n["Status"]["State"] == "ready" and n["Spec"]["Availability"] == "drain"
            }
            for reservation in self.ec2.describe_instances()["Reservations"]:
                for instance in reservation["Instances"]:
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                    unclaimed = tags.get(INSTANCE_BUFFER_TAG) == "true" and "user_id" not in tags
                    is_hot = tags.get(INSTANCE_BUFFER_KIND_TAG) == BUFFER_KIND_HOT
                    state = instance["State"]["Name"]
                    ready = state == "running" and instance["InstanceId"] in joined if hot else state == "stopped"
                    if unclaimed and is_hot == hot and ready:
                        return str(instance["InstanceId"])
            return None

        kind = "hot (running, joined)" if hot else "warm (stopped)"
        instance_id, _ = await wait_for(f"a {kind} buffer machine", found, timeout_s=180)
        return instance_id

    async def round(self) -> list[float]:
        owner, hot_newcomer, newcomer = (
            {"user_id": f"u-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
            for _ in range(3)
        )
        hot = await self.buffer_machine(hot=True)
        buffered = await self.buffer_machine(hot=False)
        # Two first sessions at once: one claims the hot machine, the other the warm one (a claim takes a hot machine
        # first; asked one after the other, the second would find the hot buffer refilled, boots being this short).
        a, b = await asyncio.gather(self.session(hot_newcomer, SMALL), self.session(newcomer, SMALL))
        if a[0] != hot:
            a, b = b, a
            hot_newcomer, newcomer = newcomer, hot_newcomer
        claimed_hot, hot_s, hot_path = a
        claimed, buffer_s, buffer_path = b
        assert claimed_hot == hot, f"the hot claim got {claimed_hot}, not {hot}: {self.machines()}"
        assert claimed == buffered, f"the first session got {claimed}, not the buffer's {buffered}: {self.machines()}"
        self.check(0, hot_path)
        self.check(1, buffer_path)
        first, cold_first_s, path = await self.session(owner)
        self.check(2, path)
        await self.end(owner, first, "stopped")
        warm, warm_s, path = await self.session(owner)
        self.check(3, path)
        assert warm == first, f"the warm return got {warm}, not {first}"
        await self.end(owner, warm, "shutting-down", "terminated", timeout_s=WARM_S + 120)
        cold, cold_s, path = await self.session(owner)
        self.check(4, path)
        assert cold != first
        await self.end(owner, cold, "stopped")
        await self.end(newcomer, claimed, "stopped")
        await self.end(hot_newcomer, claimed_hot, "stopped")
        return [hot_s, buffer_s, cold_first_s, warm_s, cold_s]


RECYCLE_CLUSTER = "bench-recycle"
# One machine, the hot buffer's: each idle machine has a place to be recycled into, and the next session gets it.
RECYCLE_SETTINGS = {
    "WARMSWARM_CLUSTER": RECYCLE_CLUSTER,
    "AUTOSCALING_IDLE_GRACE_S": "2",
    "AUTOSCALING_AVAILABILITY_ZONES": ZONE,
    "AUTOSCALING_MAX_INSTANCES": "1",
    "AUTOSCALING_HOT_BUFFER": '{"t3.medium": 1}',
}
LAB = {"ebs_cache_enabled": True, "cache_size_gib": 1, "recycle_machines": True, "accept_recycled": True}
# node_scrub.sh's last line: "scrub of token <n>.<t> done in <s> s" (the generation is the token's first part).
SCRUB_SAID = re.compile(r"scrub of token (\d+)\.\d+ done in ([0-9.]+) s")


async def recycled_rounds(sandbox: Sandbox, rounds: int) -> list[tuple[float, float, float]]:
    """Per round: (a session's end -> its machine offered again, the scrub's own seconds, the next owner's wait on the
    recycled machine). The first session of all claims the hot buffer's fresh machine and is not counted."""
    ops_token = new_ops_token()
    url = start_autoscaler(sandbox, name="autoscaling-recycle", settings=RECYCLE_SETTINGS, ops_token=ops_token)
    director = start_director(sandbox, name="director-recycle", autoscaling_url=url, ops_token=ops_token)
    headers = {"Authorization": f"Bearer {director.api_token}"}
    ec2 = aws.ec2_client(sandbox.endpoints.ec2_endpoint_url, sandbox.region)
    image = sandbox.endpoints.sandbox_image
    results: list[tuple[float, float, float]] = []
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers) as client:
        ops = {"Authorization": f"Bearer {ops_token}"}
        (await client.put("/v1/groups/lab/properties", json=LAB, headers=ops)).raise_for_status()

        def owner() -> dict[str, str]:
            return {"user_id": f"r-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}

        current = owner()
        status = await start_session(client, image, current, "lab", "sleep 100000", resources=SMALL, timeout_s=180)
        machine = str(status["instance_id"])
        for generation in range(1, rounds + 1):
            ended = time.monotonic()
            (await client.delete(f"/v1/services/{current['node_id']}")).raise_for_status()

            async def offered(done: str = f"done-{generation}") -> bool:
                found = ec2.describe_instances(InstanceIds=[machine])["Reservations"][0]["Instances"][0]
                tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
                return tags.get("warmswarm:scrub") == done and found["State"]["Name"] == "running"

            await wait_for(f"{machine} recycled ({generation})", offered, timeout_s=240)
            recycle_s = time.monotonic() - ended
            boot_log = (sandbox.state_dir / "logs" / f"{machine}.dockerd.log").parent.glob(f"{machine}*")
            said = [m for path in boot_log for m in SCRUB_SAID.finditer(path.read_text(errors="replace"))]
            scrub_s = next((float(m.group(2)) for m in said if int(m.group(1)) == generation), float("nan"))
            current = owner()
            started = time.monotonic()
            status = await start_session(client, image, current, "lab", "sleep 100000", resources=SMALL, timeout_s=180)
            wait_s = time.monotonic() - started
            assert status["instance_id"] == machine, f"the next owner got {status['instance_id']}, not {machine}"
            results.append((recycle_s, scrub_s, wait_s))
            print(
                f"recycled round {generation}: recycled and offered {recycle_s:.1f} s, scrub {scrub_s:.2f} s,"
                f" next owner's wait {wait_s:.1f} s"
            )
    sandbox.kill("director-recycle")
    sandbox.kill("autoscaling-recycle")
    return results


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
                f"round {number}: "
                + ", ".join(f"{case} {s:.1f} s" for (case, _), s in zip(CASES, results[-1], strict=True))
            )
    # Every autoscaler acts on every pending task of the swarm: this one must not take the recycling phase's sessions.
    sandbox.kill("director")
    sandbox.kill("autoscaling")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--boot-s", type=float, default=1.0, help="the sandbox's emulated launch boot")
    parser.add_argument("--recycled-rounds", type=int, default=3, help="recycles measured on the one-machine cluster")
    args = parser.parse_args()
    print(
        f"reproduce: .venv/bin/python benchmarks/bench_tiers.py --rounds {args.rounds} --boot-s {args.boot_s:g}"
        f" --recycled-rounds {args.recycled_rounds}"
    )
    restart_s = args.boot_s * START_TO_BOOT_RATIO
    print(f"sandbox: launch boot {args.boot_s:g} s, start boot {restart_s:.2f} s (ratio {START_TO_BOOT_RATIO:.2f})")
    print(f"autoscaler: {FAST_AUTOSCALING | SETTINGS}; warm_ttl_s={WARM_S}")
    print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="wstiers-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=args.boot_s)
        try:
            sandbox.start()
            results = asyncio.run(run(sandbox, args.rounds))
            recycled = asyncio.run(recycled_rounds(sandbox, args.recycled_rounds)) if args.recycled_rounds else []
        finally:
            sandbox.stop()
    print("\nrequest -> running, median of", args.rounds, "round(s):")
    for index, (case, path) in enumerate(CASES):
        values = [r[index] for r in results]
        median_s = statistics.median(values)
        print(f"  {case:<36} {path:<13} {median_s:6.1f} s   (min {min(values):.1f}, max {max(values):.1f})")
    cold_column = [path for _, path in CASES].index("cold_launch")
    for column, (case, path) in enumerate(CASES):
        if path != "cold_launch":
            ratio = statistics.median(r[column] / r[cold_column] for r in results)
            print(f"  ratio {case} / cold first session: {ratio:.2f}")
    if recycled:
        print(f"\nrecycling, median of {len(recycled)} recycle(s):")
        for index, what in enumerate(
            ("end -> recycled and offered again", "the scrub (boot log)", "next owner, recycled hot claim")
        ):
            values = [r[index] for r in recycled]
            print(f"  {what:<36} {statistics.median(values):6.2f} s   (min {min(values):.2f}, max {max(values):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
