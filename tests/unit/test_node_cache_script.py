"""The per-boot cache script (node_cache.sh) on real files: what it formats, what stops a boot, what it labels.

Run with the real blkid, cmp and mkfs.xfs against image files standing in for the EBS device; only the
mount is played by a stand-in (mounting an image needs a loop device; the sandbox's tests mount real ones), so
every decision before it is the script's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from .late_metadata import late_metadata_service

SCRIPT = str(resources.files("warmswarm_autoscaling").joinpath("node_cache.sh"))
VOLUME_ID = "vol-0123456789abcdef0"
MIB = 2**20
# mkfs.xfs makes no filesystem under 300 MiB; sparse, so a blank device of this size costs nothing.
FORMATTABLE_BYTES = 320 * MIB


def run_script(
    tmp_path: Path,
    device: Path | None,
    *,
    path: str | None = None,
    tagged: str | None = None,
    mode: str = "boot",
    imds_url: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """node_cache.sh with a config naming `device` (through a device dir), a mount that only records, and a
    systemctl that only records (a hot attach reloads the daemon).

    `tagged`: the config names no volume (a machine from a buffer) and the metadata service's answer for the
    instance's volume tag is this. `mode`: "boot", or "hot" for a disk attached while the machine runs. `imds_url`:
    the config names no volume and the tag is read from that metadata service (as on EC2), with the real curl.
    """
    device_dir = tmp_path / "devices"
    device_dir.mkdir(exist_ok=True)
    if device is not None and not (device_dir / VOLUME_ID).exists():
        (device_dir / VOLUME_ID).symlink_to(device)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_mount = bin_dir / "mount"
    fake_mount.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "mounted"}\n')
    fake_mount.chmod(fake_mount.stat().st_mode | stat.S_IXUSR)
    fake_systemctl = bin_dir / "systemctl"
    fake_systemctl.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "systemctl"}\n')
    fake_systemctl.chmod(fake_systemctl.stat().st_mode | stat.S_IXUSR)
    # `docker ps -q`: the ids in ./containers (none when absent); a daemon that is not running when ./docker-down.
    fake_docker = bin_dir / "docker"
    fake_docker.write_text(
        f"#!/bin/sh\n[ -e {tmp_path / 'docker-down'} ] && exit 1\ncat {tmp_path / 'containers'} 2>/dev/null\nexit 0\n"
    )
    fake_docker.chmod(fake_docker.stat().st_mode | stat.S_IXUSR)
    config = tmp_path / "cache.conf"
    tag_file = tmp_path / "imds-volume-tag"
    if tagged is not None:
        tag_file.write_text(tagged)
    configured = VOLUME_ID if tagged is None and imds_url is None else ""
    config.write_text(
        f"instance_id='i-0abc'\nvolume_id='{configured}'\ncache_path='{tmp_path / 'cache'}'\ndevice_wait_s=1\n"
        f"daemon_json='{tmp_path / 'daemon.json'}'\ndevice_dir='{device_dir}'\n"
        f"volume_tag_file='{'' if imds_url else tag_file}'\nimds_url='{imds_url}'\nimds_wait_s=30\n"
    )
    env = {"PATH": path if path is not None else f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", SCRIPT, str(config), mode], capture_output=True, text=True, env=env, check=False)


def labels(tmp_path: Path) -> list[str]:
    config: dict[str, list[str]] = json.loads((tmp_path / "daemon.json").read_text())
    return config["labels"]


def assert_formatted_mounted_and_named(tmp_path: Path, device: Path) -> None:
    """The blank device now holds XFS, is mounted at the cache path, and the daemon's labels name the volume."""
    probed = subprocess.run(["blkid", "-p", "-o", "value", "-s", "TYPE", str(device)], capture_output=True, text=True)
    assert probed.stdout.strip() == "xfs"
    assert (tmp_path / "mounted").read_text().split() == [
        "-o",
        "nodev,nosuid",
        str(tmp_path / "devices" / VOLUME_ID),
        str(tmp_path / "cache"),
    ]
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]


def image(tmp_path: Path, content: bytes = b"", size: int = 8 * MIB) -> Path:
    device = tmp_path / "device.img"
    with device.open("wb") as raw:
        raw.truncate(size)
        raw.write(content)
    return device


def test_a_blank_device_is_formatted_mounted_and_named_in_the_labels(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)

    done = run_script(tmp_path, device)

    assert done.returncode == 0, done.stderr
    assert_formatted_mounted_and_named(tmp_path, device)


