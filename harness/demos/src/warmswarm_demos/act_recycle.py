"""Act 5 of `make demo`: an idle owner's machine is scrubbed and serves the next owner of her group, while a user one
of whose groups refuses recycled machines gets a fresh one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiodocker
from warmswarm_models import (
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
    INSTANCE_BUFFER_TAG,
    INSTANCE_RECYCLE_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
)
from warmswarm_sandbox import aws
from warmswarm_sandbox.cloud import Sandbox

from warmswarm_demos.act_buffer import free_hot_machine, hot_buffer_settings
from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_demos.sessions import container_output
from warmswarm_demos.stage import Platform, autoscaler_status, decisions, instance, tags_of
from warmswarm_demos.workload import wait_for

ACT = "act 5 (recycled machines)"
RECYCLING_GROUP = "lab"
REFUSING_GROUP = "vault"
GROUPS: dict[str, dict[str, Any]] = {
    # One lab: its users' idle machines are scrubbed and serve one another.
    RECYCLING_GROUP: {
        "ebs_cache_enabled": True,
        "cache_ttl_s": 600,
        "cache_size_gib": 1,
        "recycle_machines": True,
        "accept_recycled": True,
    },
    # Sensitive data: says no to both, and a group's `false` wins over another group's `true` (issue 42).
    REFUSING_GROUP: {
        "ebs_cache_enabled": True,
        "cache_ttl_s": 600,
        "cache_size_gib": 1,
        "recycle_machines": False,
        "accept_recycled": False,
    },
}
# Cyd works in both: vault's refusal must hold although lab says yes.
CYD_GROUPS = (REFUSING_GROUP, RECYCLING_GROUP)
GENERATION = 1  # the machine's first recycle
# Stop, detach, strip, scrub boot and proof: a few cycles and one boot; the recycle e2e allows 240 s under load.
RECYCLE_TIMEOUT_S = 240.0
# A stopping leader releases the lease: the follower takes it at its next try, well within the lock's TTL (15 s).
HANDOVER_TIMEOUT_S = 30.0
# The watch reads EC2 through the strict layer, which throttles like AWS: a few reads a second, not ten.
WATCH_POLL_S = 0.25
STEPS = (
    ("ada (lab): request → running (hot_claim)", "ada-requested", "ada-running"),
    ("session ended → marked for recycling (idle)", "recycle-ended", "recycle-marked"),
    ("marked → stopped", "recycle-marked", "recycle-stopped"),
    ("stopped → her volume detached", "recycle-stopped", "recycle-detached"),
    ("detached → stripped of her labels and tags", "recycle-detached", "recycle-stripped"),
    ("stripped → started for its scrub", "recycle-stripped", "recycle-booted"),
    ("scrub boot → proof on its node", "recycle-booted", "recycle-proven"),
    ("proof → in the hot buffer (scrubbed)", "recycle-proven", "recycle-offered"),
    ("session ended → in the hot buffer", "recycle-ended", "recycle-offered"),
    ("second replica (cap 2): started → ready, beside the first", "rollout-on", "rollout-ready"),
    ("first replica stopped → the second leads (a cycle done)", "handover", "handed-over"),
    (f"cyd ({' + '.join(CYD_GROUPS)}): request → running (cold_launch)", "cyd-requested", "cyd-running"),
    ("ben (lab): request → running (hot_claim)", "ben-requested", "ben-running"),
)


@dataclass(frozen=True)
class Replica:
    """An autoscaler replica the act started (with its settings) and a director that asks it: the platform's client
    of that director, the autoscaler's URL, and the kind in both processes' names."""

    platform: Platform
    autoscaler_url: str
    kind: str


class Replicas(Protocol):
    """Starts a replica with settings over the demo's (a start may run beside a replica that runs), and stops one."""

    async def start(self, settings: Mapping[str, str]) -> Replica: ...

    async def stop(self, replica: Replica) -> None: ...


@dataclass(frozen=True)
class Owners:
    ada: Mapping[str, str]  # lab: her machine is recycled
    ben: Mapping[str, str]  # lab: he gets it
    cyd: Mapping[str, str]  # vault and lab: she gets a fresh one

    @classmethod
    def of(cls, suffix: str) -> Owners:
        """The act's owners, their ids ending in `suffix` (unique in a shared sandbox)."""
        return cls(
            {"user_id": f"ada{suffix}", "project_id": "assay", "node_id": f"notebook-5a{suffix}"},
            {"user_id": f"ben{suffix}", "project_id": "assay", "node_id": f"notebook-5b{suffix}"},
            {"user_id": f"cyd{suffix}", "project_id": "ledger", "node_id": f"notebook-5c{suffix}"},
        )


