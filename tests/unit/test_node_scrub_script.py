"""The per-boot scrub of a recycled machine (node_scrub.sh) on real files: what it removes from a Docker data root,
what it keeps, when it writes the proof label and when it refuses.

The data root is a tree laid out as Docker 20.10's (overlay2 and vfs graph drivers, layerdb mounts, swarm,
volumes), wherever Docker's configuration puts it; docker.service as `systemctl show` gives it is a file the test
writes (the script's docker_unit_show). Stand-ins on PATH: `mountpoint`, journald's `journalctl --rotate`, and in
some tests the metadata service's curl (others run the real curl against a loopback server); rm, find and python3
are real.
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

from .late_metadata import late_metadata_service

SCRIPT = str(resources.files("warmswarm_autoscaling").joinpath("node_scrub.sh"))
OTHER_LABELS = ["warmswarm.instance-id=i-0abc", "warmswarm.cache-volume=vol-0abc", "ami.gpu=yes"]
CONTAINER = "c0" * 32
OVERLAY_RW = "a1" * 32
VFS_CONTAINER = "c1" * 32
VFS_RW = "b2" * 32
IMAGE_LAYER = "e5" * 32


@dataclass(frozen=True)
class Machine:
    """A stopped recycled machine: its root disk (Docker's defaults under it), data root, cache path, daemon.json and
    per-boot run dir, docker.service as systemd runs it, and the stand-ins' dir."""

    tmp: Path
    data_root: str | None = None  # None: Docker's default, the root disk's /var/lib/docker

    @property
    def root(self) -> Path:
        return self.tmp / "root"

    @property
    def data(self) -> Path:
        return Path(self.data_root) if self.data_root else self.root / "var" / "lib" / "docker"

    @property
    def cache(self) -> Path:
        return self.tmp / "cache"

    @property
    def daemon_json(self) -> Path:
        return self.root / "etc" / "docker" / "daemon.json"

    @property
    def run_dir(self) -> Path:
        return self.tmp / "run" / "warmswarm"

    @property
    def unit_show(self) -> Path:
        return self.tmp / "docker.service.show"

    @property
    def tag_file(self) -> Path:
        return self.tmp / "imds-scrub-tag"

    def labels(self) -> list[str]:
        config: dict[str, list[str]] = json.loads(self.daemon_json.read_text())
        return config["labels"]

    def reboot(self) -> None:
        """A new boot: the run dir (a tmpfs) starts empty."""
        subprocess.run(["rm", "-rf", str(self.run_dir)], check=True)

    def runs_dockerd(self, argv: str, *, environment: str = "", environment_files: str = "") -> None:
        """docker.service's ExecStart as `systemctl show` gives it (drop-ins applied), with its environment."""
        self.unit_show.write_text(
            f"ExecStart={{ path=/usr/bin/dockerd ; argv[]={argv} ; ignore_errors=no ; start_time=[n/a] ; "
            "stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }\n"
            f"Environment={environment}\nEnvironmentFiles={environment_files}\n"
        )


def put(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def owners_machine(
    tmp_path: Path, *, proof: str | None = None, data_root: str | None = None, daemon: dict[str, object] | None = None
) -> Machine:
    """What an owner's node leaves: a container on overlay2 and one on vfs (each with a writable and an init layer),
    a named and an anonymous volume, the swarm worker's task db, a file in the cache path; and what must stay:
    an image layer on each driver, the image store, the swarm identity."""
    machine = Machine(tmp_path, data_root)
    data = machine.data
    for container in (CONTAINER, VFS_CONTAINER):
        put(data / "containers" / container / "config.v2.json", '{"Config": {"Env": ["TOKEN=owners-secret"]}}')
        put(data / "containers" / container / f"{container}-json.log", '{"log": "owner output"}')
    # overlay2: the container's writable layer and init layer, each with its short link in l/.
    for layer, link in ((OVERLAY_RW, "RWLINK"), (f"{OVERLAY_RW}-init", "INITLINK"), (IMAGE_LAYER, "IMGLINK")):
        put(data / "overlay2" / layer / "link", link)
        put(data / "overlay2" / layer / "diff" / ("written-by-owner" if layer == OVERLAY_RW else "f"))
        (data / "overlay2" / "l").mkdir(parents=True, exist_ok=True)
        if not (data / "overlay2" / "l" / link).is_symlink():  # an image's link stays through a scrub
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
    put(machine.daemon_json, json.dumps({"labels": labels, "default-runtime": "runc", **(daemon or {})}))
    # The last owner's boots on the root disk: the journal (the cache units' output names the volume), core dumps.
    journal = machine.root / "var" / "log" / "journal" / "0123abcd"
    put(journal / "system.journal", "warmswarm: volume vol-0abc mounted")
    put(journal / "system@0001-0002.journal", "owner's earlier boot")
    put(journal / "user-1000@0003-0004.journal~", "a corrupt file journald set aside")
    put(machine.root / "var" / "lib" / "systemd" / "coredump" / "core.python3.0.zst", "owner's memory")
    put(machine.root / "var" / "crash" / "_usr_bin_python3.0.crash", "owner's memory")
    put(machine.root / "var" / "log" / "warmswarm-cache-fill.timer.log", "cache fill of vol-0abc: 45 %")
    machine.runs_dockerd("/usr/bin/dockerd -H fd://")
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
    imds_url: str | None = None,
    cache_mounted: bool = False,
) -> subprocess.CompletedProcess[str]:
    """node_scrub.sh with the sandbox's tag file (`tag`, None: no tag), or with the metadata service: `imds` is a
    stand-in curl's body and HTTP status (status 0: it cannot connect), `imds_url` a real server the real curl asks.
    `cache_mounted`: `mountpoint` says yes. journalctl is journald's stand-in: --rotate archives the active files."""
    bin_dir = machine.tmp / "bin"
    tool(bin_dir, "mountpoint", "exit 0\n" if cache_mounted else "exit 1\n")
    tool(
        bin_dir,
        "journalctl",
        f'[ "$*" = --rotate ] || exit 64\necho rotated >> {machine.tmp / "journalctl"}\n'
        f"for f in {machine.root}/var/log/journal/*/system.journal; do\n"
        '  mv "$f" "${f%.journal}@rotated.journal"\ndone\n',
    )
    if imds is not None:
        body, status = imds
        answer = f'printf "%s\\n%s" "{body}" {status}\n' if status else "exit 7\n"
        # The token request first (-X PUT), then the tag with -w '\n%{http_code}' (what the script asks for).
        tool(bin_dir, "curl", f'case "$*" in *api/token*) echo token; exit 0 ;; esac\n{answer}')
    else:
        (bin_dir / "curl").unlink(missing_ok=True)
    machine.tag_file.unlink(missing_ok=True)
    if tag is not None:
        machine.tag_file.write_text(tag)
    config = machine.tmp / "scrub.conf"
    tag_file = "" if imds is not None or imds_url is not None else str(machine.tag_file)
    config.write_text(
        f"node_root='{machine.root}'\ncache_path='{machine.cache}'\ndaemon_json='{machine.daemon_json}'\n"
        f"scrub_tag_file='{tag_file}'\ncache_conf='{machine.tmp / 'cache.conf'}'\nrun_dir='{machine.run_dir}'\n"
        f"imds_url='{imds_url or 'http://127.0.0.1:9'}'\nimds_wait_s={30 if imds_url else 1}\n"
        f"docker_unit_show='cat {machine.unit_show}'\n"
        # The old script's hard-coded data root (Docker's default): Docker's own configuration must win over it.
        f"data_root='{machine.root / 'var' / 'lib' / 'docker'}'\n"
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
    journal = machine.root / "var" / "log" / "journal" / "0123abcd"
    candidates += [
        journal / "system@0001-0002.journal",
        journal / "system@rotated.journal",
        journal / "user-1000@0003-0004.journal~",
        machine.root / "var" / "lib" / "systemd" / "coredump" / "core.python3.0.zst",
        machine.root / "var" / "crash" / "_usr_bin_python3.0.crash",
    ]
    timer_log = machine.root / "var" / "log" / "warmswarm-cache-fill.timer.log"
    return [path for path in candidates if os.path.lexists(path)] + (
        [timer_log] if timer_log.exists() and timer_log.read_text() else []
    )


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


TOKEN = "3.1765000000"  # generation 3, marked at 1765000000 (AWS's clock, whole seconds)


def owed(token: str = TOKEN) -> str:
    return f"pending-{token}"


def test_a_pending_scrub_removes_the_owners_leftovers_keeps_images_and_identity_and_proves_it(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]
    assert json.loads(machine.daemon_json.read_text())["default-runtime"] == "runc"
    assert f"scrub of token {TOKEN} done in" in done.stderr
    # The journal: rotated (journald keeps writing its active file), then every archived file removed.
    assert (tmp_path / "journalctl").read_text() == "rotated\n"
    assert (machine.root / "var" / "log" / "journal" / "0123abcd").is_dir()
    assert (machine.run_dir / "scrubbed").read_text() == f"{TOKEN}\n"


def test_a_new_token_replaces_the_old_proof(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="1.1764000000")

    done = scrub(machine, tag="pending-2.1765000000")

    assert done.returncode == 0, done.stderr
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=2.1765000000"]


# The probe: a proof on the disk made the scrub remove nothing. The same token's (a count set back to a value
# whose mark is on the disk cannot happen with tokens, but a reboot can), another token's, a later generation's.
@pytest.mark.parametrize("proof", [TOKEN, "3.1764000000", "9.1765000001", "3"])
def test_a_proof_on_the_disk_never_skips_the_scrub(tmp_path: Path, proof: str) -> None:
    machine = owners_machine(tmp_path, proof=proof)

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


def test_a_reboot_while_the_scrub_is_owed_scrubs_again(tmp_path: Path) -> None:
    """The machine scrubbed and proved its token, then rebooted before the autoscaler marked it (the tag still reads
    pending): whatever is on the disk now was never proven gone, so this boot scrubs again."""
    machine = owners_machine(tmp_path)
    assert scrub(machine, tag=owed()).returncode == 0
    owners_machine(tmp_path, proof=TOKEN)  # written on the disk after the proof, by whoever held the machine
    machine.reboot()

    again = scrub(machine, tag=owed())

    assert again.returncode == 0, again.stderr
    assert f"scrub of token {TOKEN} done in" in again.stderr
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


def test_a_second_run_in_the_same_boot_leaves_the_next_owners_work_and_keeps_the_proof(tmp_path: Path) -> None:
    """Found by make bench-tiers: a hot claim restarts the daemon, which runs its required units again while the tag
    still reads pending. What is on the machine after this boot's proof is its next owner's."""
    machine = owners_machine(tmp_path)
    assert scrub(machine, tag=owed()).returncode == 0
    owners_machine(tmp_path, proof=TOKEN)  # the next owner's session, in the same boot
    next_owners = owners_leftovers(machine)

    again = scrub(machine, tag=owed())

    assert again.returncode == 0, again.stderr
    assert "done in this boot already" in again.stderr
    assert owners_leftovers(machine) == next_owners
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


def test_this_boots_marker_of_another_token_is_not_honoured(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="2.1764000000")
    put(machine.run_dir / "scrubbed", "2.1764000000\n")

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


def test_a_legacy_tag_without_its_moment_is_refused_readably(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="1")
    everything = owners_leftovers(machine)

    done = scrub(machine, tag="pending-1")

    assert done.returncode == 1
    assert "from before scrub tokens (pending-<n>.<t>)" in done.stderr
    assert "docker does not start" in done.stderr
    assert owners_leftovers(machine) == everything


@pytest.mark.parametrize("tag", [None, "done-4.1765000000", "done-4"])
def test_no_tag_or_a_done_scrub_touches_nothing_and_writes_no_proof(tmp_path: Path, tag: str | None) -> None:
    machine = owners_machine(tmp_path)
    before = machine.daemon_json.read_text()
    everything = owners_leftovers(machine)

    done = scrub(machine, tag=tag)

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == everything  # nothing removed
    assert machine.daemon_json.read_text() == before


@pytest.mark.parametrize(
    "tag",
    [
        "pending-",
        "pending-1x",
        "pending-../1",
        "pending-1.",
        "pending-.5",
        "pending-1.2.3",
        "pending-1.5e9",
        "done-",
        "done-two",
        "done-1.x",
        "scrub-me",
        "",
    ],
)
def test_a_malformed_tag_is_refused_and_nothing_is_removed(tmp_path: Path, tag: str) -> None:
    machine = owners_machine(tmp_path, proof="1.1")
    before = machine.daemon_json.read_text()
    everything = owners_leftovers(machine)

    done = scrub(machine, tag=tag)

    assert done.returncode == 1
    assert f"scrub tag is '{tag}'" in done.stderr
    assert owners_leftovers(machine) == everything
    assert machine.daemon_json.read_text() == before


def test_a_mounted_cache_path_is_refused_and_no_proof_is_written(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof="1.1")

    done = scrub(machine, tag=owed(), cache_mounted=True)

    assert done.returncode == 1
    assert "is a mountpoint" in done.stderr
    assert (machine.cache / "owner" / "cached.bin").read_text() == "owner's cache"  # a volume is never scrubbed
    assert machine.labels() == OTHER_LABELS  # the old proof is gone, no new one
    assert not (machine.run_dir / "scrubbed").exists()


def test_the_metadata_services_tag_is_read_a_404_is_no_tag_and_no_answer_in_time_refuses(tmp_path: Path) -> None:
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
        assert "still after 1 s" in refused.stderr
        assert "docker does not start" in refused.stderr
        assert owners_leftovers(machine) == everything
        assert machine.daemon_json.read_text() == before

    scrubbed = scrub(machine, imds=(owed("7.1765000000"), 200))
    assert scrubbed.returncode == 0, scrubbed.stderr
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, "warmswarm.scrubbed=7.1765000000"]


def test_a_metadata_service_that_refuses_then_hangs_then_answers_still_gets_the_machine_scrubbed(
    tmp_path: Path,
) -> None:
    machine = owners_machine(tmp_path)
    with late_metadata_service({"tags/instance/warmswarm:scrub": owed()}) as imds:
        done = scrub(machine, imds_url=imds.url)

    assert done.returncode == 0, done.stderr
    # A try was held past its bound and cut off (the hang), and the retry was answered: no wall-clock bound is
    # asserted, the service's own record says what happened (the suite's load stretches any timing).
    assert imds.hung.is_set()
    assert imds.served == ["tags/instance/warmswarm:scrub"]
    assert owners_leftovers(machine) == []
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


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

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)
    assert machine.labels() == [*OTHER_LABELS, f"warmswarm.scrubbed={TOKEN}"]


