"""Benchmark: N owners' services at once on real sandbox nodes, up and down, timed, with RSS; make bench-sandbox"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import aiodocker
from warmswarm_demos.workload import create_service
from warmswarm_models import CLUSTER_TAG, ENGINE_LABEL_INSTANCE_ID
from warmswarm_sandbox import aws
from warmswarm_sandbox.boot_watcher import node_records
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.layout import Layout, SandboxRecord, recorded_procs
from warmswarm_sandbox.node import NodeRecord
from warmswarm_sandbox.services import FAST_AUTOSCALING, new_ops_token, start_autoscaler

CLUSTER = "bench"
GIB = 2**30
BOOT_S = 1.0  # the emulated boot, as in `make demo`
POLL_S = 0.25
SAMPLE_S = 1.0
UP_TIMEOUT_S = 300.0
DOWN_TIMEOUT_S = 300.0
PROGRESS_S = 10.0
LIVE_STATES = frozenset({"pending", "running", "stopping", "stopped"})
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
UP_STEPS = ("all launch calls made", "all nodes joined", "all nodes labelled", "all tasks running")
DOWN_STEPS = ("all instances terminated", "all worker nodes removed")
WORKERS = "worker machines"


# -- memory: the sandbox's processes, read from /proc ------------------------------------------------------


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        children.setdefault(int(raw[raw.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    return children


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return 0


def _roots(layout: Layout) -> dict[str, list[int]]:
    """Each group's root pids: machines first (the boot watcher is their parent, they must not count twice)."""
    groups = {WORKERS: [r.pid for r in node_records(layout).values() if r.is_powered_on()]}
    with contextlib.suppress(OSError, ValueError, TypeError):
        groups["manager machine"] = [NodeRecord.load(layout.manager_dir / "node.json").pid]
    for name, proc in sorted(recorded_procs(layout.procs_dir).items()):
        groups[name] = [proc.pid]
    return groups


def memory_by_group(layout: Layout, read: Callable[[int], int] = _rss_bytes) -> tuple[dict[str, int], int]:
    """Bytes per group (each root with all its descendants, each pid counted once); and the number of workers."""
    children, claimed, found = _children_by_parent(), set[int](), {}
    roots = _roots(layout)
    for group, pids in roots.items():
        stack, total = list(pids), 0
        while stack:
            pid = stack.pop()
            if pid in claimed:
                continue
            claimed.add(pid)
            total += read(pid)
            stack.extend(children.get(pid, []))
        found[group] = total
    return found, len(roots[WORKERS])


class PeakMemory(threading.Thread):
    """Samples the sandbox's summed RSS every SAMPLE_S and keeps the largest sample."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self.layout = layout
        self.peak: dict[str, int] = {}
        self.workers_at_peak = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        groups, workers = memory_by_group(self.layout)
        if sum(groups.values()) > sum(self.peak.values()):
            self.peak, self.workers_at_peak = groups, workers

    def reset(self) -> None:
        self.peak, self.workers_at_peak = {}, 0

    def stop(self) -> None:
        self._stop_event.set()


# -- the cloud, looked at without touching the autoscaler's API budget -------------------------------------


def cluster_instances(moto: Any) -> dict[str, dict[str, Any]]:
    """This cluster's instances in any state, straight from moto: the strict layer's buckets are the autoscaler's."""
    found: dict[str, dict[str, Any]] = {}
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]}]
    for page in moto.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
    return found


def run_instances_answers(ec2_endpoint_url: str) -> dict[str, int]:
    """RunInstances answers by code so far, as the strict layer counted them."""
    with urllib.request.urlopen(f"{ec2_endpoint_url}/strict/calls", timeout=10) as answer:
        answers: dict[str, dict[str, int]] = json.load(answer)["answers"]
    return dict(answers.get("RunInstances", {}))


