"""Benchmark: a cache volume grown under a running session, fill to grown filesystem by phase; make bench-grow"""

# Per round, a new owner's session (cache_size_gib 1, cache_max_size_gib 2) writes a line every 50 ms to its volume;
# the bench fills the volume to 88 % (fallocate) and polls, every 0.1 s, until each phase is seen:
#   label   the swarm manager's node shows warmswarm.cache-fill >= 80 (the node's fill timer, then the swarm agent's
#           node update, which comes every 20 s)
#   modify  EC2 lists the autoscaler's ModifyVolume (its reconcile loop read the label)
#   usable  the modification is "optimizing": the sandbox's strict layer holds it "modifying" for its modifying_s
#   grown   the container's df shows the larger filesystem (the disk grown on the host, the node's xfs_growfs)
# Each time is from the fill's end. Medians last.

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
from typing import Any

import httpx
from warmswarm_demos.growth import WRITER_SCRIPT, cache_size_kib, docker, docker_host_of, fill_to, session_container
from warmswarm_demos.sessions import instance_in, start_session
from warmswarm_models import ENGINE_LABEL_CACHE_FILL, ENGINE_LABEL_INSTANCE_ID
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import FAST_AUTOSCALING, new_ops_token, start_autoscaler, start_director

CLUSTER = "bench-grow"
GROUP = "growing"
FILL_PERCENT = 88
GROW_AT_PERCENT = 80
POLL_S = 0.1
PHASES = ("label", "modify", "usable", "grown")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def swarm_node_of(manager: str, instance_id: str) -> str:
    for node_id in docker(manager, "node", "ls", "--quiet").split():
        labels = json.loads(
            docker(manager, "node", "inspect", "--format", "{{json .Description.Engine.Labels}}", node_id)
        )
        if (labels or {}).get(ENGINE_LABEL_INSTANCE_ID) == instance_id:
            return node_id
    raise RuntimeError(f"no swarm node says it is {instance_id}")


def reported_percent(manager: str, node_id: str) -> int:
    labels = json.loads(docker(manager, "node", "inspect", "--format", "{{json .Description.Engine.Labels}}", node_id))
    fill = labels.get(ENGINE_LABEL_CACHE_FILL, ":-1")
    return int(fill.rsplit(":", 1)[1])


def modification_state(ec2: Any, volume_id: str) -> str | None:
    found = ec2.describe_volumes_modifications(VolumeIds=[volume_id]).get("VolumesModifications", [])
    return str(found[-1]["ModificationState"]) if found else None


async def one_round(sandbox: Sandbox, client: httpx.AsyncClient, ec2: Any) -> dict[str, float]:
    owner = {"user_id": f"gus-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
    session = await start_session(client, sandbox.endpoints.sandbox_image, owner, GROUP, WRITER_SCRIPT)
    instance_id, volume_id = session["instance_id"], session["volume_id"]
    manager = sandbox.endpoints.docker_host
    node_id = swarm_node_of(manager, instance_id)
    docker_host = docker_host_of(sandbox, instance_id)
    container_id = session_container(docker_host)
    size_before_kib = fill_to(docker_host, container_id, FILL_PERCENT)
    filled_at = time.monotonic()
    seen: dict[str, float] = {}
    probes = {
        "label": lambda: reported_percent(manager, node_id) >= GROW_AT_PERCENT,
        "modify": lambda: modification_state(ec2, volume_id) is not None,
        "usable": lambda: modification_state(ec2, volume_id) in {"optimizing", "completed"},
        "grown": lambda: cache_size_kib(docker_host, container_id) > size_before_kib,
    }
    while "grown" not in seen:
        if time.monotonic() - filled_at > 180:
            raise TimeoutError(f"not grown within 180 s; seen {seen}")
        for phase in PHASES:
            if phase not in seen and await asyncio.to_thread(probes[phase]):
                seen[phase] = time.monotonic() - filled_at
        await asyncio.sleep(POLL_S)
    (await client.delete(f"/v1/services/{owner['node_id']}")).raise_for_status()
    await instance_in(ec2, instance_id, "shutting-down", "terminated")
    # A phase seen in the same poll as a later one (the label missed between two polls) takes the later's time.
    return {phase: seen.get(phase, seen["grown"]) for phase in PHASES}


async def run(sandbox: Sandbox, rounds: int, fill_period_s: int) -> list[dict[str, float]]:
    ops_token = new_ops_token()
    settings = {"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_CACHE_FILL_PERIOD_S": str(fill_period_s)}
    url = start_autoscaler(sandbox, settings=settings, ops_token=ops_token)
    director = start_director(sandbox, autoscaling_url=url, ops_token=ops_token)
    ec2 = aws.ec2_client(sandbox.endpoints.ec2_endpoint_url, sandbox.endpoints.aws_region)
    headers = {"Authorization": f"Bearer {director.api_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers) as client:
        body = {"ebs_cache_enabled": True, "cache_ttl_s": 60, "cache_size_gib": 1, "cache_max_size_gib": 2}
        ops = {"Authorization": f"Bearer {ops_token}"}
        (await client.put(f"/v1/groups/{GROUP}/properties", json=body, headers=ops)).raise_for_status()
        results = []
        for number in range(1, rounds + 1):
            results.append(await one_round(sandbox, client, ec2))
            print(f"round {number}: " + ", ".join(f"{phase} {s:.1f} s" for phase, s in results[-1].items()))
    sandbox.kill("director")
    sandbox.kill("autoscaling")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fill-period-s", type=int, default=10, help="the node's fill timer (the default's 10 s)")
    args = parser.parse_args()
    command = f"benchmarks/bench_grow.py --rounds {args.rounds} --fill-period-s {args.fill_period_s}"
    print(f"reproduce: .venv/bin/python {command}")
    print(f"autoscaler: {FAST_AUTOSCALING}; AUTOSCALING_CACHE_FILL_PERIOD_S={args.fill_period_s}")
    print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="wsgrow-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=1.0)
        try:
            sandbox.start()
            with _NO_PROXY.open(f"{sandbox.endpoints.ec2_endpoint_url}/strict/config", timeout=10) as answer:
                config = json.load(answer)
            print(f"strict layer: modifying_s {config['modifying_s']:g}, optimizing_s {config['optimizing_s']:g}")
            results = asyncio.run(run(sandbox, args.rounds, args.fill_period_s))
        finally:
            sandbox.stop()
    print(f"\nfrom the fill (to {FILL_PERCENT} %), median of {len(results)} round(s):")
    for phase in PHASES:
        values = [r[phase] for r in results]
        print(f"  {phase:<8} {statistics.median(values):6.1f} s   (min {min(values):.1f}, max {max(values):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
