"""The sandbox's udev: a disk that appears on (or grows in) a running machine starts the unit its udev rules ask for."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from warmswarm_sandbox import node, procs
from warmswarm_sandbox.layout import Layout
from warmswarm_sandbox.machine import boot_env
from warmswarm_sandbox.node import NodeRecord

# The rule node_boot.sh installs: `ENV{SYSTEMD_WANTS}+="<unit>@%k.service"` for each EBS disk added. The sandbox
# plays that one form (a template unit per disk, instance = the disk's kernel name, here its volume id).
_WANTS = re.compile(r'ENV\{SYSTEMD_WANTS\}\+="(?P<unit>[A-Za-z0-9_.-]+)@%k\.service"')
# And for a disk that changed (EC2 grew it): `ACTION=="change", … RUN+="/usr/bin/systemctl --no-block start <unit>"`
# (SYSTEMD_WANTS acts only when a device first appears). Played through the sandbox's systemctl, never the host's.
_CHANGE_STARTS = re.compile(
    r'^ACTION=="change",.*RUN\+="(?:/usr)?/bin/systemctl --no-block start (?P<unit>[A-Za-z0-9_.@-]+\.service)"',
    re.MULTILINE,
)
_RULES_DIR = Path("etc", "udev", "rules.d")
_UNITS_DIR = Path("etc", "systemd", "system")

log = logging.getLogger(__name__)


class Udev:
    """Runs, inside a machine, the oneshot unit its udev rules want for a disk added while it runs."""

    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._running: list[procs.ProcRecord] = []

    def disk_added(self, record: NodeRecord, volume_id: str) -> None:
        """As systemd-udevd and systemd would: each unit a rule wants for the new disk starts, detached."""
        self.reap()
        if not record.root_dir or record.instance_id is None:
            return
        root = Path(record.root_dir)
        for unit in self._wanted_units(root):
            command = self._exec_start(root / _UNITS_DIR / f"{unit}@.service", volume_id)
            if command is None:
                log.warning("%s: udev wants %s@%s.service, which has no ExecStart", record.instance_id, unit, volume_id)
                continue
            if not self._run_in(record, command, unit):
                log.info("%s: disk %s added as the machine went off", record.instance_id, volume_id)
                return
            log.info("%s: disk %s added; udev starts %s@%s.service", record.instance_id, volume_id, unit, volume_id)

    def disk_changed(self, record: NodeRecord, volume_id: str) -> None:
        """As udev would for a disk whose size changed: each unit a `change` rule starts, started (the sandbox's
        systemctl runs it detached)."""
        self.reap()
        if not record.root_dir or record.instance_id is None:
            return
        for unit in self._change_units(Path(record.root_dir)):
            if not self._run_in(record, f"systemctl --no-block start {unit}", unit):
                log.info("%s: disk %s changed as the machine went off", record.instance_id, volume_id)
                return
            log.info("%s: disk %s changed; udev starts %s", record.instance_id, volume_id, unit)

    def _run_in(self, record: NodeRecord, command: str, unit: str) -> bool:
        """`command` run detached inside the machine, with its boot's environment; False when it is off."""
        root = Path(record.root_dir)
        env = boot_env(
            instance_id=str(record.instance_id),
            addr=record.addr,
            run_dir=Path(record.run_dir),
            root_dir=root,
        )
        log_path = self._layout.logs_dir / f"{record.instance_id}.{unit}.log"
        try:
            argv = [*node.enter_argv(record), "sh", "-c", command]
            self._running.append(procs.spawn_detached(argv, env=env, log_path=log_path))
        except (OSError, ProcessLookupError):  # powered off meanwhile: no machine, no event
            return False
        return True

    def reap(self) -> None:
        """The units' processes are this watcher's children: collect the finished ones."""
        still: list[procs.ProcRecord] = []
        for proc in self._running:
            try:
                pid, _ = os.waitpid(proc.pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if pid == 0:
                still.append(proc)
        self._running = still

    @staticmethod
    def _wanted_units(root: Path) -> list[str]:
        try:
            rules = sorted((root / _RULES_DIR).glob("*.rules"))
            return [m.group("unit") for path in rules for m in _WANTS.finditer(path.read_text())]
        except OSError:
            return []  # the machine's disk is going away: no rules, no units

    @staticmethod
    def _change_units(root: Path) -> list[str]:
        try:
            rules = sorted((root / _RULES_DIR).glob("*.rules"))
            return [m.group("unit") for path in rules for m in _CHANGE_STARTS.finditer(path.read_text())]
        except OSError:
            return []

    @staticmethod
    def _exec_start(unit_path: Path, instance: str) -> str | None:
        try:
            lines = unit_path.read_text().splitlines()
        except OSError:
            return None
        command = next((line.removeprefix("ExecStart=") for line in lines if line.startswith("ExecStart=")), None)
        return None if command is None else command.replace("%i", instance).replace("%I", instance)