# XFS, as this release formats; ext4, as an earlier one did: an owner's volume of either is mounted as it is.
@pytest.mark.parametrize(
    "mkfs", [["mkfs.xfs", "-q", "-L", "owners-data"], ["mkfs.ext4", "-q", "-F", "-L", "owners-data"]]
)
def test_a_device_with_a_filesystem_is_mounted_and_not_formatted_again(tmp_path: Path, mkfs: list[str]) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)
    subprocess.run([*mkfs, "-L", "owners-data", str(device)], check=True)
    before = digest(device)

    done = run_script(tmp_path, device)

    assert done.returncode == 0, done.stderr
    assert digest(device) == before
    assert (tmp_path / "mounted").exists()


def digest(path: Path) -> str:
    """The SHA-256 of a device image's bytes, read in chunks (an image for XFS is hundreds of MiB, sparse)."""
    with path.open("rb") as raw:
        return hashlib.file_digest(raw, "sha256").hexdigest()


def test_a_device_holding_data_without_a_filesystem_signature_is_not_formatted_and_the_boot_stops(
    tmp_path: Path,
) -> None:
    device = image(tmp_path, content=b"an owner's raw data, no filesystem here " * 100)
    before = device.read_bytes()

    done = run_script(tmp_path, device)

    assert done.returncode == 1
    assert "not formatting it" in done.stderr
    assert device.read_bytes() == before
    assert not (tmp_path / "mounted").exists()
    assert not (tmp_path / "daemon.json").exists(), "the daemon is told nothing: it must not start"


@pytest.mark.parametrize("exit_code", [1, 4, 8])
def test_a_device_blkid_cannot_probe_is_not_formatted_and_the_boot_stops(tmp_path: Path, exit_code: int) -> None:
    device = image(tmp_path)  # blank: only the probe's failure protects it
    before = device.read_bytes()
    fake_bin = tmp_path / "fake-blkid"
    fake_bin.mkdir()
    blkid = fake_bin / "blkid"
    blkid.write_text(f"#!/bin/sh\necho 'blkid: read error' >&2\nexit {exit_code}\n")
    blkid.chmod(blkid.stat().st_mode | stat.S_IXUSR)

    done = run_script(tmp_path, device, path=f"{fake_bin}:{tmp_path / 'bin'}:{os.environ['PATH']}")

    assert done.returncode == 1
    assert f"cannot be probed (blkid exit {exit_code})" in done.stderr
    assert device.read_bytes() == before


def test_without_blkid_nothing_is_formatted_and_the_boot_stops(tmp_path: Path) -> None:
    device = image(tmp_path)
    before = device.read_bytes()
    # A PATH with the shell's tools but no blkid: the probe's "command not found" (127) must not read as blank.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("cmp", "mkfs.xfs", "python3", "mountpoint", "rmdir", "mkdir", "dirname", "sleep", "tr", "flock"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True).stdout.strip()
        if found:
            (tools / tool).symlink_to(found)

    done = run_script(tmp_path, device, path=f"{tmp_path / 'bin'}:{tools}")

    assert done.returncode == 1
    assert "blkid exit 127" in done.stderr
    assert device.read_bytes() == before


def test_a_volume_that_never_appears_leaves_no_cache_path_and_no_cache_label(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()  # the mount point a previous boot made, now a bare folder on the root disk

    done = run_script(tmp_path, None)

    assert done.returncode == 0, done.stderr
    assert "did not appear" in done.stderr
    assert not (tmp_path / "cache").exists(), "a bind mount of the bare path must fail, not write to the root disk"
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc"]


def test_the_labels_are_merged_into_an_amis_daemon_json_and_keep_its_settings(tmp_path: Path) -> None:
    # A GPU AMI's runtime and default runtime, and a stale cache label from a boot that had the mount.
    (tmp_path / "daemon.json").write_text(
        json.dumps(
            {
                "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
                "default-runtime": "nvidia",
                "labels": ["site=lab", f"warmswarm.cache-volume={VOLUME_ID}"],
            }
        )
    )

    done = run_script(tmp_path, None)

    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "daemon.json").read_text())
    assert config["runtimes"] == {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}
    assert config["default-runtime"] == "nvidia"
    assert config["labels"] == ["site=lab", "warmswarm.instance-id=i-0abc"], "no cache label without the mount"


def test_a_buffer_machine_claimed_for_an_owner_mounts_the_volume_its_instance_tag_names(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)

    done = run_script(tmp_path, device, tagged=VOLUME_ID)

    assert done.returncode == 0, done.stderr
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]


def test_a_claimed_machine_whose_metadata_service_answers_late_still_mounts_its_owners_volume(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)

    with late_metadata_service({"tags/instance/warmswarm:volume-id": VOLUME_ID}) as imds:
        done = run_script(tmp_path, device, imds_url=imds.url)

    assert done.returncode == 0, done.stderr
    assert imds.hung.is_set()
    assert_formatted_mounted_and_named(tmp_path, device)


