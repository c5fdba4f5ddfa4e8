"""The per-boot scrub of a recycled machine (node_scrub.sh) on real files: what it removes from a Docker data root,
what it keeps, when it writes the proof label and when it refuses.

The data root is a tree laid out as Docker 20.10's (overlay2 and vfs graph drivers, layerdb mounts, swarm,
volumes). Only the metadata service (curl) and `mountpoint` are stand-ins on PATH; rm, find and python3 are real.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest

SCRIPT = str(resources.files("warmswarm_autoscaling").joinpath("node_scrub.sh"))
OTHER_LABELS = ["warmswarm.instance-id=i-0abc", "warmswarm.cache-volume=vol-0abc", "ami.gpu=yes"]
CONTAINER = "c0" * 32
OVERLAY_RW = "a1" * 32
VFS_CONTAINER = "c1" * 32
VFS_RW = "b2" * 32
IMAGE_LAYER = "e5" * 32


@dataclass(frozen=True)
class Machine:
    """A stopped recycled machine's root disk: its data root, cache path and daemon.json, and the stand-ins' dir."""

    tmp: Path

    @property
    def data(self) -> Path:
        return self.tmp / "docker"

    @property
    def cache(self) -> Path:
        return self.tmp / "cache"

    @property
    def daemon_json(self) -> Path:
        return self.tmp / "daemon.json"

    @property
    def tag_file(self) -> Path:
        return self.tmp / "imds-scrub-tag"

    def labels(self) -> list[str]:
        config: dict[str, list[str]] = json.loads(self.daemon_json.read_text())
        return config["labels"]


def put(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def owners_machine(tmp_path: Path, *, proof: str | None = None) -> Machine:
    """What an owner's node leaves: a container on overlay2 and one on vfs (each with a writable and an init layer),
    a named and an anonymous volume, the swarm worker's task db, a file in the cache path; and what must stay:
    an image layer on each driver, the image store, the swarm identity."""
    machine = Machine(tmp_path)
    data = machine.data
    for container in (CONTAINER, VFS_CONTAINER):
        put(data / "containers" / container / "config.v2.json", '{"Config": {"Env": ["TOKEN=owners-secret"]}}')
        put(data / "containers" / container / f"{container}-json.log", '{"log": "owner output"}')
    # overlay2: the container's writable layer and init layer, each with its short link in l/.
    for layer, link in ((OVERLAY_RW, "RWLINK"), (f"{OVERLAY_RW}-init", "INITLINK"), (IMAGE_LAYER, "IMGLINK")):
        put(data / "overlay2" / layer / "link", link)
        put(data / "overlay2" / layer / "diff" / ("written-by-owner" if layer == OVERLAY_RW else "f"))
        (data / "overlay2" / "l").mkdir(parents=True, exist_ok=True)
        (data / "overlay2" / "l" / link).symlink_to(f"../{layer}/diff")
    mounts = data / "image" / "overlay2" / "layerdb" / "mounts" / CONTAINER
    put(mounts / "mount-id", OVERLAY_RW)
    put(mounts / "init-id", f"{OVERLAY_RW}-init")
    put(data / "image" / "overlay2" / "layerdb" / "sha256" / "f00d" / "cache-id", IMAGE_LAYER)
    put(data / "image" / "overlay2" / "imagedb" / "content" / "sha256" / "beef", "{}")
    put(data / "image" / "overlay2" / "repositories.json", '{"Repositories": {"sandbox": {}}}')
    # vfs: a container whose image layer is also vfs's.
    put(data / "vfs" / "dir" / VFS_RW / "written-by-owner")
    put(data / "vfs" / "dir" / f"{VFS_RW}-init" / "etc" / "hostname")
    put(data / "vfs" / "dir" / IMAGE_LAYER / "bin" / "sh")
    vfs_mounts = data / "image" / "vfs" / "layerdb" / "mounts" / VFS_CONTAINER
    put(vfs_mounts / "mount-id", VFS_RW)
    put(vfs_mounts / "init-id", f"{VFS_RW}-init")
    put(data / "volumes" / "owners-data" / "_data" / "results.csv", "secret,1")
    put(data / "volumes" / ("d" * 64) / "_data" / "anonymous")
    put(data / "volumes" / "metadata.db", "owners-data")
    put(data / "swarm" / "worker" / "tasks.db", "task specs")
    put(data / "swarm" / "certificates" / "swarm-node.crt", "identity")
    put(data / "swarm" / "state.json", "[]")
    put(data / "swarm" / "docker-state.json", "{}")
    put(data / "tmp" / "docker-import-1" / "layer.tar")
    put(data / "containerd" / "daemon" / "io.containerd.metadata.v1.bolt" / "meta.db", f"{CONTAINER} TOKEN=x")
    put(data / "network" / "files" / "local-kv.db", f"endpoint of {CONTAINER}")
    put(machine.cache / "owner" / "cached.bin", "owner's cache")
    labels = OTHER_LABELS + ([f"warmswarm.scrubbed={proof}"] if proof else [])
    put(machine.daemon_json, json.dumps({"labels": labels, "default-runtime": "runc"}))
    return machine


def tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def scrub(
    machine: Machine,
    *,
    tag: str | None = None,
    imds: tuple[str, int] | None = None,
    cache_mounted: bool = False,
) -> subprocess.CompletedProcess[str]:
    """node_scrub.sh with the sandbox's tag file (`tag`, None: no tag), or with the metadata service (`imds`: the
    stand-in curl's body and HTTP status; status 0: it cannot connect). `cache_mounted`: `mountpoint` says yes."""
    bin_dir = machine.tmp / "bin"
    tool(bin_dir, "mountpoint", "exit 0\n" if cache_mounted else "exit 1\n")
    if imds is not None:
        body, status = imds
        answer = f'printf "%s\\n%s" "{body}" {status}\n' if status else "exit 7\n"
        # The token request first (-X PUT), then the tag with -w '\n%{http_code}' (what the script asks for).
        tool(bin_dir, "curl", f'case "$*" in *api/token*) echo token; exit 0 ;; esac\n{answer}')
    machine.tag_file.unlink(missing_ok=True)
    if tag is not None:
        machine.tag_file.write_text(tag)
    config = machine.tmp / "scrub.conf"
    tag_file = "" if imds is not None else str(machine.tag_file)
    config.write_text(
        f"data_root='{machine.data}'\ncache_path='{machine.cache}'\ndaemon_json='{machine.daemon_json}'\n"
        f"scrub_tag_file='{tag_file}'\ncache_conf='{machine.tmp / 'cache.conf'}'\n"
    )
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", SCRIPT, str(config)], capture_output=True, text=True, env=env, check=False)


