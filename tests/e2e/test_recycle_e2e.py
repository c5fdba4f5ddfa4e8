"""End to end: an owner's machine is recycled (stopped, detached, stripped, scrubbed on its next boot) and serves the
next owner; none of the first owner's traces is left on the machine's disk as the host sees it nor in the Docker state
the next owner's session could reach, each search first proven able to find them; a group's refusal wins over another
group's grant; a reboot while the scrub is owed scrubs again, and the machine is offered only on the exact proof."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiodocker
import httpx
import pytest
from warmswarm_demos.sessions import container_output, start_session, tags_of
from warmswarm_demos.workload import wait_for
from warmswarm_director.placement import MANAGED_BY_DIRECTOR, MANAGED_BY_LABEL
from warmswarm_models import (
    CLUSTER_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
)
from warmswarm_sandbox import node
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.engine import Engine
from warmswarm_sandbox.services import autoscaler_env, free_port, new_ops_token, start_director, wait_ready

pytestmark = pytest.mark.e2e

# One machine at a time: the hot buffer's, which every session claims in turn, so that each idle machine has a buffer
# place to be recycled into (nothing else can refill it) and the next session gets that very machine.
MAX_INSTANCES = 1
# The engine label a scrubbing boot names its proof in (the whole scrub token).
PROOF_LABEL = "warmswarm.scrubbed="
# A scrub tag: pending-<n>.<t> / done-<n>.<t> (the contract's token; `.<t>` absent in the legacy form).
SCRUB_TAG = re.compile(r"(pending|done)-(\d+)((?:\.\d+)?)")
BOOT_TIMEOUT_S = 120.0
SWARM_PLACE = "the swarm worker's task records"
CACHE_PLACE = "the cache path, in the machine"


# -- each test's own cluster: an autoscaler, a director, groups, machines ---------------------------------------


@dataclass
class Cluster:
    """One test's own autoscaler (by pid: a test may pause it), director and groups, named for it alone: no test
    sees another's machines, owners or groups."""

    sandbox: Sandbox
    ec2: Any
    name: str
    autoscaler: str  # the spawned process's name, for its log
    autoscaler_pid: int
    api: httpx.AsyncClient
    groups: dict[str, str]  # the test's word for a group -> the group's unique name
    paused: bool = False

    def instances(self) -> list[dict[str, Any]]:
        filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [self.name]}]
        return [i for r in self.ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]

    def instance(self, instance_id: str) -> dict[str, Any]:
        return next(i for i in self.instances() if i["InstanceId"] == instance_id)

    def tags(self, instance_id: str) -> dict[str, str]:
        return tags_of(self.instance(instance_id))

    def pause_after(self, action: str, **params: str) -> None:
        """The strict EC2 layer stops (SIGSTOP) the autoscaler right after it answers the next matching `action`:
        the recycle holds at that step, as long as the test needs."""
        body = {"action": action, "params": params, "pid": self.autoscaler_pid, "signal": "SIGSTOP"}
        post_json(f"{self.sandbox.endpoints.ec2_endpoint_url}/strict/kill", body)

    def refuse(self, action: str) -> None:
        """Every `action` call fails (EC2's throttling: the autoscaler retries at a later cycle) until `allow`."""
        body = {"action": action, "code": "RequestLimitExceeded", "status": 503, "times": 100_000}
        post_json(f"{self.sandbox.endpoints.ec2_endpoint_url}/strict/fail", body)

    def allow(self) -> None:
        delete(f"{self.sandbox.endpoints.ec2_endpoint_url}/strict/fail")

    async def paused_now(self, what: str, timeout_s: float = BOOT_TIMEOUT_S) -> None:
        async def stopped() -> bool:
            return process_state(self.autoscaler_pid) == "T"

        await wait_for(f"the autoscaler paused after {what}", stopped, timeout_s=timeout_s)
        self.paused = True

    def resume(self) -> None:
        os.kill(self.autoscaler_pid, signal.SIGCONT)
        self.paused = False