def recycle_settings(sandbox: Sandbox, cluster: str, *, max_instances: int) -> dict[str, str]:
    """Act 4's hot buffer of one t3.medium in one zone, for the act's own cluster, under a cap of `max_instances`."""
    return {
        **hot_buffer_settings(sandbox),
        "WARMSWARM_CLUSTER": cluster,
        "AUTOSCALING_MAX_INSTANCES": str(max_instances),
    }


@dataclass(frozen=True)
class Seen:
    """The recycled machine at one look: its state and tags (EC2), the volumes attached to it, its node's proof."""

    state: str
    tags: Mapping[str, str]
    attached: frozenset[str]
    proof: str | None

    @property
    def stripped(self) -> bool:
        return "user_id" not in self.tags and self.tags.get(INSTANCE_BUFFER_TAG) == "true"


@dataclass(frozen=True)
class Step:
    mark: str
    reached: Callable[[Seen], bool]
    said: str


def scrub_token(tags: Mapping[str, str], generation: int) -> str | None:
    """The scrub token `<n>.<t>` the machine's scrub tag names for this generation (pending or done), or None."""
    value = tags.get(INSTANCE_SCRUB_TAG, "")
    for prefix in (SCRUB_PENDING_PREFIX, SCRUB_DONE_PREFIX):
        if value.startswith(f"{prefix}{generation}."):
            return value.removeprefix(prefix)
    return None


def recycle_steps(volume_id: str, generation: int) -> tuple[Step, ...]:
    """The recycle's steps (docs/operations.md, "Recycled machines") in their order, each as the machine shows it. A
    mark's scrub tag names its token `<n>.<t>` (the generation and the mark's moment): its node's proof must be that
    very token."""
    pending, done = f"{SCRUB_PENDING_PREFIX}{generation}.", f"{SCRUB_DONE_PREFIX}{generation}."
    return (
        Step(
            "recycle-marked",
            lambda s: s.tags.get(INSTANCE_SCRUB_TAG, "").startswith(pending),
            f"marked for its recycle ({INSTANCE_SCRUB_TAG}={pending}<t>): it owes a scrub from now on",
        ),
        Step("recycle-stopped", lambda s: s.state == "stopped", "stopped: the OS unmounts her cache volume"),
        Step(
            "recycle-detached",
            lambda s: volume_id not in s.attached,
            f"her volume {volume_id} detached while stopped: kept for her, for its TTL",
        ),
        Step(
            "recycle-stripped",
            lambda s: s.stripped,
            "stripped: her labels and tags off, the hot buffer's tag on",
        ),
        Step(
            "recycle-booted",
            lambda s: s.stripped and s.state in ("pending", "running"),
            "started for its scrub: before Docker starts, the boot removes every container, Docker volume, writable"
            " layer and log, and the cache path",
        ),
        Step(
            "recycle-proven",
            lambda s: s.proof is not None and s.proof == scrub_token(s.tags, generation),
            f"its node proves the scrub (engine label {ENGINE_LABEL_SCRUBBED}={generation}.<t>, the mark's token)",
        ),
        Step(
            "recycle-offered",
            lambda s: s.stripped and s.state == "running" and s.tags.get(INSTANCE_SCRUB_TAG, "").startswith(done),
            f"marked scrubbed ({INSTANCE_SCRUB_TAG}={done}<t>): in the hot buffer, running, nobody's",
        ),
    )


def newly_reached(steps: tuple[Step, ...], marked: set[str], seen: Seen) -> list[Step]:
    """The steps this look shows reached and not marked yet: the last one it shows and every one before it (a step
    can come and go between two looks: the stop lasts a cycle or two)."""
    last = max((n for n, step in enumerate(steps) if step.reached(seen)), default=-1)
    return [step for step in steps[: last + 1] if step.mark not in marked]


async def _look(sandbox: Sandbox, ec2: Any, instance_id: str) -> Seen:
    found = await instance(ec2, instance_id)
    if found is None:
        raise DemoFailure(f"{ACT}: {instance_id} is gone from EC2 while it should be recycled")
    attached = frozenset(m["Ebs"]["VolumeId"] for m in found.get("BlockDeviceMappings", []) if "Ebs" in m)
    proof = None
    async with aiodocker.Docker(url=sandbox.endpoints.docker_host) as manager:
        for node in await manager.nodes.list():
            labels = node["Description"].get("Engine", {}).get("Labels", {})
            if labels.get(ENGINE_LABEL_INSTANCE_ID) == instance_id and ENGINE_LABEL_SCRUBBED in labels:
                proof = labels[ENGINE_LABEL_SCRUBBED]
    return Seen(found["State"]["Name"], tags_of(found), attached, proof)


