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
    INSTANCE_LAUNCH_SETTINGS_TAG,
    INSTANCE_RECYCLE_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_SERVED_OWNERS_TAG,
    INSTANCE_STARTED_AT_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    LAUNCH_REASON_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_VOLUME_ID,
    OWNER_KEYS,
    ROLE_CACHE,
    ROLE_TAG,
    ROLE_WORKER,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_GROWN_AT_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    Owner,
    format_timestamp,
)
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

from warmswarm_autoscaling.actions import (
    ClaimBufferMachine,
    CreateVolume,
    ExpireVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    MarkScrubbed,
    RecycleMachine,
    ReleaseVolume,
    SetVolumeTtl,
    Start,
    StripOwner,
)

# What a renewal removes: a volume whose owner is back has no release and no expiry.
RELEASE_TAG_KEYS: Final = (VOLUME_RELEASED_AT_TAG, VOLUME_EXPIRES_AT_TAG)
_BUFFER: Final = "true"
_TRUE: Final = "true"
# EC2's limit on a tag's value.
TAG_VALUE_MAX_CHARS: Final = 256


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
    if launch.recyclable:
        tags[INSTANCE_RECYCLE_TAG] = _TRUE
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
    if claim.recyclable:
        tags[INSTANCE_RECYCLE_TAG] = _TRUE
    return tags


def launch_settings_tags(digest: str) -> dict[str, str]:
    """What every machine is launched with (readings.read_instance gives it back as launch_settings)."""
    return {INSTANCE_LAUNCH_SETTINGS_TAG: digest} if digest else {}


def recycle_tags(recycle: RecycleMachine) -> dict[str, str]:
    """The scrub a recycling machine's boots owe, its recycle count and the owners it served (for audit: the oldest
    dropped past EC2's 256 characters, the count keeps the number)."""
    served = " ".join((*recycle.earlier_owners, served_owner(recycle.owner)))
    while len(served) > TAG_VALUE_MAX_CHARS and " " in served:
        served = served.split(" ", 1)[1]
    return {
        INSTANCE_SCRUB_TAG: f"{SCRUB_PENDING_PREFIX}{recycle.token}",
        INSTANCE_RECYCLED_TAG: str(recycle.generation),
        INSTANCE_SERVED_OWNERS_TAG: served[-TAG_VALUE_MAX_CHARS:],
    }


def served_owner(owner: Owner) -> str:
    """An owner as the audit tag records it: user and project, not the node (a session's id says nothing more)."""
    return f"{owner.user_id}/{owner.project_id}"


# What a stripped machine loses: every tag that ties it to its last owner or their session. Of the tags written at its
# launch (launch_tags, batch_tags, launch_settings_tags), bind (bound_tags), claim (claim_tags), starts and stops
# (started_tags, warm_until_tags) and mark (recycle_tags), those that name the owner or their session are the owner's
# ids, the volume, the warm tier and warm-until, the claim and start moments, the batch, the recycle opt-in (theirs) —
# removed here — and the launch reason and Name, which strip_tags overwrites. What stays names nobody: the cluster, the
# role, the launch settings, the scrub token, the count, and the audit tag (warmswarm:served-owners), kept on purpose.
STRIPPED_INSTANCE_KEYS: Final = (
    *OWNER_KEYS,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    INSTANCE_STARTED_AT_TAG,
    INSTANCE_BATCH_TAG,
    INSTANCE_RECYCLE_TAG,
)
# And its nodes: the owner's labels and the machine's.
STRIPPED_NODE_LABELS: Final = (
    *OWNER_KEYS,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_VOLUME_ID,
)


def strip_tags(cluster: str, strip: StripOwner) -> tuple[dict[str, str], tuple[str, ...]]:
    """A stripped machine's tags to set (the buffer's, hot or warm, and a name without an owner) and the keys to
    remove (its owner's, STRIPPED_INSTANCE_KEYS; a warm one's buffer kind)."""
    kind = "hot-buffer" if strip.hot else "buffer"
    # The launch reason named the owner it was launched for: overwritten (not removed) with one that names nobody and
    # says the machine served someone, a trace readings.read_instance reads if its recycle count is ever lost.
    set_tags = {
        INSTANCE_BUFFER_TAG: _BUFFER,
        "Name": f"warmswarm-{cluster}-{kind}",
        LAUNCH_REASON_TAG: LAUNCH_REASON_STRIPPED,
    }
    remove: tuple[str, ...] = STRIPPED_INSTANCE_KEYS
    if strip.hot:
        set_tags[INSTANCE_BUFFER_KIND_TAG] = BUFFER_KIND_HOT
    else:
        remove = (*remove, INSTANCE_BUFFER_KIND_TAG)
    return set_tags, remove


def scrubbed_tags(mark: MarkScrubbed) -> dict[str, str]:
    """The scrub of this token is proven: the machine may be offered."""
    return {INSTANCE_SCRUB_TAG: f"{SCRUB_DONE_PREFIX}{mark.token}"}


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


def grown_tags(grown_at: float) -> dict[str, str]:
    """When the volume was last grown, or last refused a growth for one under way (AWS's clock): readings.read_volume
    gives it back as grown_at, and plan/grow.py asks nothing of it for six hours from then."""
    return {VOLUME_GROWN_AT_TAG: format_timestamp(grown_at)}


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