@pytest.mark.parametrize("tagged", ["", "vol-../../etc", "volume-1"])
def test_without_a_usable_volume_tag_a_machine_without_a_volume_has_no_cache(tmp_path: Path, tagged: str) -> None:
    device = image(tmp_path)

    done = run_script(tmp_path, device, tagged=tagged)

    assert done.returncode == 0, done.stderr
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc"]
    assert not (tmp_path / "mounted").exists()


# A hot attach: the owner's volume attached to a running hot-buffer machine after its claim tagged it.


def test_a_hot_attached_blank_volume_is_formatted_mounted_named_and_the_idle_daemon_restarted(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="hot")

    assert done.returncode == 0, done.stderr
    assert_formatted_mounted_and_named(tmp_path, device)
    # A daemon that runs no container re-registers its node at once when restarted (a reload shows in 20 s).
    assert (tmp_path / "systemctl").read_text().split() == ["restart", "docker"]


def test_a_daemon_running_containers_is_reloaded_not_restarted_on_a_hot_attach(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)
    (tmp_path / "containers").write_text("3f2a9c\n")

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="hot")

    assert done.returncode == 0, done.stderr
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]
    assert (tmp_path / "systemctl").read_text().split() == ["reload", "docker"], "its containers keep running"


def test_a_hot_attach_while_the_daemon_is_down_leaves_it_to_read_the_labels_when_it_starts(tmp_path: Path) -> None:
    device = image(tmp_path, size=FORMATTABLE_BYTES)
    (tmp_path / "docker-down").touch()

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="hot")

    assert done.returncode == 0, done.stderr
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]
    assert not (tmp_path / "systemctl").exists(), "a daemon that is down is not started by a disk event"


def test_a_hot_attached_volume_holding_data_is_mounted_as_it_is(tmp_path: Path) -> None:
    device = image(tmp_path)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "owners-data", str(device)], check=True)
    before = device.read_bytes()

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="hot")

    assert done.returncode == 0, done.stderr
    assert device.read_bytes() == before
    assert labels(tmp_path) == ["warmswarm.instance-id=i-0abc", f"warmswarm.cache-volume={VOLUME_ID}"]


@pytest.mark.parametrize("exit_code", [1, 8])
def test_a_hot_attached_volume_that_cannot_be_read_is_never_formatted_and_never_named(
    tmp_path: Path, exit_code: int
) -> None:
    device = image(tmp_path)  # blank: only the probe's failure protects it
    before = device.read_bytes()
    fake_bin = tmp_path / "fake-blkid"
    fake_bin.mkdir()
    blkid = fake_bin / "blkid"
    blkid.write_text(f"#!/bin/sh\necho 'blkid: read error' >&2\nexit {exit_code}\n")
    blkid.chmod(blkid.stat().st_mode | stat.S_IXUSR)

    done = run_script(
        tmp_path, device, tagged=VOLUME_ID, mode="hot", path=f"{fake_bin}:{tmp_path / 'bin'}:{os.environ['PATH']}"
    )

    assert done.returncode == 1
    assert "this machine takes no work for it" in done.stderr
    assert device.read_bytes() == before
    assert not (tmp_path / "mounted").exists()
    assert not (tmp_path / "daemon.json").exists(), "the node's labels never name the volume"
    assert not (tmp_path / "systemctl").exists()


def test_a_hot_attached_volume_holding_raw_data_is_refused(tmp_path: Path) -> None:
    device = image(tmp_path, content=b"an owner's raw data, no filesystem here " * 100)
    before = device.read_bytes()

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="hot")

    assert done.returncode == 1
    assert "not formatting it" in done.stderr
    assert device.read_bytes() == before
    assert not (tmp_path / "daemon.json").exists()


def test_a_disk_that_is_not_the_tagged_owners_volume_is_left_alone_on_a_running_machine(tmp_path: Path) -> None:
    device = image(tmp_path)  # attached, but the instance's tag names no volume (nobody claimed the machine)

    done = run_script(tmp_path, device, tagged="", mode="hot")

    assert done.returncode == 0, done.stderr
    assert "left alone" in done.stderr
    assert not (tmp_path / "mounted").exists()
    assert not (tmp_path / "daemon.json").exists()
    assert not (tmp_path / "systemctl").exists()


def test_an_unknown_mode_changes_nothing(tmp_path: Path) -> None:
    device = image(tmp_path)

    done = run_script(tmp_path, device, tagged=VOLUME_ID, mode="cold")

    assert done.returncode == 64
    assert not (tmp_path / "mounted").exists()
