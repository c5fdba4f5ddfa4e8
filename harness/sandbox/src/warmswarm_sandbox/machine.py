"""What a sandbox machine boots with: its private address, its first daemon.json, its environment, its hooks."""

from __future__ import annotations

import json
import urllib.request
from importlib import resources
from pathlib import Path

from warmswarm_models import INSTANCE_SCRUB_TAG, INSTANCE_VOLUME_TAG

from warmswarm_sandbox import procs
from warmswarm_sandbox.layout import write_atomically
from warmswarm_sandbox.node import DEVICE_DIR_NAME, DOCKER_UNIT_SHOW_NAME, ENGINE_LABEL_INSTANCE_ID

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def addresses_of(strict_url: str, instance_id: str) -> str:
    """The instance's private address, as the strict EC2 layer gave it (it gives one now if it had none)."""
    with _NO_PROXY.open(f"{strict_url}/strict/addresses?instance_id={instance_id}", timeout=10) as answer:
        found = json.load(answer)
    address = found.get(instance_id)
    if not isinstance(address, str):
        raise RuntimeError(
            f"the strict EC2 layer at {strict_url} gives {instance_id} no address (started without --node-subnet?)"
        )
    return address


def first_daemon_json(root_dir: Path, instance_id: str) -> None:
    """The AMI's daemon.json: its daemon names its instance (an image that labels itself from the metadata)."""
    path = root_dir / "etc" / "docker" / "daemon.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"labels": [f"{ENGINE_LABEL_INSTANCE_ID}={instance_id}"]}, indent=2))


def volume_tag_file(root_dir: Path) -> Path:
    """Where the machine's metadata service answers its instance's `warmswarm:volume-id` tag (written at each boot)."""
    return root_dir / "imds" / "tags" / "warmswarm-volume-id"


def scrub_tag_file(root_dir: Path) -> Path:
    """Where the machine's metadata service answers its instance's `warmswarm:scrub` tag (written at each boot)."""
    return root_dir / "imds" / "tags" / "warmswarm-scrub"


def write_instance_tags(root_dir: Path, tags: dict[str, str]) -> None:
    """The instance's tags the boot scripts read, as the metadata service shows them now: its volume tag (read by
    node_cache.sh) and its scrub tag (read by node_scrub.sh); a file is absent when the instance has no such tag.

    Written at each boot and, while the machine runs, whenever a tag changes (a claim of a hot-buffer machine
    tags it, then attaches the volume): instance tags in the metadata service are live on EC2 too."""
    volume_id = tags.get(INSTANCE_VOLUME_TAG)
    _show(volume_tag_file(root_dir), volume_id or None)  # an empty volume tag names no volume
    _show(scrub_tag_file(root_dir), tags.get(INSTANCE_SCRUB_TAG))  # an empty scrub tag is shown: the scrub refuses it


def _show(path: Path, value: str | None) -> None:
    try:
        shown: str | None = path.read_text()
    except OSError:
        shown = None
    if value is not None:
        if shown != value:
            write_atomically(path, value)
    elif shown is not None:
        path.unlink(missing_ok=True)


def boot_env(*, instance_id: str, addr: str, run_dir: Path, root_dir: Path) -> dict[str, str]:
    """What the user data sees on a sandbox machine; on EC2 the WARMSWARM_ ones are unset (see node_boot.sh)."""
    shims = resources.files("warmswarm_sandbox").joinpath("bin")
    return {
        # The sandbox's systemctl first: it plays the parts of systemd the boot script uses.
        "PATH": f"{shims}:{procs.SYSTEM_PATH}",
        "HOME": "/root",
        "DOCKER_HOST": f"unix://{run_dir}/docker.sock",
        "WARMSWARM_RUN_DIR": str(run_dir),
        # Several machines share one network namespace here, so each must be told its address.
        "WARMSWARM_NODE_ADDR": addr,
        # Its attached volumes: a link per volume id to its disk, a loop device (EC2's /dev/disk/by-id names
        # an NVMe disk by the volume id without its dash).
        "WARMSWARM_DEVICE_DIR": f"{run_dir}/{DEVICE_DIR_NAME}",
        # The machine's own root disk (etc/docker, etc/warmswarm) and the metadata service's answer.
        "WARMSWARM_NODE_ROOT": str(root_dir),
        "WARMSWARM_INSTANCE_ID": instance_id,
        "WARMSWARM_VOLUME_TAG_FILE": str(volume_tag_file(root_dir)),
        "WARMSWARM_SCRUB_TAG_FILE": str(scrub_tag_file(root_dir)),
        # docker.service as systemd would run it (node.power_on writes it at each boot): the scrub reads Docker's
        # layout (its --data-root, --exec-root, --config-file) there; on EC2 from `systemctl show`.
        "WARMSWARM_DOCKER_UNIT_SHOW": f"cat {run_dir}/{DOCKER_UNIT_SHOW_NAME}",
    }
