"""The sandbox image: a static busybox and its applets as a root filesystem tar, imported with no registry."""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

SANDBOX_IMAGE = "warmswarm/sandbox:latest"


def find_busybox() -> Path:
    found = shutil.which("busybox")
    if found is None:
        raise FileNotFoundError("busybox is not installed: apt-get install busybox-static")
    return Path(found)


def build_rootfs_tar(busybox: Path) -> bytes:
    """bin/busybox plus one symlink per applet (sh, sleep, cat, …). It must be the static build:
    the image has no libc."""
    applets = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, mode in (("bin", 0o755), ("etc", 0o755), ("root", 0o700), ("tmp", 0o1777)):
            entry = tarfile.TarInfo(name)
            entry.type = tarfile.DIRTYPE
            entry.mode = mode
            tar.addfile(entry)
        tar.add(str(busybox), arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox" or "/" in applet:
                continue
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
    return buffer.getvalue()