def test_a_container_whose_writable_layer_cannot_be_found_is_refused(tmp_path: Path) -> None:
    # A daemon on containerd's image store keeps writable layers outside the data root: no layerdb mounts entry.
    machine = owners_machine(tmp_path)
    put(machine.data / "containers" / ("f" * 64) / "config.v2.json", "{}")

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert "has no layerdb mounts entry" in done.stderr
    assert (machine.data / "containers" / ("f" * 64)).is_dir()
    assert machine.labels() == OTHER_LABELS


def test_an_unknown_graph_driver_is_refused_without_a_proof(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)
    put(machine.data / "image" / "btrfs" / "layerdb" / "mounts" / ("9" * 64) / "mount-id", "9" * 64)

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert "graph driver btrfs" in done.stderr
    assert f"warmswarm.scrubbed={TOKEN}" not in machine.labels()


def test_a_layer_id_that_is_a_path_is_refused(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path)
    put(machine.data / "image" / "overlay2" / "layerdb" / "mounts" / CONTAINER / "mount-id", "../image")

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert "is not an id" in done.stderr
    assert (machine.data / "image" / "overlay2" / "repositories.json").is_file()


def test_a_scrub_makes_the_cache_unit_forget_the_volume_its_launch_named(tmp_path: Path) -> None:
    """An owner-launched machine's cache config names that owner's volume; recycled, its next owner's volume comes from
    the instance's tag, so the config must name none (else the boot waits for, or mounts, the last owner's)."""
    machine = owners_machine(tmp_path)
    cache_conf = machine.tmp / "cache.conf"
    cache_conf.write_text("instance_id='i-1'\nvolume_id='vol-0123456789abcdef0'\ndevice_wait_s=300\n")

    assert scrub(machine, tag="done-1.1").returncode == 0
    assert "vol-0123456789abcdef0" in cache_conf.read_text(), "no scrub owed: nothing changes"
    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert cache_conf.read_text() == "instance_id='i-1'\nvolume_id=''\ndevice_wait_s=300\n"