def owners_leftovers(machine: Machine) -> list[Path]:
    """Whatever of the owner's is still on the disk (empty when scrubbed)."""
    data = machine.data
    candidates = [
        data / "containers" / CONTAINER,
        data / "containers" / VFS_CONTAINER,
        data / "overlay2" / OVERLAY_RW,
        data / "overlay2" / f"{OVERLAY_RW}-init",
        data / "overlay2" / "l" / "RWLINK",
        data / "overlay2" / "l" / "INITLINK",
        data / "image" / "overlay2" / "layerdb" / "mounts" / CONTAINER,
        data / "vfs" / "dir" / VFS_RW,
        data / "vfs" / "dir" / f"{VFS_RW}-init",
        data / "image" / "vfs" / "layerdb" / "mounts" / VFS_CONTAINER,
        data / "volumes" / "owners-data",
        data / "volumes" / ("d" * 64),
        data / "volumes" / "metadata.db",
        data / "swarm" / "worker" / "tasks.db",
        data / "tmp" / "docker-import-1",
        data / "containerd" / "daemon",
        data / "network" / "files" / "local-kv.db",
        machine.cache,
    ]
    return [path for path in candidates if os.path.lexists(path)]


def assert_images_and_identity_kept(machine: Machine) -> None:
    data = machine.data
    assert (data / "overlay2" / IMAGE_LAYER / "diff" / "f").is_file()
    assert (data / "overlay2" / "l" / "IMGLINK").resolve() == data / "overlay2" / IMAGE_LAYER / "diff"
    assert (data / "vfs" / "dir" / IMAGE_LAYER / "bin" / "sh").is_file()
    assert (data / "image" / "overlay2" / "layerdb" / "sha256" / "f00d" / "cache-id").read_text() == IMAGE_LAYER
    assert (data / "image" / "overlay2" / "imagedb" / "content" / "sha256" / "beef").is_file()
    assert (data / "image" / "overlay2" / "repositories.json").is_file()
    assert (data / "swarm" / "certificates" / "swarm-node.crt").read_text() == "identity"
    assert (data / "swarm" / "state.json").is_file()
    assert (data / "swarm" / "docker-state.json").is_file()
    # The dirs the daemon keeps its things in stay (emptied), with their modes.
    assert (data / "containers").is_dir()
    assert (data / "volumes").is_dir()
    assert (data / "swarm" / "worker").is_dir()


