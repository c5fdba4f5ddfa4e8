"""Host-level leftovers of powered-off daemons: mounts and cgroup directories, found and removed."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# Docker's cgroupfs driver puts a relative --cgroup-parent under the daemon's own cgroup, which
# differs per controller (memory may be nested, cpu not): look a few levels deep.
_CGROUP_SEARCH_DEPTH = 4


def _unescape_mount_path(raw: str) -> str:
    # /proc/self/mountinfo writes space, tab, newline and backslash as octal escapes.
    return raw.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def mounts_under(path: Path) -> list[Path]:
    """Mount points at or below path in our mount namespace, deepest first."""
    prefix = str(path).rstrip("/")
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_point = _unescape_mount_path(line.split()[4])
        if mount_point == prefix or mount_point.startswith(prefix + "/"):
            found.append(Path(mount_point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def holders_of_mounts_under(path: Path) -> dict[int, str]:
    """One process of each mount namespace (not ours) that still has a mount at or below path: pid -> the start of
    its command line. What keeps a lazily unmounted filesystem, and the loop device under it, alive."""
    prefix = str(path).rstrip("/")
    seen_namespaces = {os.readlink("/proc/self/ns/mnt")}
    found: dict[int, str] = {}
    for entry in sorted((e for e in Path("/proc").iterdir() if e.name.isdigit()), key=lambda e: int(e.name)):
        try:
            namespace = os.readlink(entry / "ns" / "mnt")
            if namespace in seen_namespaces:
                continue
            seen_namespaces.add(namespace)
            points = (_unescape_mount_path(line.split()[4]) for line in (entry / "mountinfo").read_text().splitlines())
            if any(point == prefix or point.startswith(prefix + "/") for point in points):
                args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
                # A script passed inline (a machine's init) says nothing here: the other arguments name the machine.
                found[int(entry.name)] = " ".join(arg for arg in args if "\n" not in arg)[:200]
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return found


def unmount_under(path: Path) -> None:
    # Lazy: a busy mount is detached now and freed when its last user goes.
    for mount_point in mounts_under(path):
        subprocess.run(["umount", "-l", str(mount_point)], check=False, capture_output=True)


def remove_tree(path: Path) -> None:
    """rm -rf, but never through a mount point: removing a bind-mounted folder's content would
    destroy data that is not ours."""
    unmount_under(path)
    if mounts_under(path):
        raise RuntimeError(f"refusing to remove {path}: something is still mounted below it")
    shutil.rmtree(path, ignore_errors=True)


def cgroup_dirs(name_prefix: str) -> list[Path]:
    """Cgroup directories whose name starts with name_prefix, in every controller, deepest first."""
    found: list[Path] = []
    if not CGROUP_ROOT.is_dir():
        return found
    for controller in CGROUP_ROOT.iterdir():
        if not controller.is_dir() or controller.is_symlink():
            continue
        base_depth = len(controller.parts)
        for current, dirs, _files in os.walk(controller):
            here = Path(current)
            if here.name.startswith(name_prefix):
                found.extend(Path(d) for d, _, _ in os.walk(here))
                dirs.clear()
            elif len(here.parts) - base_depth >= _CGROUP_SEARCH_DEPTH:
                dirs.clear()
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_cgroups(name_prefix: str, timeout_s: float = 5.0) -> list[Path]:
    """rmdir the cgroups (children first). A cgroup is busy until the kernel has finished
    killing its last task, so retry for a short while; returns what could not be removed."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = []
        for directory in cgroup_dirs(name_prefix):
            try:
                directory.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                left.append(directory)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


# -- network namespaces: each machine its own, all on one bridge in the sandbox's hub namespace --------

NETNS_DIR = Path("/run/netns")


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def add_hub(hub: str) -> None:
    """The sandbox's private network: a namespace holding one bridge, `br0`, and nothing else (no route out)."""
    if not (NETNS_DIR / hub).exists():
        _ip("netns", "add", hub)
    if subprocess.run(["ip", "-n", hub, "link", "show", "br0"], capture_output=True, check=False).returncode != 0:
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
    _ip("-n", hub, "link", "set", "br0", "up")


def add_machine_netns(netns: str, hub: str, port: str, address: str, prefix_len: int) -> None:
    """A machine's own network: its loopback and `eth0` at `address`, wired to the hub's bridge (as `port`)."""
    delete_netns(netns)  # what a crashed machine left
    _ip("netns", "add", netns)
    subprocess.run(["ip", "-n", hub, "link", "del", port], capture_output=True, check=False)
    _ip("-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
    _ip("-n", hub, "link", "set", port, "master", "br0", "up")
    _ip("-n", netns, "addr", "add", f"{address}/{prefix_len}", "dev", "eth0")
    _ip("-n", netns, "link", "set", "eth0", "up")
    _ip("-n", netns, "link", "set", "lo", "up")


def delete_netns(netns: str) -> None:
    """Remove a namespace (its end of a veth pair goes with it); a missing one is not an error."""
    if (NETNS_DIR / netns).exists():
        subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)


def netns_named(prefix: str) -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob(f"{prefix}*")) if NETNS_DIR.is_dir() else []
