"""A real Prometheus scrapes two autoscaler replicas and the director: the dashboard and the alerts read real series."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml  # type: ignore[import-untyped]  # PyYAML ships no type hints
from warmswarm_demos import sessions
from warmswarm_demos.workload import wait_for
from warmswarm_models import CLUSTER_TAG
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import (
    StartedDirector,
    autoscaler_env,
    free_port,
    new_ops_token,
    start_director,
    wait_ready,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus-rules.yml"
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
CLUSTER = "e2e-prometheus"
# Long enough that the killed leader's lease outlives the alert's wait: no takeover can hide the alert.
LOCK_TTL_S = 60.0
SETTINGS = {
    "WARMSWARM_CLUSTER": CLUSTER,
    "AUTOSCALING_LEADER_LOCK_TTL_S": str(LOCK_TTL_S),
    "AUTOSCALING_LEADER_RENEW_INTERVAL_S": "0.5",
    "AUTOSCALING_IDLE_GRACE_S": "3",
    # The injected EC2 failures fail cycles on purpose: the next one need not wait the default 5 s.
    "AUTOSCALING_FAILURE_BACKOFF_S": "1",
}
OPS_TOKEN = new_ops_token()
NO_LEADER_ALERT = "WarmswarmNoLeader"
# The e2e loads the rules with this alert's `for:` (1m) cut to this: what it checks is that the expression fires on
# real series after the leader dies, and no sooner than its `for:`; the minute itself is promtool's to check
# (tests/prometheus/rules-test.yml), and waiting it out here cost the suite a minute.
NO_LEADER_FOR_S = 10.0
# Scrapes and rule evaluations every second: a series shows within a few; a query waits this long at most.
SERIES_TIMEOUT_S = 30.0
# Series names in a PromQL expression; Prometheus stores the samples under these very names (_total, _bucket...).
_SERIES_NAME = re.compile(r"\bwarmswarm_[a-z_]+\b")
# The proxies of the environment must not see loopback traffic (Prometheus reads none of them: it is given none).
_PROXY_VARS = {"http_proxy", "https_proxy", "all_proxy", "no_proxy"}


@dataclass
class Replica:
    name: str
    port: int
    pid: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class World:
    replicas: list[Replica]
    leader: Replica
    director: StartedDirector


def start_replica(sandbox: Sandbox, name: str) -> Replica:
    # As services.start_autoscaler, keeping the pid: the test kills the leader with SIGKILL.
    port = free_port()
    env = autoscaler_env(sandbox.endpoints, port, SETTINGS, ops_token=OPS_TOKEN)
    pid = sandbox.spawn(name, [sys.executable, "-m", "warmswarm_autoscaling"], env)
    wait_ready(f"http://127.0.0.1:{port}", 60)
    return Replica(name, port, pid)


def leading(replica: Replica) -> bool | None:
    try:
        answer = httpx.get(
            f"{replica.url}/v1/status", headers={"Authorization": f"Bearer {OPS_TOKEN}"}, timeout=2, trust_env=False
        )
    except httpx.HTTPError:
        return None
    return bool(answer.json()["leader"])


@pytest.fixture
def world(sandbox: Sandbox, ec2: Any) -> Iterator[World]:
    names = ("prom-replica-a", "prom-replica-b", "prom-director")
    try:
        replicas = [start_replica(sandbox, name) for name in names[:2]]
        deadline = time.monotonic() + 30
        while True:
            flags = [leading(r) for r in replicas]
            if sorted(flags, key=bool) == [False, True]:
                break
            assert time.monotonic() < deadline, f"not exactly one leader: {flags}"
            time.sleep(0.2)
        leader = replicas[flags.index(True)]
        director = start_director(sandbox, name=names[2], autoscaling_url=leader.url, ops_token=OPS_TOKEN)
        yield World(replicas, leader, director)
    finally:
        for name in names:
            sandbox.kill(name)
        # No replica leads any more, so nothing of this cluster's outlives the test unless removed here.
        filters = [
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [CLUSTER]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
        ]
        reservations = ec2.describe_instances(Filters=filters)["Reservations"]
        leftovers = [i["InstanceId"] for r in reservations for i in r["Instances"]]
        if leftovers:
            ec2.terminate_instances(InstanceIds=leftovers)


@pytest.fixture
def prometheus(world: World, tmp_path: Path) -> Iterator[str]:
    """A Prometheus scraping both replicas and the director every second, the rules evaluated every second."""
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed: run scripts/install-system-deps.sh"
    director_port = world.director.url.rsplit(":", 1)[1]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(_rules_with_short_no_leader_wait(tmp_path))],
        "scrape_configs": [
            {
                "job_name": "warmswarm-autoscaler",
                "static_configs": [{"targets": [f"127.0.0.1:{r.port}" for r in world.replicas]}],
            },
            {"job_name": "warmswarm-director", "static_configs": [{"targets": [f"127.0.0.1:{director_port}"]}]},
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    env = {k: v for k, v in os.environ.items() if k.lower() not in _PROXY_VARS}
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config_file}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}"
            try:
                if httpx.get(f"{url}/-/ready", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready: {(tmp_path / 'prometheus.log').read_text()}"
            time.sleep(0.2)
        yield url
    finally:
        # Ours, by its pid: SIGTERM, then SIGKILL if it does not go.
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


@pytest.fixture
async def prom(prometheus: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=prometheus, timeout=10, trust_env=False) as client:
        yield client


async def query(prom: httpx.AsyncClient, expr: str) -> dict[str, Any]:
    """The answer's data; a PromQL error fails the test with Prometheus' own words."""
    answer = await prom.get("/api/v1/query", params={"query": expr})
    body: dict[str, Any] = answer.json()
    assert answer.status_code == 200, f"{expr}: {body.get('errorType')}: {body.get('error')}"
    assert body["status"] == "success", f"{expr}: {body}"
    data: dict[str, Any] = body["data"]
    return data


async def has_data(prom: httpx.AsyncClient, expr: str) -> bool:
    """A scalar, or a vector with at least one sample (NaN counts: the series exist, the ratio is 0/0)."""
    data = await query(prom, expr)
    return data["resultType"] == "scalar" or bool(data["result"])


async def until_data(prom: httpx.AsyncClient, expr: str, deadline: float) -> bool:
    """Whether `expr` has data before `deadline` (monotonic): a rate needs two scrapes after a series appears."""
    while True:
        if await has_data(prom, expr):
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)


async def provoke_ec2_failures(endpoints: Endpoints, leader: Replica) -> None:
    """A throttle and a refusal the leader really meets (the strict layer's faults), so that the panels and alerts
    on error codes have series to read; faults left unused are cleared for the tests after this one."""
    strict = f"{endpoints.ec2_endpoint_url}/strict/fail"
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        try:
            # Throttling is retried by botocore (5 attempts by default): every attempt meets it, one failure counted.
            faults = [
                {"action": "DescribeInstances", "code": "RequestLimitExceeded", "status": 503, "times": 5},
                {"action": "DescribeInstances", "code": "UnauthorizedOperation", "status": 403, "times": 1},
            ]
            for fault in faults:
                assert (await client.post(strict, json=fault)).status_code == 200

            async def counted() -> bool:
                text = (await client.get(f"{leader.url}/metrics")).text
                return 'code="RequestLimitExceeded"' in text and 'code="UnauthorizedOperation"' in text

            await wait_for("the leader counted both failures", counted, timeout_s=60, interval_s=0.5)
        finally:
            await client.delete(strict)


def dashboard_queries() -> list[tuple[str, str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(panel["title"], target["expr"]) for panel in panels for target in panel["targets"]]


def _rules_with_short_no_leader_wait(tmp_path: Path) -> Path:
    """docs/prometheus-rules.yml with WarmswarmNoLeader's `for:` cut to NO_LEADER_FOR_S, every other rule as is."""
    rules = yaml.safe_load(RULES.read_text())
    cut = [r for g in rules["groups"] for r in g["rules"] if r.get("alert") == NO_LEADER_ALERT]
    assert len(cut) == 1, f"{NO_LEADER_ALERT} is not in {RULES}"
    cut[0]["for"] = f"{NO_LEADER_FOR_S:g}s"
    path = tmp_path / "prometheus-rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    return path


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


async def test_dashboard_and_alerts_read_real_series_and_a_dead_leader_fires_the_alert(
    world: World, prom: httpx.AsyncClient, endpoints: Endpoints
) -> None:
    started = time.monotonic()

    async def all_scraped() -> bool:
        data = await query(prom, "sum(up)")
        return bool(data["result"]) and float(data["result"][0]["value"][1]) == 3

    await wait_for("both replicas and the director scraped", all_scraped, timeout_s=SERIES_TIMEOUT_S)

    # One short session through the director: the start histogram and the cache counters get a sample each.
    ops = {"Authorization": f"Bearer {OPS_TOKEN}"}
    platform = {"Authorization": f"Bearer {world.director.api_token}"}
    owner = {"user_id": f"pro-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}
    async with httpx.AsyncClient(base_url=world.director.url, timeout=30, headers=platform, trust_env=False) as api:
        properties = {"ebs_cache_enabled": True, "cache_ttl_s": 30, "cache_size_gib": 1}
        answer = await api.put("/v1/groups/prom-cached/properties", json=properties, headers=ops)
        assert answer.status_code == 200, answer.text
        try:
            await sessions.start_session(api, endpoints.sandbox_image, owner, "prom-cached", "sleep 100000")
            session_s = time.monotonic() - started

            await provoke_ec2_failures(endpoints, world.leader)

            # Every panel's query has data: an empty vector would be a misspelt series or label.
            deadline = time.monotonic() + SERIES_TIMEOUT_S
            empty = [(title, expr) for title, expr in dashboard_queries() if not await until_data(prom, expr, deadline)]
            assert not empty, f"dashboard queries without data: {empty}"

            # Every alert evaluates, and every series it names exists (a misspelt one would never fire).
            rules = alert_rules()
            assert rules
            for rule in rules:
                await query(prom, rule["expr"])
                for name in sorted(set(_SERIES_NAME.findall(rule["expr"]))):
                    assert await until_data(prom, f"count({name})", deadline), f"{rule['alert']}: no series {name}"
            checked_s = time.monotonic() - started
        finally:
            await api.delete(f"/v1/services/{owner['node_id']}")

    # The leader dies without a word; its lease (LOCK_TTL_S) keeps the follower from taking over meanwhile.
    os.kill(world.leader.pid, signal.SIGKILL)
    killed_at = time.monotonic()

    async def no_leader_firing() -> bool:
        alerts = (await prom.get("/api/v1/alerts")).json()["data"]["alerts"]
        return any(a["labels"]["alertname"] == NO_LEADER_ALERT and a["state"] == "firing" for a in alerts)

    await wait_for(f"{NO_LEADER_ALERT} firing", no_leader_firing, timeout_s=NO_LEADER_FOR_S + 30, interval_s=0.5)
    fired_s = time.monotonic() - killed_at
    assert fired_s >= NO_LEADER_FOR_S - 1, f"fired after {fired_s:.1f} s: before its `for:` of {NO_LEADER_FOR_S:g} s"
    print(
        f"session running after {session_s:.1f} s, queries and alerts checked after {checked_s:.1f} s,"
        f" {NO_LEADER_ALERT} firing {fired_s:.1f} s after the kill"
    )
