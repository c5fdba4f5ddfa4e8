"""The fleet a cycle benchmark replays: per machine one owner's instance, node, service and task, made from a seed."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from warmswarm_models import (
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    ROLE_CACHE,
    ROLE_TAG,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    Owner,
    format_timestamp,
)

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
INSTANCE_TYPE = "t3.medium"
# Every machine is a t3.medium: 2 vCPUs and 4 GiB, as the node reports them.
NODE_NANO_CPUS = 2_000_000_000
NODE_MEMORY_BYTES = 4 * 2**30
# Each task reserves half its machine, so no machine is idle and none is short.
TASK_NANO_CPUS = 1_000_000_000
TASK_MEMORY_BYTES = 2**30
# Of the machines' count, this many cache volumes of owners who left, waiting out their TTL (the janitor's work).
VOLUMES_PER_MACHINE = 0.1
VOLUME_TTL_S = 7 * 86_400
# Tags ops put on every instance besides warmswarm's four (cluster and owner): ten in all, as the issue measured.
OPS_TAGS = {
    "team": "platform",
    "cost-center": "cc-4711",
    "environment": "production",
    "managed-by": "warmswarm",
    "aws:ec2launchtemplate:version": "1",
}
_ID_CHARS = string.ascii_lowercase + string.digits


@dataclass(frozen=True, slots=True)
class Machine:
    index: int
    instance_id: str
    node_id: str
    service_id: str
    task_id: str
    container_id: str
    owner: Owner
    zone: str
    private_ip: str
    launched_at_s: float  # epoch s
    node_version: int
    service_version: int
    task_version: int

    @property
    def hostname(self) -> str:
        return "ip-" + self.private_ip.replace(".", "-")

    def instance_tags(self, cluster: str) -> dict[str, str]:
        return {CLUSTER_TAG: cluster, **self.owner.labels(), "Name": f"warmswarm-{self.owner.user_id}", **OPS_TAGS}

    def node_labels(self) -> dict[str, str]:
        return {
            **self.owner.labels(),
            NODE_LABEL_INSTANCE_ID: self.instance_id,
            NODE_LABEL_INSTANCE_TYPE: INSTANCE_TYPE,
            NODE_LABEL_AVAILABILITY_ZONE: self.zone,
        }

    def engine_labels(self) -> dict[str, str]:
        return {ENGINE_LABEL_INSTANCE_ID: self.instance_id}


@dataclass(frozen=True, slots=True)
class CacheVolume:
    volume_id: str
    zone: str
    owner: Owner
    created_at_s: float  # epoch s
    released_at_s: float  # epoch s

    def tags(self, cluster: str) -> dict[str, str]:
        return {
            CLUSTER_TAG: cluster,
            ROLE_TAG: ROLE_CACHE,
            VOLUME_TTL_TAG: str(VOLUME_TTL_S),
            VOLUME_RELEASED_AT_TAG: format_timestamp(self.released_at_s),
            VOLUME_EXPIRES_AT_TAG: format_timestamp(self.released_at_s + VOLUME_TTL_S),
            **self.owner.labels(),
        }


@dataclass(frozen=True, slots=True)
class Fleet:
    cluster: str
    now_s: float  # epoch s: the moment the answers were made for
    machines: tuple[Machine, ...]
    volumes: tuple[CacheVolume, ...]


def fleet(machines: int, *, seed: int, now_s: float, cluster: str = "bench") -> Fleet:
    """`machines` busy machines of distinct owners and a tenth as many released cache volumes; the same seed and
    `now_s` give the same fleet, byte for byte."""
    rng = random.Random(seed)
    made = tuple(_machine(n, rng, now_s) for n in range(machines))
    volumes = tuple(_volume(n, rng, now_s) for n in range(int(machines * VOLUMES_PER_MACHINE)))
    return Fleet(cluster=cluster, now_s=now_s, machines=made, volumes=volumes)


def hex_id(rng: random.Random, chars: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(chars))


def swarm_id(rng: random.Random) -> str:
    """A swarm object id: 25 characters of [a-z0-9], as the swarm store makes them."""
    return "".join(rng.choice(_ID_CHARS) for _ in range(25))


def _machine(n: int, rng: random.Random, now_s: float) -> Machine:
    return Machine(
        index=n,
        instance_id="i-" + hex_id(rng, 17),
        node_id=swarm_id(rng),
        service_id=swarm_id(rng),
        task_id=swarm_id(rng),
        container_id=hex_id(rng, 64),
        owner=Owner(user_id=f"u{n}", project_id=f"p{n % 97}", node_id=f"un{n}"),
        zone=ZONES[n % len(ZONES)],
        private_ip=f"10.{n // 62_500 % 250}.{n // 250 % 250}.{n % 250 + 2}",
        # Launched between one hour and a week ago: past every start deadline and idle grace.
        launched_at_s=float(int(now_s) - rng.randrange(3_600, 7 * 86_400)),
        node_version=rng.randrange(1_000, 900_000),
        service_version=rng.randrange(1_000, 900_000),
        task_version=rng.randrange(1_000, 900_000),
    )


def _volume(n: int, rng: random.Random, now_s: float) -> CacheVolume:
    released_at_s = float(int(now_s) - rng.randrange(600, 86_400))
    return CacheVolume(
        volume_id="vol-" + hex_id(rng, 17),
        zone=ZONES[n % len(ZONES)],
        owner=Owner(user_id=f"gone{n}", project_id=f"p{n % 97}", node_id=f"gn{n}"),
        created_at_s=released_at_s - rng.randrange(3_600, 30 * 86_400),
        released_at_s=released_at_s,
    )
