"""The tags and labels the autoscaler writes, from the actions' typed fields: the one encoder (readings.py decodes).

Tags are the autoscaler's database (there is no other): what one replica writes here, the next one reads back
with readings.py, so each function below has its reading there, and tests/unit/test_tags.py checks each round
trip. Only apply.py calls these; no decision builds a tag string.
"""

from __future__ import annotations

from typing import Final

from warmswarm_models import (
    BUFFER_KIND_HOT,
    CLUSTER_TAG,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    INSTANCE_STARTED_AT_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    LAUNCH_REASON_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    ROLE_CACHE,
    ROLE_TAG,
    ROLE_WORKER,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    Owner,
    format_timestamp,
)

from warmswarm_autoscaling.actions import (
    ClaimBufferMachine,
    CreateVolume,
    ExpireVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    ReleaseVolume,
    SetVolumeTtl,
    Start,
)

# What a renewal removes: a volume whose owner is back has no release and no expiry.
RELEASE_TAG_KEYS: Final = (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG)
_BUFFER: Final = "true"


def launch_tags(cluster: str, launch: Launch) -> dict[str, str]:
    """A machine launched for one owner (or the buffer): readings.read_instance gives back its owner, volume,
    warm tier and buffer mark."""
    tags = {
        CLUSTER_TAG: cluster,
        ROLE_TAG: ROLE_WORKER,
        LAUNCH_REASON_TAG: launch.reason,
        "Name": f"warmswarm-{cluster}-{launch.owner}",
        **launch.owner.labels(),
    }
    if launch.volume_id:
        tags[INSTANCE_VOLUME_TAG] = launch.volume_id
    if launch.warm_ttl_s > 0:
        tags[INSTANCE_WARM_TTL_TAG] = str(launch.warm_ttl_s)
    if launch.purpose in ("buffer", "hot_buffer"):
        tags[INSTANCE_BUFFER_TAG] = _BUFFER
        tags["Name"] = f"warmswarm-{cluster}-buffer"
    if launch.purpose == "hot_buffer":
        tags[INSTANCE_BUFFER_KIND_TAG] = BUFFER_KIND_HOT
        tags["Name"] = f"warmswarm-{cluster}-hot-buffer"
    return tags


def batch_tags(cluster: str, batch: LaunchBatch) -> dict[str, str]:
    """The machines of one call, alike and without an owner (RunInstances tags every machine of a call the same):
    each is bound to an owner when its node joins (bound_tags then)."""
    return {
        CLUSTER_TAG: cluster,
        ROLE_TAG: ROLE_WORKER,
        LAUNCH_REASON_TAG: batch.reason,
        INSTANCE_BATCH_TAG: batch.client_token,
        "Name": f"warmswarm-{cluster}-batch",
    }


def bound_tags(owner: Owner) -> dict[str, str]:
    """A batch machine bound to its owner: the owner's ids, which make it theirs in readings.read_instance."""
    return owner.labels()


def claim_tags(claim: ClaimBufferMachine) -> dict[str, str]:
    """A buffer machine claimed by one owner: theirs for good, their volume and warm tier, a warm-until."""
    tags = claim.owner.labels()
    if claim.warm_until is not None:
        tags[INSTANCE_WARM_UNTIL_TAG] = format_timestamp(claim.warm_until)
    if claim.claimed_at is not None:
        tags[INSTANCE_CLAIMED_AT_TAG] = format_timestamp(claim.claimed_at)
    if claim.warm_ttl_s > 0:
        tags[INSTANCE_WARM_TTL_TAG] = str(claim.warm_ttl_s)
    if claim.volume_id is not None:
        tags[INSTANCE_VOLUME_TAG] = claim.volume_id
    return tags


def started_tags(start: Start) -> dict[str, str]:
    """When a stopped machine was started for its owner (readings.read_instance gives it back as started_at)."""
    return {} if start.started_at is None else {INSTANCE_STARTED_AT_TAG: format_timestamp(start.started_at)}


def warm_until_tags(warm_until: float) -> dict[str, str]:
    """Until when a stopped machine is kept for its owner, written before the stop."""
    return {INSTANCE_WARM_UNTIL_TAG: format_timestamp(warm_until)}


def volume_tags(cluster: str, create: CreateVolume) -> dict[str, str]:
    """A new cache volume: the cluster's, the owner's, and its TTL."""
    return {
        CLUSTER_TAG: cluster,
        ROLE_TAG: ROLE_CACHE,
        VOLUME_TTL_TAG: str(create.ttl_s),
        "Name": f"warmswarm-{cluster}-cache-{create.owner}",
        **create.owner.labels(),
    }


def release_tags(release: ReleaseVolume) -> dict[str, str]:
    """A released volume's clock: released at, expires at, and its TTL when it had none to read."""
    tags = {
        VOLUME_RELEASED_AT_TAG: format_timestamp(release.released_at),
        VOLUME_EXPIRES_AT_TAG: format_timestamp(release.expires_at),
    }
    if release.write_ttl_s is not None:
        tags[VOLUME_TTL_TAG] = str(release.write_ttl_s)
    return tags


def ttl_tags(change: SetVolumeTtl) -> dict[str, str]:
    return {VOLUME_TTL_TAG: str(change.ttl_s)}


def expiry_tags(expiry: ExpireVolume) -> dict[str, str]:
    return {VOLUME_EXPIRES_AT_TAG: format_timestamp(expiry.expires_at)}


def node_labels(label: LabelNode) -> dict[str, str]:
    """A joined node's labels: its owner's ids (what placement constraints test) and its machine's."""
    labels = label.owner.labels()
    labels[NODE_LABEL_INSTANCE_ID] = label.instance_id
    labels[NODE_LABEL_INSTANCE_TYPE] = label.instance_type
    labels[NODE_LABEL_AVAILABILITY_ZONE] = label.availability_zone
    if label.volume_id is not None:
        # The label says the data is there (the director reports it); written for the volume it was
        # launched for, and the planner acts on a node only where its boot says it mounted that volume.
        labels[NODE_LABEL_VOLUME_ID] = label.volume_id
    return labels
