"""The sandbox's disks on the host: a volume's file bound to one loop device and released; the failing disk's EIO."""

from __future__ import annotations

import errno
import subprocess
import threading
from pathlib import Path

import pytest
from warmswarm_sandbox import disks, host


def test_a_volume_s_file_is_one_loop_device_read_through_it_and_released(tmp_path: Path) -> None:
    backing = tmp_path / "volumes" / "vol-0abc"
    assert disks.make_backing(backing, disks.GIB)
    assert not disks.make_backing(backing, 2 * disks.GIB), "an existing volume's file is never touched"
    assert backing.stat().st_size == disks.GIB
    assert backing.stat().st_blocks * 512 < disks.MIB, "sparse: a new volume costs no space"
    try:
        device = disks.bind(backing)
        assert disks.bind(backing) == device, "one device per volume: a second would be a second disk"
        assert set(disks.loops_under([tmp_path])) == {device}
        assert disks.uuid_of(backing) is None, "blank"
        assert disks.files_on(backing, tmp_path / "peek") is None, "no filesystem to read"
        subprocess.run(["mkfs.xfs", "-q", device], check=True)
        assert disks.uuid_of(backing) is not None, "the device's writes are the file's bytes"
        assert disks.files_on(backing, tmp_path / "peek") == {}
        assert not (tmp_path / "peek").exists(), "the host's read leaves no mount and no folder"
    finally:
        assert disks.release_under([tmp_path]) == []
    assert disks.loops_under([tmp_path]) == {}


def test_the_failing_disk_answers_every_read_eio_and_is_released(tmp_path: Path) -> None:
    image = tmp_path / "faults" / "failing-disk.img"
    mount_dir = tmp_path / "disks" / "failing"
    try:
        device = disks.failing_disk(image, mount_dir)
        assert disks.failing_disk(image, mount_dir) == device, "made once per sandbox"
        # blkid -p skips what it cannot read and finds nothing (exit 2, as on a blank disk): the cache script's
        # zero check is what refuses it, cmp's "trouble" (exit 2).
        probed = subprocess.run(["blkid", "-p", device], capture_output=True, check=False)
        assert probed.returncode == 2
        zeroed = subprocess.run(["cmp", "-s", "-n", "1048576", device, "/dev/zero"], check=False)
        assert zeroed.returncode == 2
        with pytest.raises(OSError, match="Input/output error") as failed, open(device, "rb", buffering=0) as raw:
            raw.read(4096)
        assert failed.value.errno == errno.EIO
    finally:
        disks.release_failing_disk(image)
        host.unmount_under(tmp_path / "disks")
        assert disks.release_under([tmp_path]) == []
    assert disks.loops_under([tmp_path]) == {}


def test_a_volume_is_read_whenever_its_going_machine_s_last_mount_goes(tmp_path: Path) -> None:
    # A machine powered off releases its volume's loop device (autoclear) while its mount namespace still holds the
    # filesystem; the kernel clears the device when that last mount goes. The host's read at any moment around it
    # (the e2e tests read the owner's disk right after the instance is terminated) still gets the files.
    backing, holder = tmp_path / "volumes" / "vol-0abc", tmp_path / "machine-mount"
    assert disks.make_backing(backing, disks.GIB)
    holder.mkdir()
    try:
        subprocess.run(["mkfs.xfs", "-q", disks.bind(backing)], check=True)
        for round_number in range(40):
            device = disks.bind(backing)
            subprocess.run(["mount", device, str(holder)], check=True)
            (holder / "f").write_bytes(b"mine\n")
            subprocess.run(["losetup", "--detach", device], check=True)  # released: cleared with its last mount
            assert disks.loops()[device].released
            leaving = threading.Timer(round_number * 0.0005, subprocess.run, (["umount", str(holder)],))
            leaving.start()
            try:
                assert disks.files_on(backing, tmp_path / "peek") == {"f": b"mine\n"}, f"round {round_number}"
            finally:
                leaving.join()
            assert disks.release_under([tmp_path]) == []
    finally:
        host.unmount_under(tmp_path)
        assert disks.release_under([tmp_path]) == []
