"""The boot watcher, EC2's hypervisor and AMI: a machine per running instance, its user data run, powered off
after; an attached volume shown to its machine as a device folder, a deleted one's folder removed."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, host, node, procs
from warmswarm_sandbox.image import SANDBOX_IMAGE
from warmswarm_sandbox.layout import FIRST_NODE_HOST_INDEX, Layout, SandboxRecord, write_atomically
from warmswarm_sandbox.node import NodeRecord

POLL_S = 0.2
USER_DATA_TIMEOUT_S = 300.0
# Boots run in parallel, as on EC2; a cap keeps a burst of launches from starving a 2-core machine.
MAX_PARALLEL_BOOTS = 8
POWERED_OFF_STATES = frozenset({"stopping", "stopped", "shutting-down", "terminated"})
# A volume id becomes a file name on the host: accept only EC2's own form, never "../…".
_VOLUME_ID = re.compile(r"^vol-[0-9a-f]+$")

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
        self._attach_s = record.attach_s
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
        # (volume id, instance id) -> when we first saw moto call it attached (monotonic s). moto
        # attaches at once; the strict layer shows `attaching` for attach_s and so do we.
        self._attach_seen_at_s: dict[tuple[str, str], float] = {}

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

        self._sync_volumes(instances, records)

    def _sync_volumes(self, instances: dict[str, dict[str, Any]], records: dict[str, NodeRecord]) -> None:
        """Show each attached volume to its running machine, hide detached ones, and remove the
        folders of volumes EC2 no longer has."""
        try:
            volumes = {vid: v for vid, v in aws.all_volumes(self._ec2).items() if _VOLUME_ID.match(vid)}
        except Exception as error:  # as for instances: look again next time
            log.warning("DescribeVolumes failed: %s", error)
            return
        now_s = time.monotonic()
        attached: set[tuple[str, str]] = set()
        # instance id -> the volume ids its machine sees -> when moto was first seen attaching it
        shown: dict[str, dict[str, float]] = {}
        for volume_id, volume in volumes.items():
            for attachment in volume.get("Attachments") or []:
                instance = instances.get(str(attachment.get("InstanceId")))
                if attachment.get("State") != "attached" or instance is None:
                    continue
                if attachment.get("Device") == instance.get("RootDeviceName"):
                    continue  # moto's root volume: the machine's root disk is its own data dir
                key = (volume_id, instance["InstanceId"])
                attached.add(key)
                if key not in self._attach_seen_at_s:
                    self._attach_seen_at_s[key] = now_s
                    # Its first attachment is when a volume needs a place on the host; it keeps it
                    # until DeleteVolume, through any number of instances.
                    self._layout.volume_dir(volume_id).mkdir(parents=True, exist_ok=True)
                seen_at_s = self._attach_seen_at_s[key]
                if now_s >= seen_at_s + self._attach_s:
                    shown.setdefault(key[1], {})[volume_id] = seen_at_s
        self._attach_seen_at_s = {key: at_s for key, at_s in self._attach_seen_at_s.items() if key in attached}

        for instance_id, record in records.items():
            instance = instances.get(instance_id)
            # A machine on its way off is left alone: its power-off (in a pool thread) removes the
            # whole run dir, and a link made meanwhile would outlive it.
            if instance is None or instance["State"]["Name"] != "running" or instance_id in self._powering_off:
                continue
            if record.is_powered_on():
                self._show_devices(record, shown.get(instance_id, {}))

        if self._layout.volumes_dir.is_dir():
            for folder in self._layout.volumes_dir.iterdir():
                if folder.name not in volumes:
                    host.remove_tree(folder)
                    log.info("%s: deleted in EC2; its folder %s is gone", folder.name, folder)

    def _show_devices(self, record: NodeRecord, volumes: dict[str, float]) -> None:
        """Make the machine's device dir hold exactly these volumes, each a link to its folder.
        A link, not a mount: the machine's mount namespace has private propagation, so it sees host
        folders made later but not host mounts made later."""
        device_dir = Path(record.device_dir)
        try:
            present = {entry.name for entry in device_dir.iterdir()}
        except FileNotFoundError:
            return  # the machine is being powered off or was never fully made
        for volume_id in sorted(volumes.keys() - present):
            (device_dir / volume_id).symlink_to(self._layout.volume_dir(volume_id))
            log.info(
                "%s: volume %s appears at %s/%s, %.2f s after the attach was seen",
                record.instance_id,
                volume_id,
                device_dir,
                volume_id,
                time.monotonic() - volumes[volume_id],
            )
        for volume_id in sorted(present - volumes.keys()):
            (device_dir / volume_id).unlink(missing_ok=True)
            log.info("%s: volume %s detached; gone from %s", record.instance_id, volume_id, device_dir)

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
        # Attached volumes appear in record.device_dir from the loop (_sync_volumes), whenever they
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