def test_a_pending_scrub_removes_the_owners_leftovers_keeps_images_and_identity_and_proves_it(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)

    done = scrub(machine, tag="pending-3")

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=3"]
    assert json.loads(machine.daemon_json.read_text())["default-runtime"] == "runc"
    assert "scrub of generation 3 done in" in done.stderr


def test_a_new_generation_replaces_the_old_proof(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="1")

    done = scrub(machine, tag="pending-2")

    assert done.returncode == 0, done.stderr
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=2"]


@pytest.mark.parametrize("tag", [None, "done-4"])
def test_no_tag_or_a_done_scrub_touches_nothing_and_writes_no_proof(tmp_path: Path, tag: str | None) -> None:
    machine = owners_machine(tmp_path)
    before = machine.daemon_json.read_text()
    everything = owners_leftovers(machine)

    done = scrub(machine, tag=tag)

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == everything  # nothing removed
    assert machine.daemon_json.read_text() == before


@pytest.mark.parametrize("tag", ["pending-", "pending-1x", "pending-../1", "done-", "done-two", "scrub-me", ""])
def test_a_malformed_tag_is_refused_and_nothing_is_removed(tmp_path: Path, tag: str) -> None:
    machine = owners_machine(tmp_path, proof="1")
    before = machine.daemon_json.read_text()
    everything = owners_leftovers(machine)

    done = scrub(machine, tag=tag)

    assert done.returncode == 1
    assert f"scrub tag is '{tag}'" in done.stderr
    assert owners_leftovers(machine) == everything
    assert machine.daemon_json.read_text() == before


def test_a_mounted_cache_path_is_refused_and_no_proof_is_written(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="1")

    done = scrub(machine, tag="pending-2", cache_mounted=True)

    assert done.returncode == 1
    assert "is a mountpoint" in done.stderr
    assert (machine.cache / "owner" / "cached.bin").read_text() == "owner's cache"  # a volume is never scrubbed
    assert machine.labels() == OTHER_LABELS  # the old proof is gone, no new one


def test_the_metadata_services_tag_is_read_a_404_is_no_tag_and_any_other_failure_refuses(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)
    before = machine.daemon_json.read_text()
    everything = owners_leftovers(machine)

    missing = scrub(machine, imds=("<html>Not Found</html>", 404))
    assert missing.returncode == 0, missing.stderr
    assert owners_leftovers(machine) == everything
    assert machine.daemon_json.read_text() == before

    for failure in (("", 0), ("oops", 500), ("", 401)):
        refused = scrub(machine, imds=failure)
        assert refused.returncode == 1, failure
        assert "docker does not start" in refused.stderr
        assert owners_leftovers(machine) == everything
        assert machine.daemon_json.read_text() == before

    scrubbed = scrub(machine, imds=("pending-7", 200))
    assert scrubbed.returncode == 0, scrubbed.stderr
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=7"]


