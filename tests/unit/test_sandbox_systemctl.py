"""The sandbox's systemctl and timer, real sh on a fake root disk: non-blocking starts, timers, udev's change rules."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from importlib import resources
from pathlib import Path

from warmswarm_sandbox.boot_watcher_udev import Udev

SHIMS = resources.files("warmswarm_sandbox").joinpath("bin")


def machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root, run = tmp_path / "root", tmp_path / "run"
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    run.mkdir()
    env = {"PATH": f"{SHIMS}:{os.environ['PATH']}", "WARMSWARM_NODE_ROOT": str(root), "WARMSWARM_RUN_DIR": str(run)}
    return root, env


def unit(root: Path, name: str, text: str) -> None:
    (root / "etc" / "systemd" / "system" / name).write_text(text)


def wait_for_lines(path: Path, count: int, timeout_s: float = 10.0) -> list[str]:
    deadline_s = time.monotonic() + timeout_s
    while time.monotonic() < deadline_s:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= count:
            return lines
        time.sleep(0.05)
    raise AssertionError(f"{path}: fewer than {count} lines within {timeout_s} s")


def test_a_no_block_start_runs_the_unit_whichever_side_the_option_is(tmp_path: Path) -> None:
    root, env = machine(tmp_path)
    ran = tmp_path / "ran"
    unit(root, "fill.service", f"[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo ran >> {ran}'\n")

    for argv in (["--no-block", "start", "fill.service"], ["start", "--no-block", "fill.service"]):
        subprocess.run(["systemctl", *argv], env=env, check=True, timeout=5)

    assert wait_for_lines(ran, 2) == ["ran", "ran"]


def test_an_enabled_timer_runs_its_service_each_period_once_per_boot(tmp_path: Path) -> None:
    root, env = machine(tmp_path)
    ran = tmp_path / "ran"
    unit(root, "fill.service", f"[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo ran >> {ran}'\n")
    unit(root, "fill.timer", "[Timer]\nOnBootSec=1s\nOnUnitActiveSec=1s\n\n[Install]\nWantedBy=timers.target\n")

    subprocess.run(["systemctl", "enable", "--now", "fill.timer"], env=env, check=True, timeout=5)
    pid_file = tmp_path / "run" / "fill.timer.pid"
    try:
        wait_for_lines(pid_file, 1)
        first_pid = int(pid_file.read_text())
        subprocess.run(["systemctl", "start", "fill.timer"], env=env, check=True, timeout=5)  # running: nothing new
        assert wait_for_lines(ran, 2, timeout_s=5) == ["ran", "ran"]
        assert int(pid_file.read_text()) == first_pid
        assert (root / "etc" / "systemd" / "timers.wanted").read_text().split() == ["fill.timer"]
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)


def test_udev_plays_a_change_rule_s_start_and_only_the_change_rule_s(tmp_path: Path) -> None:
    rules = tmp_path / "etc" / "udev" / "rules.d"
    rules.mkdir(parents=True)
    (rules / "90-add.rules").write_text(
        'ACTION=="add", SUBSYSTEM=="block", TAG+="systemd", ENV{SYSTEMD_WANTS}+="hot-cache@%k.service"\n'
    )
    (rules / "91-change.rules").write_text(
        'ACTION=="change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", '
        'RUN+="/usr/bin/systemctl --no-block start warmswarm-cache-fill.service"\n'
    )

    assert Udev._change_units(tmp_path) == ["warmswarm-cache-fill.service"]
    assert Udev._wanted_units(tmp_path) == ["hot-cache"]
