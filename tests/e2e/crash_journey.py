"""The crash journey's parts: an autoscaler that a test kills with SIGKILL after a chosen call and starts again, and
one owner's journey through the sandbox (sessions, their volumes and machines, kills armed at EC2 or a node update)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import aiodocker
from warmswarm_demos.workload import owner_constraints, wait_for
from warmswarm_models import CLUSTER_TAG, ROLE_CACHE, ROLE_TAG
from warmswarm_sandbox import procs
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import wait_ready

NANO = 1_000_000_000
MIB = 2**20
# Short clocks so a whole journey takes a minute or two: a killed leader's lock goes in 2 s.
CRASH_SETTINGS = {
    "AUTOSCALING_IDLE_GRACE_S": "2",
    "AUTOSCALING_RESYNC_INTERVAL_S": "2",
    "AUTOSCALING_BUSY_RESYNC_INTERVAL_S": "0.5",
    "AUTOSCALING_LEADER_LOCK_TTL_S": "2",
    "AUTOSCALING_LEADER_RENEW_INTERVAL_S": "0.5",
    # How long a boot waits for its volume's device. A crash right after AttachVolume restarts the replica while the
    # machine boots; at 3 s a loaded machine's boot gave up before the device showed, and the machine was (rightly)
    # replaced: a second machine for one session. The hidden-volume test still sees its wait end well within 60 s.
    "AUTOSCALING_DEVICE_WAIT_S": "10",
    "AUTOSCALING_MAX_START_S": "20",
    "AUTOSCALING_CAPACITY_BACKOFF_S": "1",
}


# Arms a kill of the replica with this pid.
Arm: TypeAlias = Callable[[int], None]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        found: dict[str, Any] = json.load(answer)
        return found


@dataclass
class Autoscaler:
    """One autoscaler of a test, started again under the same name after each kill."""

    sandbox: Sandbox
    name: str
    env: dict[str, str]
    url: str
    pid: int = 0
    restarts: list[str] = field(default_factory=list)
    # kill point -> seconds from the kill to the next replica's readiness (printed with -s)
    took_s: dict[str, float] = field(default_factory=dict)

    def start(self, arm_next: Arm | None = None) -> None:
        self.pid = self.sandbox.spawn(self.name, [sys.executable, "-m", "warmswarm_autoscaling"], self.env)
        if arm_next is None:
            wait_ready(self.url, 60)
            return
        # Armed while the new replica still imports: its first cycle may make the next call at once, and
        # the kill may then land before the replica ever answers /ready.
        arm_next(self.pid)
        record = procs.record_of(self.pid)
        deadline = time.monotonic() + 60
        while procs.is_alive(record) and not _ready(self.url):
            assert time.monotonic() < deadline, f"{self.url} neither ready nor killed within 60 s"
            time.sleep(0.2)

    async def killed_then_started(self, kill_point: str, arm_next: Arm | None = None) -> None:
        """Wait for the armed kill to land, then start the autoscaler again (it re-reads the world), with the
        next kill armed for it from the start when `arm_next` is given."""
        killed_at = await self.killed(kill_point)
        self.start(arm_next)
        self.took_s[kill_point] = time.monotonic() - killed_at

    async def killed(self, kill_point: str) -> float:
        """Wait for the armed kill to land; the moment it was seen (time.monotonic())."""
        record = procs.record_of(self.pid)

        async def gone() -> bool:
            return not procs.is_alive(record)

        await wait_for(f"the kill after {kill_point}", gone, timeout_s=90)
        self.restarts.append(kill_point)
        return time.monotonic()


@dataclass
class Journey:
    sandbox: Sandbox
    endpoints: Endpoints
    docker: aiodocker.Docker
    ec2: Any
    cluster: str
    owner: dict[str, str]
    autoscaler: Autoscaler
    proxy_admin: str
    # The service labels of the owner's cache policy (CachePolicy.to_labels()): what the director would write.
    policy_labels: Mapping[str, str]

    def kill_after_ec2(self, action: str, **params: str) -> None:
        self.ec2_kill(action, **params)(self.autoscaler.pid)

    def ec2_kill(self, action: str, **params: str) -> Arm:
        """A kill of a replica (by pid) right after the next answered EC2 `action` whose parameters match."""

        def arm(pid: int) -> None:
            body = {"action": action, "pid": pid, "params": params}
            post_json(f"{self.endpoints.ec2_endpoint_url}/strict/kill", body)

        return arm

    def kill_after_node_update(self, availability: str) -> None:
        self.node_update_kill(availability)(self.autoscaler.pid)

    def node_update_kill(self, availability: str) -> Arm:
        """A kill of a replica (by pid) right after the next node update that sets `availability`."""

        def arm(pid: int) -> None:
            body = {"method": "POST", "path": "/nodes/*/update", "body": {"Availability": availability}, "pid": pid}
            post_json(f"{self.proxy_admin}/kill", body)

        return arm

    async def session(self, name: str, script: str, owner: Mapping[str, str] | None = None) -> str:
        """A service of `owner` (the journey's by default) running `script` with the cache at /cache."""
        owner = dict(owner or self.owner)
        template = {
            "ContainerSpec": {
                "Image": self.endpoints.sandbox_image,
                "Command": ["sh", "-c", script],
                "StopGracePeriod": NANO,
                "Mounts": [{"Type": "bind", "Source": self.endpoints.node_cache_path, "Target": "/cache"}],
            },
            "Resources": {"Reservations": {"NanoCPUs": NANO // 2, "MemoryBytes": 256 * MIB}},
            "Placement": {"Constraints": owner_constraints(owner)},
            "RestartPolicy": {"Condition": "on-failure", "Delay": NANO},
        }
        labels = {**owner, **self.policy_labels}
        created = await self.docker.services.create(template, name=name, labels=labels)
        return str(created["ID"])

    def volumes(self) -> list[dict[str, Any]]:
        # The cache volumes: each machine's root volume carries the cluster tag too (role "root").
        filters = [
            {"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]},
            {"Name": f"tag:{ROLE_TAG}", "Values": [ROLE_CACHE]},
        ]
        found: list[dict[str, Any]] = self.ec2.describe_volumes(Filters=filters)["Volumes"]
        return found

    def instances(self) -> list[dict[str, Any]]:
        reservations = self.ec2.describe_instances(Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [self.cluster]}])
        return [i for r in reservations["Reservations"] for i in r["Instances"]]

    def live_instances(self) -> list[dict[str, Any]]:
        return [i for i in self.instances() if i["State"]["Name"] in ("pending", "running")]

    def cache_file(self, volume_id: str) -> str | None:
        """The session's file `f` on the volume, as the host reads its blocks now; None while there is none."""
        found = (self.sandbox.volume_files(volume_id) or {}).get("f")
        return None if found is None else found.decode()

    async def running(self, service_id: str) -> dict[str, Any]:
        async def probe() -> dict[str, Any] | None:
            tasks = await self.docker.tasks.list(filters={"service": service_id, "desired-state": "running"})
            return next((dict(t) for t in tasks if t["Status"]["State"] == "running"), None)

        task, _ = await wait_for("the session running", probe, timeout_s=90)
        return task

    def accounted_for(self) -> None:
        """Every instance and volume of the cluster is the owner's and one at a time: nothing twice."""
        volumes = self.volumes()
        assert len({v["VolumeId"] for v in volumes}) <= 1, f"a second volume for the owner: {volumes}"
        for found in [*volumes, *self.instances()]:
            tags = {t["Key"]: t["Value"] for t in found.get("Tags", [])}
            assert {k: tags.get(k) for k in self.owner} == self.owner, f"{found} is not the owner's"
        assert len(self.live_instances()) <= 1, f"a second machine for the owner: {self.live_instances()}"