def post_json(url: str, body: Mapping[str, Any]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
    with opener.open(request, timeout=10) as answer:
        assert answer.status == 200, answer.read()


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T for stopped, ...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def group_properties(groups: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    return {
        # One lab: its machines serve one another once scrubbed.
        groups["lab"]: {
            "ebs_cache_enabled": True,
            "cache_size_gib": 1,
            "recycle_machines": True,
            "accept_recycled": True,
        },
        # Sensitive data: never a machine another used, and its own never go to others; said out loud (a refusal,
        # which wins over another group's grant), not left unset.
        groups["vault"]: {
            "ebs_cache_enabled": True,
            "cache_size_gib": 1,
            "recycle_machines": False,
            "accept_recycled": False,
        },
    }


@pytest.fixture
async def cluster(sandbox: Sandbox, endpoints: Endpoints, ec2: Any) -> AsyncIterator[Cluster]:
    """The test's own cluster; afterwards its services removed, its processes ended and its machines terminated."""
    word = uuid.uuid4().hex[:6]
    name = f"recycle-{word}"
    ops_token = new_ops_token()
    settings = {
        "WARMSWARM_CLUSTER": name,
        "AUTOSCALING_IDLE_GRACE_S": "2",
        "AUTOSCALING_AVAILABILITY_ZONES": f"{sandbox.region}a",
        "AUTOSCALING_MAX_INSTANCES": str(MAX_INSTANCES),
        "AUTOSCALING_HOT_BUFFER": json.dumps({"t3.medium": 1}),
        "AUTOSCALING_BUFFER_IMAGES": endpoints.sandbox_image,
    }
    port = free_port()
    autoscaler = f"autoscaling-{name}"
    pid = sandbox.spawn(
        autoscaler,
        [sys.executable, "-m", "warmswarm_autoscaling"],
        autoscaler_env(endpoints, port, settings, ops_token),
    )
    wait_ready(f"http://127.0.0.1:{port}", 60, alive=lambda: sandbox.spawned_alive(autoscaler))
    director = start_director(
        sandbox, name=f"director-{name}", autoscaling_url=f"http://127.0.0.1:{port}", ops_token=ops_token
    )
    groups = {"lab": f"lab-{word}", "vault": f"vault-{word}"}
    platform = {"Authorization": f"Bearer {director.api_token}"}
    ops = {"Authorization": f"Bearer {ops_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=platform) as api:
        for group, properties in group_properties(groups).items():
            answer = await api.put(f"/v1/groups/{group}/properties", json=properties, headers=ops)
            assert answer.status_code == 200, answer.text
        found = Cluster(sandbox, ec2, name, autoscaler, pid, api, groups)
        try:
            yield found
        finally:
            if found.paused:
                found.resume()
            delete(f"{endpoints.ec2_endpoint_url}/strict/kill")
            found.allow()
            remove_services(endpoints)
            sandbox.kill(f"director-{name}")
            sandbox.kill(autoscaler)
            left = [i["InstanceId"] for i in found.instances() if i["State"]["Name"] != "terminated"]
            if left:
                ec2.terminate_instances(InstanceIds=left)


def delete(url: str) -> None:
    """DELETE at the strict EC2 layer's admin: every armed kill or injected fault gone."""
    request = urllib.request.Request(url, method="DELETE")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10):
        pass


def remove_services(endpoints: Endpoints) -> None:
    manager = Engine(endpoints.docker_host)
    query = {"filters": json.dumps({"label": [f"{MANAGED_BY_LABEL}={MANAGED_BY_DIRECTOR}"]})}
    for service in manager.get("/services", query=query):
        manager.call("DELETE", f"/services/{service['ID']}")


def owner_of(name: str) -> dict[str, str]:
    return {"user_id": f"{name}-{uuid.uuid4().hex[:6]}", "project_id": "p1", "node_id": f"n-{uuid.uuid4().hex[:6]}"}


def scrub_of(tags: Mapping[str, str]) -> tuple[str, int, str] | None:
    """The scrub tag as (pending|done, generation, token); None when absent or not of the form."""
    found = SCRUB_TAG.fullmatch(tags.get(INSTANCE_SCRUB_TAG, ""))
    if found is None:
        return None
    return found.group(1), int(found.group(2)), f"{found.group(2)}{found.group(3)}"


async def scrubbed_and_offered(
    cluster: Cluster, instance_id: str, generation: int, *, token: str | None = None, timeout_s: float = 240
) -> str:
    """Until the machine's scrub of this generation (of exactly `token`, when given) is proven and it is the hot
    buffer's again: nobody's, running. The token proven."""

    async def offered() -> str | None:
        instance = cluster.instance(instance_id)
        tags = tags_of(instance)
        scrub = scrub_of(tags)
        if (
            scrub is not None
            and scrub[:2] == ("done", generation)
            and (token is None or scrub[2] == token)
            and tags.get(INSTANCE_BUFFER_TAG) == "true"
            and "user_id" not in tags
            and instance["State"]["Name"] == "running"
        ):
            return scrub[2]
        return None

    try:
        proven, _ = await wait_for(f"{instance_id} recycled (scrub {generation} proven), offered", offered, timeout_s)
    except TimeoutError as error:
        instance = cluster.instance(instance_id)
        seen = f"state {instance['State']['Name']}, tags {tags_of(instance)}"
        log = cluster.sandbox.log_tail(cluster.autoscaler, lines=400)
        raise TimeoutError(f"{error}; {seen}; the autoscaler's log ends:\n{log}") from error
    return proven


# -- where an owner's traces could be left: the machine's places on the host, its daemon's state -------------------


@dataclass(frozen=True)
class Place:
    """One search over one of the machine's places: the needles it finds there, each with where."""

    name: str
    search: Callable[[Sequence[str]], Awaitable[dict[str, list[str]]]]


def grep_files(folder: Path, needles: Sequence[str]) -> dict[str, list[str]]:
    """Every file under `folder` holding a needle's bytes (GNU grep -r on the host: binary files included)."""
    found: dict[str, list[str]] = {}
    for needle in needles:
        if not folder.exists():
            continue
        done = subprocess.run(["grep", "-rlsF", "--", needle, str(folder)], capture_output=True, text=True)
        assert done.returncode in (0, 1), f"grep over {folder} failed ({done.returncode}): {done.stderr}"
        if done.stdout.split():
            found[needle] = done.stdout.split()
    return found


def machine_record(sandbox: Sandbox, instance_id: str) -> node.NodeRecord:
    record = sandbox.machine(instance_id)
    assert record is not None, f"{instance_id} has no machine"
    return record


def disk_places(sandbox: Sandbox, instance_id: str) -> list[Place]:
    """The machine's root disk as the sandbox keeps it, whole and by part (the Docker data root's containers with
    their logs and config, its volumes, the containers' layers with each one's /tmp, the swarm worker's task records,
    the daemon's containerd), and the cache path as the machine itself sees it (its own mount namespace)."""
    disk = sandbox.state_dir / "nodes" / instance_id
    data = disk / "data"

    def folder(path: Path) -> Callable[[Sequence[str]], Awaitable[dict[str, list[str]]]]:
        async def search(needles: Sequence[str]) -> dict[str, list[str]]:
            return grep_files(path, needles)

        return search

    async def layers(needles: Sequence[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for driver in ("overlay2", "fuse-overlayfs", "vfs"):
            for needle, files in grep_files(data / driver, needles).items():
                found.setdefault(needle, []).extend(files)
        return found

    async def cache_path(needles: Sequence[str]) -> dict[str, list[str]]:
        record = machine_record(sandbox, instance_id)
        seen_from_machine = Path(f"/proc/{node.init_pid(record)}/root") / sandbox.endpoints.node_cache_path.lstrip("/")
        return grep_files(seen_from_machine, needles)

    return [
        Place("the machine's root disk", folder(disk)),
        Place("the data root's containers (config, logs)", folder(data / "containers")),
        Place("the data root's volumes", folder(data / "volumes")),
        Place("the containers' layers", layers),
        Place(SWARM_PLACE, folder(data / "swarm")),
        Place("the daemon's containerd", folder(data / "containerd")),
        Place(CACHE_PLACE, cache_path),
    ]


async def daemon_state(docker_host: str) -> dict[str, str]:
    """What a session with the machine's daemon could read: docker info, ps -a and inspect, each container's logs,
    volume ls and inspect, image ls and inspect with history."""
    shown: dict[str, str] = {}
    async with aiodocker.Docker(url=docker_host) as docker:
        shown["docker info"] = json.dumps(await docker.system.info())
        for container in await docker.containers.list(all=True):
            about = await container.show()
            logs = "".join(await container.log(stdout=True, stderr=True))
            shown[f"container {about['Name']}"] = json.dumps(about) + logs
        volumes = await docker.volumes.list()  # type: ignore[no-untyped-call]
        for volume in volumes.get("Volumes") or []:
            volume_id = volume["Name"]
            about = await (await docker.volumes.get(volume_id)).show()  # type: ignore[no-untyped-call]
            shown[f"volume {volume_id}"] = json.dumps(about)
        for image in await docker.images.list(all=True):
            about = await docker.images.inspect(image["Id"])
            history = await docker.images.history(image["Id"])
            shown[f"image {image['Id']}"] = json.dumps(about) + json.dumps(history)
    return shown


def docker_place(sandbox: Sandbox, instance_id: str) -> Place:
    async def search(needles: Sequence[str]) -> dict[str, list[str]]:
        shown = await daemon_state(machine_record(sandbox, instance_id).docker_host)
        found = {needle: [what for what, text in shown.items() if needle in text] for needle in needles}
        return {needle: where for needle, where in found.items() if where}

    return Place("the machine's Docker daemon (info, ps -a, logs, volumes, images, inspect)", search)


def places_of(sandbox: Sandbox, instance_id: str) -> list[Place]:
    return [*disk_places(sandbox, instance_id), docker_place(sandbox, instance_id)]


async def found_in(places: Sequence[Place], needles: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    return {place.name: await place.search(needles) for place in places}


async def each_search_finds(places: Sequence[Place], needles: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """Proof that every search can search: each finds at least one of the needles (they are all there now)."""
    found = await found_in(places, needles)
    blind = [name for name, hits in found.items() if not hits]
    assert not blind, f"these searches find nothing while the owner's traces are there (they cannot search): {blind}"
    return found


async def nowhere(places: Sequence[Place], needles: Sequence[str], when: str) -> None:
    found = {name: hits for name, hits in (await found_in(places, needles)).items() if hits}
    assert not found, f"{when}: the last owner's traces are left: {found}"


async def side_container(sandbox: Sandbox, instance_id: str, image: str, secret: str) -> None:
    """What an owner's session may leave beside its own container on its machine's daemon: a container (its config,
    environment, labels, layer and logs) and a named Docker volume, each holding `secret`."""
    async with aiodocker.Docker(url=machine_record(sandbox, instance_id).docker_host) as node_docker:
        name = f"side-{uuid.uuid4().hex[:6]}"
        await node_docker.volumes.create({"Name": name, "Labels": {"kept-for": secret}})  # type: ignore[no-untyped-call]
        container = await node_docker.containers.run(
            {
                "Image": image,
                "Cmd": ["sh", "-c", "echo $SIDE > /data/kept; echo $SIDE > /side-layer; echo $SIDE"],
                "Env": [f"SIDE={secret}"],
                "Labels": {"side-of": secret},
                "HostConfig": {"Binds": [f"{name}:/data"]},
            },
            name=name,
        )
        await container.wait()


def session_script(secret: str, marker: str) -> str:
    """An owner's session that writes `secret` to its cache volume, its own container's disk, its /tmp and its
    output. The secret is never written whole in the command (which the swarm's manager keeps in its raft log, not
    the machine's), `marker` is: it shows where the machine kept the task's spec."""
    head, tail = secret[: len(secret) // 2], secret[len(secret) // 2 :]
    return (
        f's=$(printf %s%s {head} {tail}); echo "$s" > /cache/notes; echo "$s" > /root/own-disk; '
        f'echo "$s" > /tmp/notes; echo "$s"; echo {marker}; sleep 100000'
    )


# -- the tests -------------------------------------------------------------------------------------------------


async def test_a_machine_serves_the_next_owner_scrubbed_and_the_first_owner_returns_hot(
    cluster: Cluster, endpoints: Endpoints, sandbox: Sandbox, ec2: Any
) -> None:
    ada, ben = owner_of("ada"), owner_of("ben")
    secret, marker = f"ada-secret-{uuid.uuid4().hex[:8]}", f"ada-task-{uuid.uuid4().hex[:8]}"
    lab = cluster.groups["lab"]
    session = await start_session(
        cluster.api, endpoints.sandbox_image, ada, lab, session_script(secret, marker), timeout_s=180
    )
    machine = session["instance_id"]
    volume_id = session["volume_id"]
    assert await container_output(sandbox, machine, marker)
    await side_container(sandbox, machine, endpoints.sandbox_image, secret)
    # Ada's traces: her secret, her task's spec, her volume (the daemon's labels name it), her user id.
    needles = [secret, marker, volume_id, ada["user_id"]]
    places = places_of(sandbox, machine)
    before = await each_search_finds(places, needles)
    # The secret is found where ada wrote it: her layer's /tmp and /root, the side volume, the cache path.
    layers = before["the containers' layers"].get(secret, [])
    assert any(f.endswith("/tmp/notes") for f in layers), layers
    assert any(f.endswith("/root/own-disk") for f in layers), layers
    assert secret in before["the data root's volumes"]
    assert secret in before[CACHE_PLACE]

    assert (await cluster.api.delete(f"/v1/services/{ada['node_id']}")).status_code == 204
    await scrubbed_and_offered(cluster, machine, generation=1)
    tags = cluster.tags(machine)
    assert tags[INSTANCE_RECYCLED_TAG] == "1"
    assert tags[INSTANCE_SERVED_OWNERS_TAG] == f"{ada['user_id']}/{ada['project_id']}", "the audit names ada"
    # Stopped, detached while stopped, then scrubbed on its boot: none of ada's traces on its disk nor in its daemon,
    # and her volume is attached nowhere (kept for its TTL).
    await nowhere(places, needles, "recycled, before anyone claimed it")
    assert ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["State"] == "available"

    # Ben, in the same lab, gets that very machine (the only one), with a new volume of his own; what his session
    # could reach of the machine holds nothing of ada's.
    bens = await start_session(cluster.api, endpoints.sandbox_image, ben, lab, "echo ben; sleep 100000", timeout_s=180)
    assert bens["instance_id"] == machine
    assert bens["volume_id"] not in (None, volume_id)
    assert await container_output(sandbox, machine, "ben")
    await nowhere(places, needles, "while ben's session runs on it")
    attached = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["Attachments"]
    assert all(a["InstanceId"] != machine for a in attached), "ada's volume is attached to ben's machine"

    # Ben leaves; the machine is recycled again. Ada returns within her TTL, starts hot on it, and reads her file.
    assert (await cluster.api.delete(f"/v1/services/{ben['node_id']}")).status_code == 204
    await scrubbed_and_offered(cluster, machine, generation=2)
    back = await start_session(cluster.api, endpoints.sandbox_image, ada, lab, "cat /cache/notes; sleep 100000")
    assert back["volume_id"] == volume_id
    assert any("starting hot" in reason for reason in back["reasons"]), back["reasons"]
    assert secret in await container_output(sandbox, back["instance_id"], secret)
    assert (await cluster.api.delete(f"/v1/services/{ada['node_id']}")).status_code == 204


async def a_recycled_machine_offered(cluster: Cluster, endpoints: Endpoints) -> str:
    """A lab owner's machine, recycled and offered in the hot buffer: the machine a refusing group must not get."""
    lab_owner = owner_of("lou")
    lab = cluster.groups["lab"]
    session = await start_session(cluster.api, endpoints.sandbox_image, lab_owner, lab, "sleep 100000", timeout_s=180)
    assert (await cluster.api.delete(f"/v1/services/{lab_owner['node_id']}")).status_code == 204
    await scrubbed_and_offered(cluster, session["instance_id"], generation=1)
    return str(session["instance_id"])


async def test_a_user_in_a_refusing_group_and_a_granting_one_gets_no_recycled_machine_and_theirs_is_terminated(
    cluster: Cluster, endpoints: Endpoints
) -> None:
    """A user in `vault` (recycle_machines and accept_recycled false) and in `lab` (both true): vault's refusal wins
    over lab's grant (and so holds for a user in vault alone), the user gets a fresh machine while a recycled one
    waits in the buffer, and their idle machine is terminated, not recycled."""
    words = ("vault", "lab")
    recycled = await a_recycled_machine_offered(cluster, endpoints)
    cyd = owner_of("cyd")
    groups = [cluster.groups[word] for word in words]
    session = await start_session(cluster.api, endpoints.sandbox_image, cyd, groups, "sleep 100000", timeout_s=240)
    machine = session["instance_id"]
    assert machine != recycled, f"a user in {groups} was given the recycled machine {recycled}"
    assert INSTANCE_RECYCLED_TAG not in cluster.tags(machine), f"a user in {groups} was given a recycled machine"

    assert (await cluster.api.delete(f"/v1/services/{cyd['node_id']}")).status_code == 204

    async def terminated() -> bool:
        return cluster.instance(machine)["State"]["Name"] in ("shutting-down", "terminated")

    await wait_for(f"{machine} terminated", terminated, timeout_s=120)
    assert INSTANCE_SCRUB_TAG not in cluster.tags(machine), f"the machine of a user in {groups} was recycled"


@dataclass
class Boots:
    """The machine's boots as the host sees them: each power-on is a new `unshare` process."""

    sandbox: Sandbox
    instance_id: str
    seen: list[int] = field(default_factory=list)

    def current(self) -> node.NodeRecord:
        return machine_record(self.sandbox, self.instance_id)

    async def next_boot(self, what: str) -> node.NodeRecord | None:
        """Until the machine boots again (a power-on other than every one seen) and its daemon answers (its record),
        or a unit Docker requires stopped that boot (None: the daemon never starts)."""

        async def booted() -> tuple[node.NodeRecord, bool] | None:
            record = self.sandbox.machine(self.instance_id)
            if record is None or record.pid in self.seen or not record.is_powered_on():
                return None
            if record.boot_stopped:
                return record, False
            try:
                async with aiodocker.Docker(url=record.docker_host) as docker:
                    await docker.system.info()
            except Exception:  # not up yet
                return None
            return record, True

        try:
            (record, up), _ = await wait_for(f"{self.instance_id} booted again ({what})", booted, BOOT_TIMEOUT_S)
        except TimeoutError as error:
            raise TimeoutError(f"{error}; its boot log ends:\n{self.boot_log()}") from error
        self.seen.append(record.pid)
        return record if up else None

    async def next_boot_up(self, what: str) -> node.NodeRecord:
        record = await self.next_boot(what)
        assert record is not None, f"its boot {what} stopped; its boot log ends:\n{self.boot_log()}"
        return record

    def boot_log(self) -> str:
        path = self.sandbox.state_dir / "logs" / f"{self.instance_id}.dockerd.boot.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else "(no boot log)"


async def proofs_shown(record: node.NodeRecord) -> list[str]:
    async with aiodocker.Docker(url=record.docker_host) as docker:
        labels = (await docker.system.info()).get("Labels") or []
    return [label[len(PROOF_LABEL) :] for label in labels if label.startswith(PROOF_LABEL)]


async def test_a_reboot_while_the_scrub_is_owed_scrubs_again_and_the_machine_waits_for_the_exact_proof(
    cluster: Cluster, endpoints: Endpoints, sandbox: Sandbox
) -> None:
    """The recycle held (the autoscaler paused by the strict EC2 layer) right after the machine is marked, and again
    right after its start for the scrub: a reboot at each point scrubs again at that boot, whatever proof its disk
    holds from an earlier boot, and the machine is offered only once its node shows exactly the pending token."""
    eve = owner_of("eve")
    lab = cluster.groups["lab"]
    secret, marker = f"eve-secret-{uuid.uuid4().hex[:8]}", f"eve-task-{uuid.uuid4().hex[:8]}"
    session = await start_session(
        cluster.api, endpoints.sandbox_image, eve, lab, session_script(secret, marker), timeout_s=180
    )
    machine = session["instance_id"]
    assert await container_output(sandbox, machine, marker)
    await side_container(sandbox, machine, endpoints.sandbox_image, secret)
    places = places_of(sandbox, machine)
    await each_search_finds(places, [secret, marker])
    # Where a container left on the machine's daemon lands (not in the swarm's task records, not at the cache path).
    side_places = [p for p in places if p.name not in (SWARM_PLACE, CACHE_PLACE)]
    boots = Boots(sandbox, machine, seen=[boots_pid(sandbox, machine)])

    async def left_then_rebooted(canary: str, when: str) -> None:
        """A trace left on the machine now, found by every search of its disk and daemon; the plug pulled; at the
        boot that follows, the scrub owed removes it."""
        await side_container(sandbox, machine, endpoints.sandbox_image, canary)
        await each_search_finds(side_places, [canary])
        sandbox.pull_plug(machine)
        record = await boots.next_boot_up(when)
        await nowhere(places, [canary], f"after the reboot {when}")
        assert await proofs_shown(record) == [token], f"after the reboot {when}, the node's proof"

    # 1. Marked (its scrub tag pending), still running and still eve's: held there (its stop refused meanwhile, so
    # that the pause cannot come after it).
    cluster.refuse("StopInstances")
    cluster.pause_after("CreateTags", **{"Tag.*.Value": "pending-*"})
    assert (await cluster.api.delete(f"/v1/services/{eve['node_id']}")).status_code == 204
    await cluster.paused_now("the mark")
    instance = cluster.instance(machine)
    scrub = scrub_of(tags_of(instance))
    assert scrub is not None, tags_of(instance)
    assert scrub[:2] == ("pending", 1), tags_of(instance)
    token = scrub[2]
    assert instance["State"]["Name"] == "running", "stopped though its stop is refused"
    # A reboot before the strip. Either the scrub owed runs at that boot (eve's traces and the canary go, the node
    # shows the token), or it refuses (eve's volume, still attached, is mounted at the cache path first): then Docker
    # never starts there, and what is left waits for the boot after the strip.
    canary = f"canary-marked-{uuid.uuid4().hex[:8]}"
    await side_container(sandbox, machine, endpoints.sandbox_image, canary)
    await each_search_finds(side_places, [canary])
    sandbox.pull_plug(machine)
    record = await boots.next_boot("while marked, before the strip")
    if record is None:
        assert "scrub refused" in boots.boot_log(), boots.boot_log()
        print(f"the reboot while marked: the scrub refused ({boots.boot_log().strip().splitlines()[-2]})")
        left = canary
    else:
        print("the reboot while marked: scrubbed at that boot")
        await nowhere(places, [canary, secret, marker], "after the reboot while marked")
        assert await proofs_shown(record) == [token], "after the reboot while marked, the node's proof"
        # 2. Something left after that boot, its proof of this very token on disk now.
        left = f"canary-proven-{uuid.uuid4().hex[:8]}"
        await side_container(sandbox, machine, endpoints.sandbox_image, left)
        await each_search_finds(side_places, [left])

    # The recycle carries on: stopped, detached, stripped, started for its scrub; held right after the start.
    cluster.pause_after("StartInstances")
    cluster.allow()
    cluster.resume()
    await cluster.paused_now("the start for the scrub")
    record = await boots.next_boot_up("started for its scrub")
    tags = cluster.tags(machine)
    assert tags.get(INSTANCE_BUFFER_TAG) == "true", f"stripped: {tags}"
    assert "user_id" not in tags, f"stripped: {tags}"
    assert scrub_of(tags) == ("pending", 1, token), f"still owed: {tags}"
    # The boot after the strip scrubbed again, though a proof of this token lay on its disk.
    await nowhere(places, [left, secret, marker], "after the boot for the scrub (a proof of the token on disk?)")
    assert await proofs_shown(record) == [token]

    # 3. A reboot after the strip, the proof shown but not yet marked: scrubbed again at that boot.
    await left_then_rebooted(f"canary-stripped-{uuid.uuid4().hex[:8]}", "after the strip, before the mark")

    # 4. The autoscaler carries on: offered only as done-<token>, and at each look where it was offered, its node
    # showed exactly that token.
    watched: list[tuple[float, dict[str, str], list[str]]] = []

    async def watch() -> None:
        while True:
            tags = cluster.tags(machine)
            try:
                shown = await proofs_shown(boots.current())
            except Exception:  # the daemon not answering: nothing shown
                shown = []
            watched.append((time.monotonic(), tags, shown))
            await asyncio.sleep(0.2)

    watcher = asyncio.create_task(watch())
    try:
        cluster.resume()
        assert await scrubbed_and_offered(cluster, machine, generation=1, token=token) == token
    finally:
        watcher.cancel()
    offered = [(tags, shown) for _, tags, shown in watched if (scrub_of(tags) or ("",))[0] == "done"]
    assert all(shown == [token] for _, shown in offered), f"offered while its node showed {offered}"
    await nowhere(places, [secret, marker], "offered after the reboots")


def boots_pid(sandbox: Sandbox, instance_id: str) -> int:
    return machine_record(sandbox, instance_id).pid
