"""Renders the user data (node boot script) every launched instance runs to join the swarm."""

from __future__ import annotations

import re
import string
from importlib import resources

from warmswarm_autoscaling.ports import JoinInfo

# Join tokens and addresses are pasted into a shell script: accept only their known alphabets.
_TOKEN = re.compile(r"^SWMTKN-[A-Za-z0-9-]+$")
_ADDR = re.compile(r"^[A-Za-z0-9.:\[\]-]+$")


def render_user_data(join: JoinInfo) -> str:
    if not _TOKEN.match(join.worker_token):
        raise ValueError("the swarm worker join token has an unexpected form; refusing to put it in a script")
    if not _ADDR.match(join.manager_addr):
        raise ValueError(f"manager address {join.manager_addr!r} is not host:port")
    template = resources.files("warmswarm_autoscaling").joinpath("node_boot.sh").read_text()
    # safe_substitute: the script's own shell variables ($imds_token, ${WARMSWARM_NODE_ADDR:+…}) stay.
    return string.Template(template).safe_substitute(worker_token=join.worker_token, manager_addr=join.manager_addr)