async def watch_recycle(
    sandbox: Sandbox, ec2: Any, say: Narrator, instance_id: str, volume_id: str, generation: int = GENERATION
) -> Seen:
    """Narrate each step of the machine's recycle as EC2 and the swarm show it, with the seconds since the step before;
    the last look, once the machine is in the buffer again."""
    steps = recycle_steps(volume_id, generation)
    marked: set[str] = set()
    previous = "recycle-ended"
    deadline_s = time.monotonic() + RECYCLE_TIMEOUT_S
    seen = await _look(sandbox, ec2, instance_id)
    while True:
        for step in newly_reached(steps, marked, seen):
            say.mark(step.mark)
            marked.add(step.mark)
            after = say.between(previous, step.mark)
            # Two steps one action makes (the mark and the stop) or one cycle makes show up in the same look.
            when = f"+{after:.1f} s" if after >= WATCH_POLL_S else f"within {WATCH_POLL_S:g} s of the step before"
            say.say(f"  {instance_id} {step.said}   ({when})")
            previous = step.mark
        if steps[-1].mark in marked:
            return seen
        if time.monotonic() > deadline_s:
            raise TimeoutError(
                f"{ACT}: {instance_id} not back in the buffer {RECYCLE_TIMEOUT_S:g} s after its owner left; last seen"
                f" {seen.state}, tags {dict(seen.tags)}, volumes {sorted(seen.attached)}, proof {seen.proof}"
            )
        await asyncio.sleep(WATCH_POLL_S)
        seen = await _look(sandbox, ec2, instance_id)


def files_holding(sandbox: Sandbox, instance_id: str, secret: str) -> list[str]:
    """Every file on the machine's root disk as the sandbox keeps it (its Docker data root and its /etc) whose bytes
    hold `secret`: read by the host, not through a session, so a container's view cannot hide one."""
    machine = sandbox.machine(instance_id)
    if machine is None:
        raise DemoFailure(f"{ACT}: the sandbox plays no machine for {instance_id}")
    folders = [folder for folder in (machine.data_dir, machine.root_dir) if folder]
    found = subprocess.run(["grep", "-rlsF", secret, *folders], capture_output=True, text=True, check=False)
    return found.stdout.split()


async def recycle_decision(autoscaler_url: str, ops_token: str, instance_id: str) -> str | None:
    """Why the autoscaler recycled the machine, as its status tells ops (its decisions, newest first)."""
    found = await asyncio.to_thread(decisions, autoscaler_url, ops_token)
    return next(
        (d["reason"] for d in found if d["action"].startswith("RecycleMachine") and d["target"] == instance_id), None
    )


async def recycle_act(
    sandbox: Sandbox, replicas: Replicas, ops_token: str, say: Narrator, *, cluster: str, suffix: str = ""
) -> None:
    """`replicas` starts and stops the autoscaler (with the settings given, for `cluster`, this act's own) and a
    director that asks it; `suffix` makes the owners' ids unique in a shared sandbox."""
    endpoints = sandbox.endpoints
    ec2 = aws.ec2_client(endpoints.ec2_endpoint_url, endpoints.aws_region)
    cast = Owners.of(suffix)
    secret = f"ada-note-{uuid.uuid4().hex[:8]}"
    started: list[Replica] = []
    rollout: asyncio.Task[Replica] | None = None
    try:
        say.say(
            "ops start the autoscaler with act 4's hot buffer (one t3.medium) under a cap of 1 machine, so that no"
            " refill takes the buffer's place an idle owner's machine can be recycled into"
        )
        first = await replicas.start(recycle_settings(sandbox, cluster, max_instances=1))
        started.append(first)
        await _set_groups(first.platform, ops_token, say)
        machine_id = (await free_hot_machine(sandbox, ec2, cluster))["InstanceId"]
        say.say(f"the hot buffer holds {machine_id}, never used (no {INSTANCE_RECYCLED_TAG} tag)")
        # Started once the first replica leads (it launched the buffer's machine): the second follows until then.
        say.say(
            "ops also start a second replica with a cap of 2 beside it (start-first, as `docker service update`"
            " does): it follows, and takes over once the first stops, which ops do when the recycle is done"
        )
        rollout = asyncio.create_task(_roll_out(replicas, say, recycle_settings(sandbox, cluster, max_instances=2)))
        volume_id = await _ada_leaves(sandbox, first.platform, say, cast.ada, machine_id, secret)
        seen = await watch_recycle(sandbox, ec2, say, machine_id, volume_id)
        why = await recycle_decision(first.autoscaler_url, ops_token, machine_id)
        say.say(f"the autoscaler's decision, as its status tells ops: {why or 'no longer in its recent decisions'}")
        await _scrubbed(sandbox, say, seen, machine_id, volume_id, secret)

        second = await rollout
        started.append(second)
        say.mark("handover")
        await replicas.stop(first)
        started.remove(first)
        await _leads(second, ops_token)
        say.mark("handed-over")
        say.say(
            f"the second replica was ready {say.between('rollout-on', 'rollout-ready'):.1f} s after its start; ops"
            " stop the first, which hands the lease over as it stops, and the second leads with a cap of 2, the"
            f" recycled machine still in the buffer   (first stopped → second leads"
            f" {say.between('handover', 'handed-over'):.1f} s)"
        )
        await _cyd_and_ben(sandbox, ec2, second.platform, say, cast, machine_id, volume_id, secret)
    finally:
        if rollout is not None and not rollout.done():
            rollout.cancel()  # its processes, if it started them, are the demo's to stop (demo.KINDS)
        elif rollout is not None and rollout.exception() is None and rollout.result() not in started:
            started.append(rollout.result())  # ready, but the act failed before it took over
        for replica in started[::-1]:
            await replicas.stop(replica)
    say.table("act 5: recycled machines", say.steps(STEPS))


