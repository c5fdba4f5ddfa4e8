"""The boot watcher, EC2's hypervisor and AMI: a machine per running instance, booted, stopped, started, powered off.

A machine keeps its disk while its instance is stopped (the same swarm node id and images come back on
start) and loses it when the instance terminates. A machine that dies while its instance runs (a crash,
a test pulling the plug) boots again at once, as EC2's recovery would: per-boot scripts only, no user data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, host, machine, node
from warmswarm_sandbox.boot_watcher_boot import USER_DATA_TIMEOUT_S, FirstBoot
from warmswarm_sandbox.boot_watcher_volumes import VolumeSync
from warmswarm_sandbox.layout import Layout, SandboxRecord, write_atomically
from warmswarm_sandbox.node import NodeRecord

POLL_S = 0.2
# Boots run in parallel, as on EC2; a cap keeps a burst of launches from starving a 2-core machine.
MAX_PARALLEL_BOOTS = 8
GONE_STATES = frozenset({"shutting-down", "terminated"})
STOPPED_STATES = frozenset({"stopping", "stopped"})
# In a machine's node dir while its instance is stopped: when it runs again it is started (after restart_s),
# not recovered from a crash (at once).
STOPPED_MARKER = "stopped"

log = logging.getLogger("warmswarm_sandbox.boot_watcher")


def node_dir(layout: Layout, instance_id: str) -> Path:
    return layout.nodes_dir / instance_id


def node_records(layout: Layout) -> dict[str, NodeRecord]:
    """The machines that are (or were, if they died on their own) powered on, by instance id."""
    found: dict[str, NodeRecord] = {}
    if not layout.nodes_dir.is_dir():
        return found
    for path in layout.nodes_dir.glob("*/node.json"):
        try:
            record = NodeRecord.load(path)
        except (OSError, ValueError, TypeError):
            continue  # being written or removed right now: the next look sees it whole
        if record.instance_id is not None:
            found[record.instance_id] = record
    return found


class BootWatcher:
    def __init__(self, layout: Layout, record: SandboxRecord) -> None:
        if record.endpoints is None:
            raise RuntimeError("the sandbox record has no endpoints yet: start the watcher after moto is up")
        self._layout = layout
        self._boot_s = record.boot_s
        self._restart_s = record.restart_s
        self._ec2 = aws.ec2_client(record.endpoints["MOTO_ENDPOINT_URL"], record.region)
        self._first_boot = FirstBoot(
            layout, self._ec2, record.endpoints["EC2_ENDPOINT_URL"], layout.image_tar.read_bytes()
        )
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL_BOOTS, thread_name_prefix="boot")
        # One boot or power-off at a time per instance; the loop skips instances with work in flight.
        self._in_flight: dict[str, Future[None]] = {}
        # Those of them being powered off (added by the loop, removed by the pool thread when done).
        self._powering_off: set[str] = set()
        # LaunchTime has whole-second precision: count the boot time from when we first saw the
        # instance running too, so boot_s is never cut short by up to a second.
        self._first_seen_running_at: dict[str, float] = {}
        strict_ec2 = aws.ec2_client(record.endpoints["EC2_ENDPOINT_URL"], record.region)
        self._volumes = VolumeSync(layout, record.attach_s, self._ec2, strict_ec2)

    def run(self) -> None:
        log.info("watching %s every %s s; instances boot in %s s", self._layout.state_dir, POLL_S, self._boot_s)
        # The sandbox's record goes away with `down`: a watcher left over for any reason stops too.
        while self._layout.record_path.exists():
            self.step()
            time.sleep(POLL_S)
        log.info("sandbox record gone; exiting")

    def step(self) -> None:
        try:
            instances = aws.all_instances(self._ec2)
        except Exception as error:  # moto busy or restarting: look again next time
            log.warning("DescribeInstances failed: %s", error)
            return
        now = time.time()
        self._in_flight = {iid: f for iid, f in self._in_flight.items() if not f.done()}
        records = node_records(self._layout)

        for instance_id, record in records.items():
            instance = instances.get(instance_id)
            state = "gone" if instance is None else instance["State"]["Name"]
            if instance_id in self._in_flight:
                continue
            if instance is None or state in GONE_STATES:
                self._powering_off.add(instance_id)
                self._submit(instance_id, self._power_off, record, state)
            elif state in STOPPED_STATES and record.is_powered_on():
                self._powering_off.add(instance_id)
                self._submit(instance_id, self._stop, record, state)
            elif state == "running" and not record.is_powered_on():
                # Started again after a stop (after restart_s: a shorter boot than a launch's), or died
                # under a running instance (at once).
                stopped = (node_dir(self._layout, instance_id) / STOPPED_MARKER).exists()
                if not stopped or self._ran_for_s(instance_id, now) >= self._restart_s:
                    self._first_seen_running_at.pop(instance_id, None)
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
                    self._submit(instance_id, self._boot_again, record, stopped, tags)
            elif state == "running" and record.root_dir and (Path(record.root_dir) / "etc").is_dir():
                # The metadata service's live answer: a hot-buffer claim tags the running machine (and a recycle
                # tags it for its scrub).
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
                machine.write_instance_tags(Path(record.root_dir), tags)

        for instance_id, instance in instances.items():
            if instance["State"]["Name"] != "running":
                self._first_seen_running_at.pop(instance_id, None)
                continue
            if instance_id in records or instance_id in self._in_flight:
                continue
            first_seen = self._first_seen_running_at.setdefault(instance_id, now)
            launched_at = instance["LaunchTime"].timestamp()
            if now >= max(launched_at, first_seen) + self._boot_s:
                self._first_seen_running_at.pop(instance_id, None)
                directory = node_dir(self._layout, instance_id)
                self._submit(instance_id, self._first_boot.boot, instance, launched_at, directory)

        self._volumes.sync(instances, records, self._powering_off)

    def _submit(self, instance_id: str, work: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                work(*args)
            except Exception:
                # A machine that fails to boot or to power off must not take the hypervisor down.
                log.exception("%s: %s failed", instance_id, work.__name__.strip("_"))

        self._in_flight[instance_id] = self._pool.submit(guarded)

    def _ran_for_s(self, instance_id: str, now: float) -> float:
        return now - self._first_seen_running_at.setdefault(instance_id, now)

    def _boot_again(self, record: NodeRecord, started_after_stop: bool, tags: dict[str, str]) -> None:
        """A machine that was off boots again on its own disk: per-boot scripts, then the daemon; no user data."""
        instance_id = str(record.instance_id)
        directory = node_dir(self._layout, instance_id)
        node.power_off(record, keep_disk=True)  # a crashed machine leaves processes and mounts behind
        (directory / STOPPED_MARKER).unlink(missing_ok=True)
        root_dir = Path(record.root_dir)
        # The metadata service's answer this boot: a buffer machine claimed while stopped names its owner's volume;
        # a recycled one owes a scrub.
        machine.write_instance_tags(root_dir, tags)
        again = node.power_on(
            name=record.name,
            addr=record.addr,
            instance_id=instance_id,
            run_dir=Path(record.run_dir),
            data_dir=Path(record.data_dir),
            cgroup_parent=record.cgroup_parent,
            log_path=self._layout.logs_dir / f"{instance_id}.dockerd.log",
            root_dir=root_dir,
            cache_root=str(self._layout.node_cache_root),
            netns=record.netns,
            hub_netns=self._layout.hub_netns,
        )
        again.save(directory / "node.json")
        why = "started again after a stop" if started_after_stop else "recovered: its machine had died"
        log.info("%s: %s; booting %s on its own disk", instance_id, why, record.name)
        try:
            node.wait_until_up(again, timeout_s=USER_DATA_TIMEOUT_S)
        except Exception:
            if again.boot_stopped:
                log.error("%s: boot stopped by its per-boot script; the machine stays on without a daemon", instance_id)
                return
            raise
        log.info("%s: up again as %s", instance_id, record.name)

    def _stop(self, record: NodeRecord, state: str) -> None:
        """A stopped instance: the machine goes off and keeps its disk (data root, root dir, node id)."""
        try:
            node.power_off(record, keep_disk=True)
            write_atomically(node_dir(self._layout, str(record.instance_id)) / STOPPED_MARKER, state)
        finally:
            self._powering_off.discard(str(record.instance_id))
        log.info("%s: instance %s; %s powered off, its disk kept", record.instance_id, state, record.name)

    def _power_off(self, record: NodeRecord, state: str) -> None:
        started = time.monotonic()
        try:
            node.power_off(record)
            host.remove_tree(node_dir(self._layout, str(record.instance_id)))
        finally:
            self._powering_off.discard(str(record.instance_id))
        took_s = time.monotonic() - started
        log.info("%s: instance %s; powered %s off in %.2f s", record.instance_id, state, record.name, took_s)


def main(state_dir: Path) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    record = SandboxRecord.load(state_dir)
    BootWatcher(Layout(state_dir=state_dir, subnet=record.subnet), record).run()
