"""A real loop device's XFS grown online by the node's fill script, its fill labelled, a file on it unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from warmswarm_sandbox import disks

FILL_SCRIPT = resources.files("warmswarm_autoscaling").joinpath("node_cache_fill.sh")
VOLUME_ID = "vol-0abc"


class Node:
    """A mounted cache volume and the fill script's surroundings: its config, daemon.json, a recording systemctl."""

    def __init__(self, root: Path, device: str, mount: Path) -> None:
        self.device = device
        self.mount = mount
        self.daemon_json = root / "daemon.json"
        self.daemon_json.write_text(
            json.dumps({"labels": ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]})
        )
        self.conf = root / "cache.conf"
        self.conf.write_text(f"cache_path='{mount}'\ndaemon_json='{self.daemon_json}'\n")
        self.calls = root / "systemctl.calls"
        bin_dir = root / "bin"
        bin_dir.mkdir()
        systemctl = bin_dir / "systemctl"
        systemctl.write_text(f'#!/bin/sh\necho "$*" >> {self.calls}\n')
        systemctl.chmod(systemctl.stat().st_mode | stat.S_IXUSR)
        self.path = f"{bin_dir}:{os.environ['PATH']}"

    def fill_run(self) -> None:
        done = subprocess.run(
            ["sh", str(FILL_SCRIPT), str(self.conf)],
            capture_output=True,
            text=True,
            env={**os.environ, "PATH": self.path},
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def fill_label(self) -> str | None:
        labels = json.loads(self.daemon_json.read_text())["labels"]
        found = [label.split("=", 1)[1] for label in labels if label.startswith("warmswarm.cache-fill=")]
        assert len(found) <= 1
        return found[0] if found else None

    def reloads(self) -> int:
        lines = self.calls.read_text().splitlines() if self.calls.exists() else []
        assert set(lines) <= {"reload docker"}
        return len(lines)

    def fs_bytes(self) -> int:
        return os.statvfs(self.mount).f_blocks * os.statvfs(self.mount).f_frsize


@pytest.fixture(params=["xfs"])
def node(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Node]:
    backing = tmp_path / "volumes" / VOLUME_ID
    disks.make_backing(backing, disks.GIB)
    mount = tmp_path / "cache"
    mount.mkdir()
    try:
        device = disks.bind(backing)
        subprocess.run([f"mkfs.{request.param}", "-q", device], check=True)
        subprocess.run(["mount", device, str(mount)], check=True)
        try:
            yield Node(tmp_path, device, mount)
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        assert disks.release_under([tmp_path]) == []


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_grown_disk_grows_the_mounted_filesystem_and_every_byte_of_a_file_stays(node: Node) -> None:
    data = node.mount / "data"
    data.write_bytes(os.urandom(8 * disks.MIB))
    os.sync()
    before = sha256(data)

    node.fill_run()
    assert node.fill_label() == f"{VOLUME_ID}:0:1024"  # empty, and its file system's size: the whole 1 GiB disk
    assert node.reloads() == 1
    node.fill_run()
    assert node.reloads() == 1, "the same 5-point step: the daemon is not reloaded again"

    # Past 80 %: the label says so (floored to 5 points, never more than it is).
    subprocess.run(["fallocate", "-l", str(820 * disks.MIB), str(node.mount / "ballast")], check=True)
    node.fill_run()
    used = os.statvfs(node.mount)
    used_percent = (used.f_blocks - used.f_bfree) * 100 // (used.f_blocks - used.f_bfree + used.f_bavail)
    assert used_percent >= 80
    assert node.fill_label() == f"{VOLUME_ID}:{used_percent // 5 * 5}:1024"
    assert node.reloads() == 2
    small_fs_bytes = node.fs_bytes()

    # EC2 grows the volume: the host grows its file and the kernel reads the loop device's new size.
    backing = Path(disks.loops()[node.device].back_file)
    assert disks.grow_backing(backing, 2 * disks.GIB)
    assert not disks.grow_backing(backing, disks.GIB), "never smaller"
    assert backing.stat().st_size == 2 * disks.GIB
    disks.refresh_capacity(node.device)
    assert disks.device_bytes(node.device) == 2 * disks.GIB

    node.fill_run()  # online: the filesystem stays mounted, its files open-able throughout
    assert node.fs_bytes() > 1.9 * small_fs_bytes
    assert sha256(data) == before
    label = node.fill_label()
    assert label is not None
    _, percent, size_mib = label.split(":")
    assert int(percent) < 50, "the same data on twice the room"
    assert size_mib == "2048", "the file system took up the growth, and says so"
    assert node.reloads() == 3
    grown_fs_bytes = node.fs_bytes()
    node.fill_run()
    assert node.fs_bytes() == grown_fs_bytes, "grown once: a later run finds nothing to grow"
    assert node.reloads() == 3


def test_a_file_system_that_did_not_take_up_a_growth_reports_its_own_smaller_size(node: Node) -> None:
    """Issue 42: a file system that did not grow kept reporting full, and the volume grew every six hours to its cap.
    The label's size is the file system's, not the disk's: the autoscaler sees that it did not take up the growth."""
    failing = Path(node.path.split(":", 1)[0]) / "xfs_growfs"
    failing.write_text("#!/bin/sh\necho 'xfs_growfs: refused' >&2\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IXUSR)
    subprocess.run(["fallocate", "-l", str(820 * disks.MIB), str(node.mount / "ballast")], check=True)
    backing = Path(disks.loops()[node.device].back_file)
    assert disks.grow_backing(backing, 2 * disks.GIB)
    disks.refresh_capacity(node.device)

    subprocess.run(["sh", str(FILL_SCRIPT), str(node.conf)], env={**os.environ, "PATH": node.path}, check=False)

    label = node.fill_label()
    assert label is not None
    _, percent, size_mib = label.split(":")
    assert (int(percent) >= 80, size_mib) == (True, "1024")


def test_nothing_is_reported_while_the_volume_is_not_named_mounted(node: Node) -> None:
    node.daemon_json.write_text(json.dumps({"labels": ["warmswarm.instance-id=i-0abc"]}))

    node.fill_run()

    assert node.fill_label() is None
    assert node.reloads() == 0


@pytest.mark.parametrize("node", ["ext4"], indirect=True)
def test_an_ext4_volume_is_neither_reported_nor_grown(node: Node) -> None:
    subprocess.run(["fallocate", "-l", str(900 * disks.MIB), str(node.mount / "ballast")], check=True)
    backing = Path(disks.loops()[node.device].back_file)
    disks.grow_backing(backing, 2 * disks.GIB)
    disks.refresh_capacity(node.device)
    before_bytes = node.fs_bytes()

    node.fill_run()

    assert node.fill_label() is None, "a report would grow a disk its filesystem cannot use"
    assert node.reloads() == 0
    assert node.fs_bytes() == before_bytes