async def _roll_out(replicas: Replicas, say: Narrator, settings: Mapping[str, str]) -> Replica:
    say.mark("rollout-on")
    replica = await replicas.start(settings)
    say.mark("rollout-ready")
    return replica


async def _leads(replica: Replica, ops_token: str) -> None:
    """Once the replica leads and has made a cycle: before it, the director could only tell that the task waits."""

    async def leading() -> bool:
        status = await asyncio.to_thread(autoscaler_status, replica.autoscaler_url, ops_token)
        return bool(status.get("leader") and status.get("last_cycle"))

    await wait_for("the second replica leads", leading, HANDOVER_TIMEOUT_S, WATCH_POLL_S)


async def _set_groups(platform: Platform, ops_token: str, say: Narrator) -> None:
    ops = {"Authorization": f"Bearer {ops_token}"}
    for group, properties in GROUPS.items():
        (await platform.api.put(f"/v1/groups/{group}/properties", json=properties, headers=ops)).raise_for_status()
        say.say(f"ops set group {group!r}: {json.dumps(properties)}")


async def _ada_leaves(
    sandbox: Sandbox, platform: Platform, say: Narrator, ada: Mapping[str, str], machine_id: str, secret: str
) -> str:
    """Ada's session claims the hot buffer's machine and writes her note where the host can find it, and she leaves:
    her volume's id."""
    say.say(f"ada ({RECYCLING_GROUP}) starts a session; it writes a note to her cache and to her container's disk")
    script = f"echo {secret} > /cache/notes.txt; echo {secret} > /root/notes.txt; echo {secret}; sleep 100000"
    session = await platform.start(ada, "ada", RECYCLING_GROUP, script, act=ACT, expected_path="hot_claim")
    if session["instance_id"] != machine_id:
        raise DemoFailure(f"{ACT}: ada's session runs on {session['instance_id']}, not on {machine_id}")
    volume_id: str = session["volume_id"]
    await container_output(sandbox, machine_id, secret)
    written = await asyncio.to_thread(files_holding, sandbox, machine_id, secret)
    if not written:
        raise DemoFailure(
            f"{ACT}: the host finds ada's note nowhere on {machine_id}: its later absence would prove nothing"
        )
    say.say(
        f"her session runs on {machine_id} with her volume {volume_id}; the host finds her note {secret!r} in"
        f" {len(written)} file(s) of the machine's disk"
        f"   (request → running {say.between('ada-requested', 'ada-running'):.1f} s)"
    )
    say.say("ada ends her session; her group recycles machines, so once idle hers is recycled, step by step:")
    say.mark("recycle-ended")
    await platform.end(ada)
    return volume_id


