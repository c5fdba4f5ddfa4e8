"""The sandbox's EBS disks: a volume is a sparse file attached as a loop device; a failing disk answers reads EIO."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
MIB = 2**20
# The failing disk lives on its own small XFS filesystem, which is shut down once the disk is on it: XFS refuses
# to make a filesystem under 300 MiB; sparse, so it costs a few MiB of metadata.
_FAILING_FS_BYTES = 320 * MIB
_FAILING_DISK_BYTES = GIB
_FAILING_DISK_NAME = "failing-disk"
# How long a released loop device may stay bound while the kernel finishes unmounting the filesystems of the
# machines just powered off (their mount namespaces go with their last process, a little after it).
RELEASE_TIMEOUT_S = 10.0
_SYS_BLOCK = Path("/sys/block")
_RELEASE_POLL_S = 0.1
# A host's read of a volume mounts again when the loop device it mounted was released under it (files_on).
_READ_ATTEMPTS = 3


class DiskError(RuntimeError):
    """A loop device could not be made, found or released; the message says which and why."""


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DiskError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def make_backing(path: Path, size_bytes: int) -> bool:
    """A new volume's blocks: a sparse file of its size that reads as zeros, as a new EBS volume does. An existing
    file is never touched (it is a volume's data). True when it was made now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.ftruncate(fd, size_bytes)
    finally:
        os.close(fd)
    return True


def grow_backing(path: Path, size_bytes: int) -> bool:
    """A volume's blocks made larger, as EC2 grows a modified volume: the file extended (sparse, reads as zeros) to
    size_bytes. Never smaller, never a byte of what is there rewritten (ftruncate past the end only adds a hole).
    True when it grew now."""
    fd = os.open(path, os.O_WRONLY)
    try:
        if os.fstat(fd).st_size >= size_bytes:
            return False
        os.ftruncate(fd, size_bytes)
    finally:
        os.close(fd)
    return True


def refresh_capacity(device: str) -> None:
    """Tell the kernel a loop device's backing file grew (losetup -c): its size, as a machine reads it, is the
    file's now, without unbinding it from the filesystem mounted on it."""
    _run("losetup", "--set-capacity", device)


def device_bytes(device: str) -> int:
    """The size of a block device as the kernel sees it now (sysfs counts 512-byte sectors)."""
    return int(Path(_SYS_BLOCK, Path(device).name, "size").read_text()) * 512


@dataclass(frozen=True)
class Loop:
    """A bound loop device's backing file, and whether it is released already: the kernel detaches it when its
    last user (a mount) goes (autoclear, set by losetup -d on a busy device and by mount -o loop)."""

    back_file: Path
    released: bool
    read_only: bool  # only a host's read of a volume (files_on) binds one: never a machine's disk


def loops() -> dict[str, Loop]:
    """Every loop device bound on the host (/dev/loopN), as sysfs shows it (what `losetup --list` reads; read here
    without a process, as the boot watcher looks at every turn)."""
    found: dict[str, Loop] = {}
    for block in sorted(_SYS_BLOCK.glob("loop*")):
        try:
            back_file = (block / "loop" / "backing_file").read_text().rstrip("\n")
            autoclear = (block / "loop" / "autoclear").read_text().strip()
            read_only = (block / "ro").read_text().strip()
        except OSError:
            continue  # not bound (no loop/ dir), or released meanwhile
        # A backing file removed while bound is shown with " (deleted)".
        back_file = back_file.removesuffix(" (deleted)")
        if back_file:
            found[f"/dev/{block.name}"] = Loop(Path(back_file), released=autoclear == "1", read_only=read_only == "1")
    return found


def loops_under(folders: Iterable[Path]) -> dict[str, Loop]:
    """The loop devices whose backing file lies below one of these folders: the sandbox's own."""
    prefixes = [Path(os.path.realpath(folder)) for folder in folders]
    return {
        name: loop
        for name, loop in loops().items()
        if any(loop.back_file == prefix or prefix in loop.back_file.parents for prefix in prefixes)
    }


def loop_of(backing: Path, bound: dict[str, Loop] | None = None) -> str | None:
    """The (writable) loop device bound to this backing file, if any (`bound`: a listing already made)."""
    target = Path(os.path.realpath(backing))
    for name, loop in sorted((bound if bound is not None else loops()).items()):
        if loop.back_file == target and not loop.read_only:
            return name
    return None


def bind(backing: Path, bound: dict[str, Loop] | None = None) -> str:
    """The loop device of this backing file, bound now (losetup -f --show) if it has none: the volume's disk. One
    released but still held (its last mount not yet gone) is taken again: a second device over the same blocks
    would be a second disk with the same filesystem."""
    existing = loop_of(backing, bound)
    if existing is not None:
        return existing
    return _run("losetup", "--find", "--show", os.path.realpath(backing)).strip()


def _device_number(device: str) -> str | None:
    try:
        rdev = os.stat(device).st_rdev
    except FileNotFoundError:
        return None
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def mount_points_of(device: str, pid: int) -> list[str]:
    """Where the process `pid`'s mount namespace has this block device mounted, deepest first."""
    number = _device_number(device)
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return []  # the machine went off: its mounts went with it
    found = [line.split()[4] for line in lines if number is not None and line.split()[2] == number]
    return sorted(found, key=lambda point: point.count("/"), reverse=True)


def unbind(device: str, backing: Path, machine_pids: Iterable[int] = ()) -> None:
    """Take a volume's disk away: unmount it in each machine (by its init's pid) that has it mounted, then release
    the loop device (losetup -d, by name). A mount still held (a container's bind mount of the cache path) keeps
    the device until its last user goes: the kernel then releases it by itself (autoclear)."""
    for pid in machine_pids:
        for point in mount_points_of(device, pid):
            # Lazy: the machine's containers may still hold it; it is detached from the machine's tree now. In its
            # pid namespace too: umount reads /proc/self, and the machine's /proc is its own pid namespace's.
            subprocess.run(
                ["nsenter", "--target", str(pid), "--mount", "--pid", "--", "umount", "-l", point],
                capture_output=True,
                check=False,
            )
    # Only a device that is still this volume's: a released number may be another's by now.
    if loop_of(backing) == device:
        _run("losetup", "--detach", device)


def release_under(folders: list[Path], timeout_s: float = RELEASE_TIMEOUT_S) -> list[str]:
    """Release every loop device whose backing file lies below `folders` and wait until the kernel has let them
    go; the ones still bound after timeout_s (as "device (backing file)"), for the caller to report."""
    deadline_s = time.monotonic() + timeout_s
    while True:
        ours = loops_under(folders)
        for device, loop in ours.items():
            if not loop.released:
                with contextlib.suppress(DiskError):  # gone meanwhile
                    _run("losetup", "--detach", device)
        if not ours:
            return []
        if time.monotonic() >= deadline_s:
            return [f"{device} ({loop.back_file})" for device, loop in sorted(ours.items())]
        time.sleep(_RELEASE_POLL_S)


def failing_disk(image: Path, mount_dir: Path) -> str:
    """A block device every read of which fails with EIO, as a failing EBS volume's does; made once per sandbox.

    A loop device over a file on an XFS filesystem that is then shut down (xfs_io's `shutdown`): from then on the
    filesystem answers every read EIO, and so does the loop device over its file. Not device-mapper's `error`
    target (the kernel here has no device-mapper), not an unreadable file (root reads through any mode), not a
    device node without a driver (a major number free here may be a real disk's on another host)."""
    disk = mount_dir / _FAILING_DISK_NAME
    existing = loop_of(disk)
    if existing is not None:
        return existing
    make_backing(image, _FAILING_FS_BYTES)
    _run("mkfs.xfs", "-q", "-f", str(image))  # -f: the image is ours, made just now (or left by a failed try)
    mount_dir.mkdir(parents=True, exist_ok=True)
    _run("mount", "-o", "loop", str(image), str(mount_dir))
    make_backing(disk, _FAILING_DISK_BYTES)
    device = _run("losetup", "--find", "--show", str(disk)).strip()
    # Its name, for the release: once its filesystem is unmounted, losetup names its file only as "/failing-disk".
    (image.parent / f"{image.name}.loop").write_text(device)
    _run("xfs_io", "-x", "-c", "shutdown", str(mount_dir))
    return device


def failing_disk_device(mount_dir: Path) -> str | None:
    """The failing disk made in `mount_dir` (failing_disk), None until it is made."""
    return loop_of(mount_dir / _FAILING_DISK_NAME)


def release_failing_disk(image: Path) -> None:
    """Release the failing disk made over `image` (failing_disk), if there is one: by the name it was given."""
    try:
        device = (image.parent / f"{image.name}.loop").read_text().strip()
    except FileNotFoundError:
        return
    loop = loops().get(device)
    if loop is not None and loop.back_file.name == _FAILING_DISK_NAME and not loop.released:
        _run("losetup", "--detach", device)


def uuid_of(backing: Path) -> str | None:
    """The filesystem UUID on a volume's blocks (blkid -p on its backing file: read as the disk is, never
    changed); None when it holds no filesystem."""
    done = subprocess.run(
        ["blkid", "-p", "-s", "UUID", "-o", "value", str(backing)], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or None if done.returncode == 0 else None


def files_on(backing: Path, peek_dir: Path) -> dict[str, bytes] | None:
    """The regular files at the top of a volume's filesystem and their bytes, as the host reads them now; None when
    its blocks hold no filesystem. A bound volume is read through its own loop device: a machine that has it
    mounted shares the one filesystem, so what it wrote is seen at once. An unbound one is mounted read-only,
    without log replay and without claiming its UUID: reading it changes nothing, and a machine attaching it
    meanwhile still mounts it. A filesystem that is there and does not mount is a DiskError that says why."""
    peek_dir.mkdir(parents=True, exist_ok=True)
    try:
        for _ in range(_READ_ATTEMPTS):
            device = loop_of(backing)
            if device is not None:
                mount = ["mount", device, str(peek_dir)]
            else:
                mount = ["mount", "-o", "loop,ro,norecovery,nouuid", str(backing), str(peek_dir)]
            done = subprocess.run(mount, capture_output=True, text=True, check=False)
            if done.returncode == 0:
                try:
                    return {entry.name: entry.read_bytes() for entry in sorted(peek_dir.iterdir()) if entry.is_file()}
                finally:
                    _run("umount", str(peek_dir))
            # A released device (its machine just went: autoclear) is cleared by the kernel when its last mount
            # goes, which can be while we mount it ("can't read superblock"): read again, through what is bound now.
            if device is None or loop_of(backing) == device:
                break
        if uuid_of(backing) is None:
            return None
        target = Path(os.path.realpath(backing))
        holders = {name: loop for name, loop in loops().items() if loop.back_file == target}
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, check=False).stdout.splitlines()
        raise DiskError(
            f"{' '.join(mount)} exited {done.returncode}: {done.stderr.strip()}; the file's loop devices now: "
            f"{holders}; the kernel's last words: {kernel[-5:]}"
        )
    finally:
        with contextlib.suppress(OSError):
            peek_dir.rmdir()
