"""The boot watcher, EC2's hypervisor and AMI: a machine per running instance, its user data run, powered off after."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, host, node, procs
from warmswarm_sandbox.boot_watcher_volumes import VolumeSync
from warmswarm_sandbox.image import SANDBOX_IMAGE
from warmswarm_sandbox.layout import FIRST_NODE_HOST_INDEX, Layout, SandboxRecord, write_atomically
from warmswarm_sandbox.node import NodeRecord

POLL_S = 0.2
USER_DATA_TIMEOUT_S = 300.0
# Boots run in parallel, as on EC2; a cap keeps a burst of launches from starving a 2-core machine.
MAX_PARALLEL_BOOTS = 8
POWERED_OFF_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})

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


def hostname_of(instance: dict[str, Any]) -> str:
    # ip-10-1-2-3.ec2.internal -> ip-10-1-2-3, as an EC2 machine names itself.
    dns = str(instance.get("PrivateDnsName") or "")
    label = dns.split(".", 1)[0]
    return label or str(instance["InstanceId"])


class BootWatcher:
    def __init__(self, layout: Layout, record: SandboxRecord) -> None:
        if record.endpoints is None:
            raise RuntimeError("the sandbox record has no endpoints yet: start the watcher after moto is up")
        self._layout = layout
        self._boot_s = record.boot_s
        self._ec2 = aws.ec2_client(record.endpoints["MOTO_ENDPOINT_URL"], record.region)
        self._image_tar = layout.image_tar.read_bytes()
        self._pool = ThreadPoolExecutor(max_workers=MAX_PARALLEL_BOOTS, thread_name_prefix="boot")
        # One boot or power-off at a time per instance; the loop skips instances with work in flight.
        self._in_flight: dict[str, Future[None]] = {}
        # Those of them being powered off (added by the loop, removed by the pool thread when done).
        self._powering_off: set[str] = set()
        # LaunchTime has whole-second precision: count the boot time from when we first saw the
        # instance running too, so boot_s is never cut short by up to a second.
        self._first_seen_running_at: dict[str, float] = {}
        self._index_lock = threading.Lock()
        self._volumes = VolumeSync(layout, record.attach_s, self._ec2)

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
            if (instance is None or state in POWERED_OFF_STATES) and instance_id not in self._in_flight:
                self._powering_off.add(instance_id)
                self._submit(instance_id, self._power_off, record, state)

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
                self._submit(instance_id, self._boot, instance, launched_at)

        self._volumes.sync(instances, records, self._powering_off)

    def _submit(self, instance_id: str, work: Callable[..., None], *args: Any) -> None:
        def guarded() -> None:
            try:
                work(*args)
            except Exception:
                # A machine that fails to boot or to power off must not take the hypervisor down.
                log.exception("%s: %s failed", instance_id, work.__name__.strip("_"))

        self._in_flight[instance_id] = self._pool.submit(guarded)

    def _next_host_index(self) -> int:
        # Addresses are never reused within a sandbox: the manager may still list a powered-off
        # node under its old address for a while.
        with self._index_lock:
            path = self._layout.nodes_dir / "next-host-index"
            index = int(path.read_text()) if path.exists() else FIRST_NODE_HOST_INDEX
            while index % 256 in (0, 255):
                index += 1
            write_atomically(path, str(index + 1))
            return index

    def _boot(self, instance: dict[str, Any], launched_at: float) -> None:
        instance_id = instance["InstanceId"]
        started = time.monotonic()
        index = self._next_host_index()
        name = hostname_of(instance)
        directory = node_dir(self._layout, instance_id)
        record = node.power_on(
            name=name,
            addr=self._layout.addr(index),
            instance_id=instance_id,
            run_dir=self._layout.run_dir / f"n{index:05d}",
            data_dir=directory / "data",
            cgroup_parent=f"{self._layout.cgroup_prefix}n{index:05d}",
            log_path=self._layout.logs_dir / f"{instance_id}.dockerd.log",
        )
        # Recorded before anything can fail, so a power-off or `down` always finds the machine.
        record.save(directory / "node.json")
        log.info(
            "%s: powering on %s at %s (launched %.1f s ago)", instance_id, name, record.addr, time.time() - launched_at
        )
        engine = node.wait_until_up(record)
        daemon_up = time.monotonic()
        engine.import_image(self._image_tar, SANDBOX_IMAGE)
        imported = time.monotonic()
        # Attached volumes appear in record.device_dir from the loop (VolumeSync), whenever they
        # attach: the user data waits for its own.
        user_data = aws.user_data_of(self._ec2, instance_id)
        if user_data is None:
            log.info(
                "%s: up, no user data (daemon %.2f s, image %.2f s)",
                instance_id,
                daemon_up - started,
                imported - daemon_up,
            )
            return
        exit_code, output = self._run_user_data(record, user_data, directory / "user-data")
        finished = time.monotonic()
        timings = (
            f"daemon {daemon_up - started:.2f} s, image {imported - daemon_up:.2f} s, "
            f"user data {finished - imported:.2f} s, total {finished - started:.2f} s"
        )
        if exit_code == 0:
            log.info("%s: booted (%s)", instance_id, timings)
        else:
            # Like a real machine with a broken boot script: it stays on, and the log says why.
            log.error(
                "%s: user data exited %s (%s); the machine stays on. Output:\n%s",
                instance_id,
                exit_code,
                timings,
                output.rstrip(),
            )

    def _run_user_data(self, record: NodeRecord, user_data: bytes, script: Path) -> tuple[int | str, str]:
        script.write_bytes(user_data)
        env = {
            "PATH": procs.SYSTEM_PATH,
            "HOME": "/root",
            "DOCKER_HOST": record.docker_host,
            # Several machines share one network namespace here, so each must be told its address;
            # on EC2 this is unset and the daemon finds its own.
            "WARMSWARM_NODE_ADDR": record.addr,
            # No block devices here: the boot script finds an attached volume as a folder named
            # after it in this dir; on EC2 this is unset and it looks in /dev/disk/by-id.
            "WARMSWARM_DEVICE_DIR": record.device_dir,
        }
        proc = subprocess.Popen(
            [*node.enter_argv(record), "sh", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        exit_code: int | str
        try:
            raw, _ = proc.communicate(timeout=USER_DATA_TIMEOUT_S)
            exit_code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raw, _ = proc.communicate()
            exit_code = f"nothing: killed after {USER_DATA_TIMEOUT_S} s"
        output = raw.decode(errors="replace")
        log_path = self._layout.logs_dir / f"{record.instance_id}.user-data.log"
        log_path.write_text(output)
        return exit_code, output

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