# -- Docker's effective configuration: daemon.json and docker.service as systemd runs it --


def test_a_data_root_set_in_daemon_json_is_scrubbed_there(tmp_path: Path) -> None:
    """The issue's probe: with data-root elsewhere the old scrub emptied /var/lib/docker and proved a machine on which
    18 of the owner's things remained."""
    elsewhere = str(tmp_path / "srv" / "docker")
    machine = owners_machine(tmp_path, data_root=elsewhere, daemon={"data-root": elsewhere})
    assert len(owners_leftovers(machine)) > 18

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)
    assert f"data root {elsewhere}," in done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        "/usr/bin/dockerd -H fd:// --data-root {data}",
        "/usr/bin/dockerd -H fd:// --data-root={data} --log-driver=local --log-opt max-size=10m",
        "/usr/bin/dockerd -g {data} -s overlay2 --live-restore --iptables=false",
        "/usr/bin/dockerd -H fd:// $DOCKER_OPTS",
        "/usr/bin/dockerd -H fd:// ${STORAGE}",
    ],
)
def test_a_data_root_set_in_dockers_unit_or_its_environment_is_scrubbed_there(tmp_path: Path, argv: str) -> None:
    data = tmp_path / "data-disk" / "docker"
    machine = owners_machine(tmp_path, data_root=str(data))
    defaults = machine.root / "etc" / "default" / "docker"
    put(defaults, f'# Debian\'s docker.service reads this\nDOCKER_OPTS="--data-root {data} --log-level warn"\n')
    machine.runs_dockerd(
        argv.replace("{data}", str(data)),
        environment=f"STORAGE=--data-root={data}",
        environment_files="/etc/default/docker (ignore_errors=yes)",
    )

    done = scrub(machine, tag=owed())

    assert done.returncode == 0, done.stderr
    assert owners_leftovers(machine) == []
    assert_images_and_identity_kept(machine)


