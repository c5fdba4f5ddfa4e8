"""The boot watcher's first boot of an instance: its machine powered on, the image imported, its user data run."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from warmswarm_sandbox import aws, node
from warmswarm_sandbox.image import SANDBOX_IMAGE
from warmswarm_sandbox.layout import Layout
from warmswarm_sandbox.machine import addresses_of, boot_env, first_daemon_json
from warmswarm_sandbox.node import NodeRecord

USER_DATA_TIMEOUT_S = 300.0

log = logging.getLogger("warmswarm_sandbox.boot_watcher")


class FirstBoot:
    """Powers on a new instance's machine as its AMI would: the daemon, the sandbox image, then its user data once."""

    def __init__(self, layout: Layout, ec2: Any, strict_url: str, image_tar: bytes) -> None:
        self._layout = layout
        self._ec2 = ec2
        # The strict layer gives each instance its private address: the one its machine must use.
        self._strict_url = strict_url
        self._image_tar = image_tar

    def boot(self, instance: dict[str, Any], launched_at: float, directory: Path) -> None:
        """An instance's first boot in `directory`: its user data's first half before the daemon, the join after it."""
        instance_id = instance["InstanceId"]
        started = time.monotonic()
        addr = addresses_of(self._strict_url, instance_id)
        index = self._layout.host_index(addr)
        root_dir = directory / "root"
        first_daemon_json(root_dir, instance_id)
        user_data = aws.user_data_of(self._ec2, instance_id)
        if user_data is not None:
            (directory / "user-data").write_bytes(user_data)
        env = self._env(instance_id, addr, index, root_dir)
        record = node.power_on(
            name=f"ip-{addr.replace('.', '-')}",
            addr=addr,
            instance_id=instance_id,
            run_dir=self._layout.run_dir / f"n{index:05d}",
            data_dir=directory / "data",  # its --data-root, in docker.service.show for the scrub
            cgroup_parent=f"{self._layout.cgroup_prefix}n{index:05d}",
            log_path=self._layout.logs_dir / f"{instance_id}.dockerd.log",
            root_dir=root_dir,
            cache_root=str(self._layout.node_cache_root),
            netns=self._layout.netns(index),
            hub_netns=self._layout.hub_netns,
        )
        # Recorded before anything can fail, so a power-off or `down` always finds the machine.
        record.save(directory / "node.json")
        log.info(
            "%s: powering on %s at %s (launched %.1f s ago)", instance_id, record.name, addr, time.time() - launched_at
        )
        try:
            engine = node.wait_until_up(record, timeout_s=USER_DATA_TIMEOUT_S)
        except Exception:
            if record.boot_stopped:
                log.error("%s: boot stopped by its boot script; the machine stays on without a daemon", instance_id)
                return
            raise
        daemon_up = time.monotonic()
        engine.import_image(self._image_tar, SANDBOX_IMAGE)
        imported = time.monotonic()
        if user_data is None:
            log.info(
                "%s: up, no user data (daemon %.2f s, image %.2f s)",
                instance_id,
                daemon_up - started,
                imported - daemon_up,
            )
            return
        # Like cloud-init: the user data runs once, on the first boot, after the daemon started.
        exit_code, output = self._run_user_data(record, env, directory / "user-data")
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

    def _env(self, instance_id: str, addr: str, index: int, root_dir: Path) -> dict[str, str]:
        return boot_env(
            instance_id=instance_id,
            addr=addr,
            run_dir=self._layout.run_dir / f"n{index:05d}",
            root_dir=root_dir,
        )

    def _run_user_data(self, record: NodeRecord, env: dict[str, str], script: Path) -> tuple[int | str, str]:
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