def test_a_rerun_after_an_interrupted_scrub_finishes_the_job_and_proves_it(tmp_path: Path) -> None:
    # As a crash part-way leaves it: the proof dropped, the containers gone, the overlay2 layers gone but their
    # layerdb entry still there, the vfs container's layers untouched, volumes and the rest untouched.
    machine = owners_machine(tmp_path)
    everything = owners_leftovers(machine)
    put(machine.daemon_json, json.dumps({"labels": OTHER_LABELS}))
    for container in (CONTAINER, VFS_CONTAINER):
        subprocess.run(["rm", "-rf", str(machine.data / "containers" / container)], check=True)
    subprocess.run(["rm", "-rf", str(machine.data / "overlay2" / OVERLAY_RW)], check=True)
    (machine.data / "overlay2" / "l" / "RWLINK").unlink()
    assert len(owners_leftovers(machine)) == len(everything) - 4

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=1"]


def test_a_container_whose_writable_layer_cannot_be_found_is_refused(tmp_path: Path) -> None:
    # A daemon on containerd's image store keeps writable layers outside the data root: no layerdb mounts entry.
    machine = owners_machine(tmp_path)
    put(machine.data / "containers" / ("f" * 64) / "config.v2.json", "{}")

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 1
    assert "has no layerdb mounts entry" in done.stderr
    assert (machine.data / "containers" / ("f" * 64)).is_dir()
    assert machine.labels() == OTHER_LABELS


def test_a_daemon_logging_elsewhere_is_refused(tmp_path: Path) -> None:
    # journald keeps the containers' output in the journal, which this scrub does not empty: it cannot prove it.
    machine = owners_machine(tmp_path)
    put(machine.daemon_json, json.dumps({"labels": OTHER_LABELS, "log-driver": "journald"}))

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 1
    assert "log driver 'journald'" in done.stderr
    assert "warmswarm.scrubbed=1" not in machine.labels()
    assert (machine.data / "volumes" / "owners-data" / "_data" / "results.csv").exists()


def test_an_unknown_graph_driver_is_refused_without_a_proof(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)
    put(machine.data / "image" / "btrfs" / "layerdb" / "mounts" / ("9" * 64) / "mount-id", "9" * 64)

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 1
    assert "graph driver btrfs" in done.stderr
    assert "warmswarm.scrubbed=1" not in machine.labels()


def test_a_layer_id_that_is_a_path_is_refused(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)
    put(machine.data / "image" / "overlay2" / "layerdb" / "mounts" / CONTAINER / "mount-id", "../image")

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 1
    assert "is not an id" in done.stderr
    assert (machine.data / "image" / "overlay2" / "repositories.json").is_file()


def test_a_scrub_makes_the_cache_unit_forget_the_volume_its_launch_named(tmp_path: Path) -> None:
    """An owner-launched machine's cache config names that owner's volume; recycled, its next owner's volume comes from
    the instance's tag, so the config must name none (else the boot waits for, or mounts, the last owner's)."""
    machine = owners_machine(tmp_path)
    cache_conf = machine.tmp / "cache.conf"
    cache_conf.write_text("instance_id='i-1'\nvolume_id='vol-0123456789abcdef0'\ndevice_wait_s=300\n")

    assert scrub(machine, tag="done-1").returncode == 0
    assert "vol-0123456789abcdef0" in cache_conf.read_text(), "no scrub owed: nothing changes"
    done = scrub(machine, tag="pending-1")

    assert done.returncode == 0, done.stderr
    assert cache_conf.read_text() == "instance_id='i-1'\nvolume_id=''\ndevice_wait_s=300\n"