@pytest.mark.parametrize(
    ("argv", "daemon", "reason"),
    [
        # A log driver in a systemd drop-in (ExecStart= reset, then a new one): output goes to the journal's owner.
        ("/usr/bin/dockerd -H fd:// --log-driver=journald", {}, "log driver 'journald'"),
        ("/usr/bin/dockerd -H fd:// --log-driver syslog", {}, "log driver 'syslog'"),
        ("/usr/bin/dockerd -H fd://", {"log-driver": "journald"}, "log driver 'journald'"),
        ("/usr/bin/dockerd -H fd:// --log-opt fluentd-address=x", {}, "log option 'fluentd-address'"),
        (
            "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock",
            {},
            "system containerd (/run/containerd/containerd.sock)",
        ),
        ("/usr/bin/dockerd -H fd://", {"containerd": "/run/containerd/containerd.sock"}, "system containerd"),
        # Debian's docker.io and docker-ce ship docker.service so: recycling needs a drop-in without --containerd.
        (
            "/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock $DOCKER_OPTS",
            {},
            "dockerd uses a system containerd",
        ),
        ("/usr/bin/dockerd -H fd://", {"features": {"containerd-snapshotter": True}}, "containerd's image store"),
        ("/usr/bin/dockerd -H fd:// --userns-remap=default", {}, "--userns-remap, which this scrub does not know"),
        ("/usr/bin/dockerd -H fd://", {"userns-remap": "default"}, "'userns-remap', which this scrub does not know"),
        ("/usr/bin/dockerd -H fd:// -s btrfs", {}, "storage driver btrfs"),
        ("/usr/bin/dockerd -H fd:// --config-file /etc/docker/other.json", {}, "dockerd reads /etc/docker/other.json"),
        ("/usr/bin/dockerd -H fd:// $((1+1))", {}, "cannot expand"),
        ("/usr/bin/containerd-shim-runc-v2", {}, "not dockerd"),
    ],
)
def test_a_docker_layout_the_scrub_does_not_fully_know_is_refused_with_its_reason(
    tmp_path: Path, argv: str, daemon: dict[str, object], reason: str
) -> None:
    machine = owners_machine(tmp_path, daemon=daemon, proof=TOKEN)
    machine.runs_dockerd(argv)
    everything = owners_leftovers(machine)

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert reason in done.stderr
    assert "docker does not start" in done.stderr
    assert owners_leftovers(machine) == everything
    assert machine.labels() == OTHER_LABELS, "the stale proof is gone and no new one is written"


def test_an_environment_file_the_unit_requires_but_is_missing_is_refused(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof=TOKEN)
    machine.runs_dockerd(
        "/usr/bin/dockerd -H fd:// $OPTIONS", environment_files="/etc/sysconfig/docker (ignore_errors=no)"
    )

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert "docker.service reads /etc/sysconfig/docker, which is missing" in done.stderr
    assert machine.labels() == OTHER_LABELS


def test_a_unit_whose_configuration_cannot_be_read_is_refused(tmp_path: Path) -> None:
    machine = owners_machine(tmp_path, proof=TOKEN)
    machine.unit_show.unlink()

    done = scrub(machine, tag=owed())

    assert done.returncode == 1
    assert "docker.service's configuration cannot be read" in done.stderr
    assert machine.labels() == OTHER_LABELS
