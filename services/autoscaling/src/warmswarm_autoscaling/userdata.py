"""Renders the user data every launched instance runs once: it installs the per-boot cache script and joins."""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import string
from importlib import resources
from importlib.resources.abc import Traversable

from warmswarm_models import DEFAULT_NODE_CACHE_PATH

from warmswarm_autoscaling.ports import JoinInfo

# Join tokens and addresses are pasted into a shell script: accept only their known alphabets.
_TOKEN = re.compile(r"^SWMTKN-[A-Za-z0-9-]+$")
_ADDR = re.compile(r"^[A-Za-z0-9.:\[\]-]+$")


_VOLUME_ID = re.compile(r"^vol-[0-9a-f]+$")
_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
# An image reference's alphabet (registry host and port, repository, tag, digest): safe in single quotes.
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")


# The scripts a machine boots with (the user data's template and what it installs): a change of any is a new boot.
BOOT_SCRIPTS: tuple[str, ...] = ("node_boot.sh", "node_cache.sh", "node_cache_fill.sh", "node_scrub.sh")
# EC2 refuses user data over 16 KiB (before its base64). The user data goes without its comment lines and the
# per-boot scripts without theirs (the package keeps them), gzipped, which leaves room under it.
USER_DATA_LIMIT_BYTES = 16 * 1024
# How often a node reports its cache's fill and grows its filesystem to a grown disk (node_boot.sh says why 10 s).
DEFAULT_CACHE_FILL_PERIOD_S = 10
_COMMENT_LINE = re.compile(r"^[ \t]*#(?!!).*\n", re.MULTILINE)
# The per-boot scripts node_boot.sh installs, packed together; and the line that starts each one in the pack.
PER_BOOT_SCRIPTS: tuple[str, ...] = ("node_scrub.sh", "node_cache.sh", "node_cache_fill.sh")
_FILE_MARK = "#=warmswarm-file "


def boot_scripts_digest() -> str:
    """SHA-256 of the boot scripts' text, in BOOT_SCRIPTS' order (read from the package, at the wiring point)."""
    package = resources.files("warmswarm_autoscaling")
    digest = hashlib.sha256()
    for name in BOOT_SCRIPTS:
        digest.update(package.joinpath(name).read_bytes())
    return digest.hexdigest()


def render_user_data(
    join: JoinInfo,
    *,
    volume_id: str | None = None,
    cache_path: str = DEFAULT_NODE_CACHE_PATH,
    device_wait_s: int = 300,
    cache_fill_period_s: int = DEFAULT_CACHE_FILL_PERIOD_S,
    pull_images: tuple[str, ...] = (),
) -> str:
    if not _TOKEN.match(join.worker_token):
        raise ValueError("the swarm worker join token has an unexpected form; refusing to put it in a script")
    if not _ADDR.match(join.manager_addr):
        raise ValueError(f"manager address {join.manager_addr!r} is not host:port")
    if volume_id is not None and not _VOLUME_ID.match(volume_id):
        raise ValueError(f"{volume_id!r} is not an EBS volume id")
    for image in pull_images:
        if not _IMAGE.match(image):
            raise ValueError(f"image {image!r} is not an image reference; refusing to put it in a script")
    if cache_fill_period_s < 1:
        raise ValueError(f"cache fill period {cache_fill_period_s!r} s must be a whole number of seconds, at least 1")
    if not _PATH.match(cache_path):
        raise ValueError(f"cache path {cache_path!r} must be an absolute path of plain characters")
    package = resources.files("warmswarm_autoscaling")
    # Its comment lines out too, as the per-boot scripts' (the package keeps them): EC2 takes 16 KiB of user data.
    template = _COMMENT_LINE.sub("", package.joinpath("node_boot.sh").read_text())
    # safe_substitute: the script's own shell variables ($imds_token, ${WARMSWARM_NODE_ADDR:+…}) stay. Each
    # per-boot script goes in packed (base64, in single quotes): nothing in it is substituted.
    rendered = string.Template(template).safe_substitute(
        worker_token=join.worker_token,
        manager_addr=join.manager_addr,
        volume_id=volume_id or "",
        cache_path=cache_path,
        device_wait_s=str(int(device_wait_s)),
        cache_fill_period_s=str(int(cache_fill_period_s)),
        pull_images=" ".join(f"'{image}'" for image in pull_images),
        per_boot_scripts=_packed(package, PER_BOOT_SCRIPTS),
    )
    if len(rendered.encode()) > USER_DATA_LIMIT_BYTES:
        raise ValueError(f"the user data is {len(rendered.encode())} bytes; EC2 takes at most {USER_DATA_LIMIT_BYTES}")
    return rendered


def _packed(package: Traversable, names: tuple[str, ...]) -> str:
    """The per-boot scripts as the user data carries them, for node_boot.sh's `unpack`: each one's comment lines out
    (none of ours is inside a here-document that needs it) after a `#=warmswarm-file NAME` line, all in one gzip
    stream (mtime 0: the same scripts, the same user data; one stream shares their common words) in base64 lines.
    Their text is under a third of the size so: EC2 takes 16 KiB of user data."""
    text = "".join(
        f"{_FILE_MARK}{name}\n" + _COMMENT_LINE.sub("", package.joinpath(name).read_text()) for name in names
    )
    packed = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    return base64.encodebytes(packed).decode().rstrip("\n")