async def _scrubbed(sandbox: Sandbox, say: Narrator, seen: Seen, machine_id: str, volume_id: str, secret: str) -> None:
    """What the recycled machine shows: its count and audit tags, none of ada's note on its disk, her note on her
    volume."""
    say.say(
        f"{machine_id}: {INSTANCE_RECYCLED_TAG}={seen.tags.get(INSTANCE_RECYCLED_TAG)}, audit"
        f" {INSTANCE_SERVED_OWNERS_TAG}={seen.tags.get(INSTANCE_SERVED_OWNERS_TAG)!r}"
        f"   (session ended → in the buffer {say.between('recycle-ended', 'recycle-offered'):.1f} s)"
    )
    left = await asyncio.to_thread(files_holding, sandbox, machine_id, secret)
    if left:
        raise DemoFailure(f"{ACT}: the scrub left ada's note on {machine_id}'s disk: {left}")
    kept = (await asyncio.to_thread(sandbox.volume_files, volume_id)) or {}
    if secret.encode() not in kept.get("notes.txt", b""):
        raise DemoFailure(f"{ACT}: ada's note is not on her volume {volume_id} after the recycle: {sorted(kept)}")
    say.say(
        f"the host greps {machine_id}'s disk (Docker data root, /etc) for {secret!r}: no file; her note stays on her"
        f" own volume ({', '.join(sorted(kept))}), attached nowhere, for her return"
    )


async def _cyd_and_ben(
    sandbox: Sandbox,
    ec2: Any,
    platform: Platform,
    say: Narrator,
    cast: Owners,
    machine_id: str,
    volume_id: str,
    secret: str,
) -> None:
    """Cyd, whose groups include a refusing one, asks first and gets a fresh machine; then ben gets the recycled one,
    and neither his session nor the host finds ada's note on it."""
    cyd, ben = cast.cyd, cast.ben
    say.say(
        f"cyd, in {' and '.join(repr(g) for g in CYD_GROUPS)}, asks first: {REFUSING_GROUP!r} refuses recycled"
        f" machines, and a group's no wins over another's yes; the buffer's only machine is the recycled {machine_id}"
    )
    try:
        cyds = await platform.start(
            cyd, "cyd", CYD_GROUPS, "echo cyd; sleep 100000", act=ACT, expected_path="cold_launch", who="cyd"
        )
    except DemoFailure as failure:
        told = (await platform.api.get(f"/v1/services/{cyd['node_id']}")).json()
        if told.get("instance_id") == machine_id:
            raise DemoFailure(
                f"{ACT}: cyd (groups {list(CYD_GROUPS)}) was given the recycled machine {machine_id}, although"
                f" {REFUSING_GROUP!r} refuses recycled machines"
            ) from failure
        raise
    fresh_tags = tags_of(await instance(ec2, cyds["instance_id"]) or {})
    if cyds["instance_id"] == machine_id or INSTANCE_RECYCLED_TAG in fresh_tags:
        raise DemoFailure(f"{ACT}: cyd's machine {cyds['instance_id']} was recycled: tags {fresh_tags}")
    if fresh_tags.get(INSTANCE_RECYCLE_TAG) == "true":
        raise DemoFailure(
            f"{ACT}: cyd's machine {cyds['instance_id']} is marked to be recycled once idle ({INSTANCE_RECYCLE_TAG}"
            f"=true), although {REFUSING_GROUP!r} says no"
        )
    say.say(
        f"cyd's session runs on {cyds['instance_id']}, launched for her: never recycled (no {INSTANCE_RECYCLED_TAG}"
        f" tag), and not to be recycled either (no {INSTANCE_RECYCLE_TAG} tag)"
        f"   (request → running {say.between('cyd-requested', 'cyd-running'):.1f} s)"
    )

    say.say(f"ben ({RECYCLING_GROUP}, as ada) asks; his session looks for ada's note")
    look = "cat /cache/notes.txt /root/notes.txt 2>&1; echo looked; sleep 100000"
    bens = await platform.start(ben, "ben", RECYCLING_GROUP, look, act=ACT, expected_path="hot_claim", who="ben")
    if bens["instance_id"] != machine_id:
        raise DemoFailure(f"{ACT}: ben's session runs on {bens['instance_id']}, not on the recycled {machine_id}")
    if bens["volume_id"] in (None, volume_id):
        raise DemoFailure(f"{ACT}: ben's session has volume {bens['volume_id']}, not a new one of his own")
    said = await container_output(sandbox, machine_id, "looked")
    on_disk = await asyncio.to_thread(files_holding, sandbox, machine_id, secret)
    if secret in said or on_disk:
        raise DemoFailure(f"{ACT}: ada's note is on ben's machine: his session printed {said!r}, files {on_disk}")
    say.say(
        f"ben's session runs on the SAME machine {machine_id}, recycled, with his own new volume {bens['volume_id']}"
        f"   (request → running {say.between('ben-requested', 'ben-running'):.1f} s)"
    )
    say.say(
        f"his session printed {' / '.join(line for line in said.splitlines() if line)!r}; the host finds ada's note"
        f" nowhere on {machine_id}'s disk while ben uses it"
    )
    await platform.end(cyd)
    await platform.end(ben)