def autoscaler_status(url: str, ops_token: str) -> dict[str, Any]:
    request = urllib.request.Request(f"{url}/v1/status", headers={"Authorization": f"Bearer {ops_token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        status: dict[str, Any] = json.load(answer)
        return status


# -- one round: N services up, then down -------------------------------------------------------------------


@dataclass
class Round:
    marks: dict[str, float] = field(default_factory=dict)  # step -> seconds since the services were created
    created_s: float = 0.0  # how long the N create calls took (all at once)
    instances_launched: int = 0
    run_instances: dict[str, int] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    workers_at_peak: int = 0
    pss_running: int = 0
    left_running: int = -1
    left_workers: int = -1
    left_machines: int = -1


def _labelled_for(node: Mapping[str, Any], owner: Mapping[str, str]) -> bool:
    labels = node["Spec"].get("Labels") or {}
    return all(labels.get(key) == value for key, value in owner.items()) and node["Spec"]["Availability"] == "active"


class Bench:
    def __init__(self, sandbox: Sandbox, layout: Layout, autoscaler_url: str, ops_token: str) -> None:
        self.sandbox, self.layout = sandbox, layout
        self.url, self.ops_token = autoscaler_url, ops_token
        self.moto = aws.ec2_client(sandbox.endpoints.moto_endpoint_url, sandbox.endpoints.aws_region)
        self.sampler = PeakMemory(layout)

    def _progress(self, started: float, last: list[float], text: str) -> None:
        if time.monotonic() - last[0] >= PROGRESS_S:
            last[0] = time.monotonic()
            print(f"  [{time.monotonic() - started:6.1f} s] {text}", flush=True)

    async def run_round(self, number: int, owners: int) -> Round:
        endpoints, result = self.sandbox.endpoints, Round()
        people = [
            {"user_id": f"u{number}-{i:03d}", "project_id": "bench", "node_id": f"n{number}-{i:03d}"}
            for i in range(owners)
        ]
        before = set(await asyncio.to_thread(cluster_instances, self.moto))
        calls_before = await asyncio.to_thread(run_instances_answers, endpoints.ec2_endpoint_url)
        self.sampler.reset()
        async with aiodocker.Docker(url=endpoints.docker_host) as docker:
            started = time.monotonic()
            image = endpoints.sandbox_image
            creations = (
                create_service(docker, f"bench-{number}-{i:03d}", image, owner=p, cpus=1, memory_bytes=GIB)
                for i, p in enumerate(people)
            )
            service_ids = await asyncio.gather(*creations)
            result.created_s = time.monotonic() - started
            owner_of = dict(zip(service_ids, people, strict=True))
            last = [started]
            while len(result.marks) < len(UP_STEPS):
                if time.monotonic() - started > UP_TIMEOUT_S:
                    raise TimeoutError(f"scale-up: only {sorted(result.marks)} within {UP_TIMEOUT_S:g} s")
                instances = set(await asyncio.to_thread(cluster_instances, self.moto)) - before
                nodes = {n["ID"]: n for n in await docker.nodes.list() if n["Spec"]["Role"] == "worker"}
                tasks = await docker.tasks.list(filters={"desired-state": "running"})
                now = time.monotonic() - started
                joined = [
                    n
                    for n in nodes.values()
                    if n["Status"]["State"] == "ready"
                    and n["Description"].get("Engine", {}).get("Labels", {}).get(ENGINE_LABEL_INSTANCE_ID) in instances
                ]
                labelled = {p["user_id"] for p in people for n in joined if _labelled_for(n, p)}
                # A task counts only on a node labelled for its own owner; and each on a daemon of its own.
                on_own_node = {
                    t["NodeID"]
                    for t in tasks
                    if t["ServiceID"] in owner_of
                    and t["Status"]["State"] == "running"
                    and t["NodeID"] in nodes
                    and _labelled_for(nodes[t["NodeID"]], owner_of[t["ServiceID"]])
                }
                counts = (len(instances), len(joined), len(labelled), len(on_own_node))
                for step, count in zip(UP_STEPS, counts, strict=True):
                    if count >= owners and step not in result.marks:
                        result.marks[step] = now
                shown = ", ".join(f"{step.split()[-1]} {n}" for step, n in zip(UP_STEPS, counts, strict=True))
                self._progress(started, last, f"{shown} of {owners}")
                if len(result.marks) < len(UP_STEPS):
                    await asyncio.sleep(POLL_S)
            result.instances_launched = len(instances)
            self.sampler.sample()
            result.pss_running = sum(memory_by_group(self.layout, _pss_bytes)[0].values())

            down = time.monotonic()
            await asyncio.gather(*(docker.services.delete(service_id) for service_id in service_ids))
            while True:
                if time.monotonic() - down > DOWN_TIMEOUT_S:
                    left = f"{result.left_running} instances and {result.left_workers} worker nodes"
                    raise TimeoutError(f"scale-down: {left} left after {DOWN_TIMEOUT_S:g} s")
                described = await asyncio.to_thread(cluster_instances, self.moto)
                result.left_running = sum(1 for i in described.values() if i["State"]["Name"] in LIVE_STATES)
                result.left_workers = sum(1 for n in await docker.nodes.list() if n["Spec"]["Role"] == "worker")
                now = time.monotonic() - started
                for step, count in zip(DOWN_STEPS, (result.left_running, result.left_workers), strict=True):
                    if count == 0 and step not in result.marks:
                        result.marks[step] = now
                left = f"left: {result.left_running} instances, {result.left_workers} worker nodes"
                self._progress(down, last, left)
                if all(step in result.marks for step in DOWN_STEPS):
                    break
                await asyncio.sleep(POLL_S)
            result.marks["services removed"] = down - started
        calls_after = await asyncio.to_thread(run_instances_answers, endpoints.ec2_endpoint_url)
        result.run_instances = {code: n - calls_before.get(code, 0) for code, n in calls_after.items()}
        result.run_instances = {code: n for code, n in result.run_instances.items() if n}
        # The hypervisor powers a terminated instance's machine off; none may still run.
        await asyncio.sleep(2 * POLL_S)
        result.left_machines = sum(1 for r in node_records(self.layout).values() if r.is_powered_on())
        result.peak, result.workers_at_peak = self.sampler.peak, self.sampler.workers_at_peak
        return result

    def diagnose(self) -> None:
        """What the autoscaler says when a round did not finish: pending tasks and its latest decisions."""
        try:
            status = autoscaler_status(self.url, self.ops_token)
        except OSError as error:
            print(f"  (no status from the autoscaler: {error})")
            return
        for key, value in status.items():
            if key != "decisions":
                print(f"  status.{key}: {json.dumps(value)[:1500]}")
        for decision in status.get("decisions", [])[-15:]:
            print(f"  decision: {json.dumps(decision)[:300]}")


# -- printing ----------------------------------------------------------------------------------------------


def _mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def report(number: int, owners: int, r: Round) -> None:
    print(f"\nround {number}: {owners} owners, services created in {r.created_s:.2f} s (all at once)")
    for step in UP_STEPS:
        print(f"  services created → {step:<28} {r.marks[step]:7.1f} s")
    removed = r.marks["services removed"]
    for step in DOWN_STEPS:
        print(f"  services removed → {step:<28} {r.marks[step] - removed:7.1f} s")
    calls = ", ".join(f"{code}: {n}" for code, n in sorted(r.run_instances.items())) or "none"
    print(f"  instances launched: {r.instances_launched} for {owners} owners; RunInstances calls by answer: {calls}")
    total = sum(r.peak.values())
    print(f"  sandbox RSS at peak (1 s samples): {_mib(total)}, {r.workers_at_peak} worker machines on; by part:")
    for group, size in sorted(r.peak.items(), key=lambda item: -item[1]):
        print(f"    {group:<16} {_mib(size):>10}")
    if r.workers_at_peak:
        print(f"    per worker machine: {_mib(r.peak.get(WORKERS, 0) / r.workers_at_peak)}")
    print(f"  PSS (shared pages split) when all tasks ran: {_mib(r.pss_running)}")
    ok = "OK" if (r.left_running, r.left_workers, r.left_machines) == (0, 0, 0) else "FAILED"
    print(
        f"  check {ok}: {r.left_running} instances pending/running/stopped, {r.left_workers} worker nodes,"
        f" {r.left_machines} machines powered on"
    )


def summary(rounds: list[Round]) -> None:
    print(f"\nmedian over {len(rounds)} rounds:")
    for step in UP_STEPS:
        print(f"  services created → {step:<28} {statistics.median(r.marks[step] for r in rounds):7.1f} s")
    for step in DOWN_STEPS:
        taken = [r.marks[step] - r.marks["services removed"] for r in rounds]
        print(f"  services removed → {step:<28} {statistics.median(taken):7.1f} s")
    print(f"  sandbox RSS at peak {_mib(statistics.median(sum(r.peak.values()) for r in rounds))}")


def _interrupted(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--owners", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    argv = f"--owners {args.owners} --repeat {args.repeat}"
    print(f"reproduce: make bench-sandbox BENCH_SANDBOX_ARGS='{argv}'")
    print(f"       or: sudo .venv/bin/python benchmarks/bench_sandbox.py {argv}   (root: it starts the sandbox)")
    settings = {"WARMSWARM_CLUSTER": CLUSTER, "AUTOSCALING_MAX_INSTANCES": str(2 * args.owners)}
    shown = {**FAST_AUTOSCALING, **settings}
    print(f"sandbox boot {BOOT_S:g} s; autoscaler: {' '.join(f'{k}={v}' for k, v in sorted(shown.items()))}")
    print(f"machine: {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        "RSS summed over: each worker's and the manager's machine (unshare, tini, dockerd, containerd, shims,"
        " containers), moto, strict-ec2, redis, boot-watcher, the autoscaler; with children; not this process"
    )
    signal.signal(signal.SIGTERM, _interrupted)
    rounds: list[Round] = []
    with tempfile.TemporaryDirectory(prefix="wsbench-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=BOOT_S)
        bench: Bench | None = None
        try:
            started = time.monotonic()
            sandbox.start()
            layout = Layout(state_dir=sandbox.state_dir, subnet=SandboxRecord.load(sandbox.state_dir).subnet)
            ops_token = new_ops_token()
            url = start_autoscaler(sandbox, settings=settings, ops_token=ops_token)
            print(f"sandbox and autoscaler up in {time.monotonic() - started:.1f} s")
            bench = Bench(sandbox, layout, url, ops_token)
            bench.sampler.start()
            for number in range(1, args.repeat + 1):
                rounds.append(asyncio.run(bench.run_round(number, args.owners)))
                report(number, args.owners, rounds[-1])
            if len(rounds) > 1:
                summary(rounds)
        except (Exception, KeyboardInterrupt) as error:
            print(f"\nbenchmark failed: {type(error).__name__}: {error}", file=sys.stderr)
            if bench is not None:
                bench.diagnose()
            logs = Path(state) / "cloud" / "logs"
            if logs.is_dir():
                kept = Path(tempfile.mkdtemp(prefix="wsbench-logs-"))
                shutil.copytree(logs, kept, dirs_exist_ok=True)
                print(f"the sandbox's logs are kept in {kept}", file=sys.stderr)
            return 1
        finally:
            if bench is not None:
                bench.sampler.stop()
            print("tearing the sandbox down", flush=True)
            sandbox.stop()
    failed = any((r.left_running, r.left_workers, r.left_machines) != (0, 0, 0) for r in rounds)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
