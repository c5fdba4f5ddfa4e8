"""Reading tags, labels and constraints into the snapshot's typed fields, with bounds; the adapters call this.

Anything written by hand or by an older version may be unreadable: it becomes None (and, for a volume's
tags, is listed in `unreadable_tags`), never an exception, so one odd value never stops a cycle.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from sys import intern
from types import MappingProxyType

from warmswarm_models import (
    BUFFER_KIND_HOT,
    ENGINE_LABEL_CACHE_FILL,
    ENGINE_LABEL_CACHE_VOLUME,
    ENGINE_LABEL_INSTANCE_ID,
    ENGINE_LABEL_SCRUBBED,
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
    NODE_LABEL_INSTANCE_ID,
    SCRUB_DONE_PREFIX,
    SCRUB_PENDING_PREFIX,
    VOLUME_EXPIRES_AT_TAG,
    VOLUME_GROWN_AT_TAG,
    VOLUME_PINNED_TAG,
    VOLUME_RELEASED_AT_TAG,
    VOLUME_TTL_TAG,
    CachePolicy,
    InvalidCachePolicy,
    InvalidOwner,
    Owner,
    Resources,
    parse_constraints,
    parse_timestamp,
)
from warmswarm_models.cache import MAX_CACHE_TTL_S, MAX_WARM_TTL_S
from warmswarm_models.constraint import Constraint
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

from warmswarm_autoscaling.snapshot import CacheFill, Instance, Node, Scrub, Task, Volume, VolumeAttachment

# EC2 tag values are at most 255 characters; a longer "id" is not one of ours.
_ID_MAX_CHARS = 255
# More recycles than any machine lives through (recycle_max_owners bounds them far lower): a larger count or
# generation is not one we wrote. Its digits bound what is parsed: int() of an engine label's thousands of digits
# would raise, not read as unreadable.
_RECYCLED_MAX = 10_000
_RECYCLED_MAX_DIGITS = len(str(_RECYCLED_MAX))
# A file system's size in MiB: EBS's largest volume (64 TiB) has 8 digits; more is not one a node of ours reported.
_FILESYSTEM_MIB_MAX_DIGITS = 9
# A scrub token `<generation>.<epoch s>`: the generation's digits, a dot, and an epoch second (12 digits reach the
# year 33658). Longer is not one we wrote, and is not parsed.
_TOKEN_MAX_CHARS = _RECYCLED_MAX_DIGITS + 1 + 12


# The keys of tags and labels, and values such as a state or a zone, are the same few words on every machine: one
# string each, shared by all readings (sys.intern), not one per reading. At 10,000 machines that is some 15 MiB of
# the readings a process keeps. Values that differ per machine (ids, times) are not interned: that saves nothing.


def _frozen(tags: Mapping[str, str]) -> Mapping[str, str]:
    """Tags or labels as kept on a reading: read-only, with shared keys."""
    return MappingProxyType({intern(key): value for key, value in tags.items()})


def owner_in(labels: Mapping[str, str]) -> Owner | None:
    """The owner a node's labels (or a resource's tags) declare; None when they hold ids we cannot use."""
    try:
        return Owner.from_labels(labels)
    except InvalidOwner:
        return None


def read_node(
    *,
    id: str,
    hostname: str,
    state: str,
    availability: str,
    role: str,
    resources: Resources,
    labels: Mapping[str, str],
    engine_labels: Mapping[str, str],
    addr: str = "",
) -> Node:
    frozen = _frozen(labels)
    fill, fill_problem = cache_fill(engine_labels.get(ENGINE_LABEL_CACHE_FILL))
    return Node(
        id=id,
        hostname=hostname,
        state=intern(state),
        availability=intern(availability),
        role=intern(role),
        resources=resources,
        labels=frozen,
        owner=owner_in(frozen),
        labelled_instance_id=frozen.get(NODE_LABEL_INSTANCE_ID),
        engine_instance_id=engine_labels.get(ENGINE_LABEL_INSTANCE_ID) or None,
        addr=addr,
        mounted_volume_id=engine_labels.get(ENGINE_LABEL_CACHE_VOLUME) or None,
        scrubbed=_token(engine_labels.get(ENGINE_LABEL_SCRUBBED)),
        cache_fill=fill,
        cache_fill_problem=fill_problem,
    )


def cache_fill(raw: str | None) -> tuple[CacheFill | None, str]:
    """A node's cache fill label, `<volume id>:<used percent>[:<file system MiB>]` (a whole number 0..100, and the
    file system's size; a node script before it wrote no size): the figure, or None and why it cannot be read (""
    when there is no label). An unreadable figure grows nothing."""
    if raw is None:
        return None, ""
    volume_id, sep, percent = raw.strip().partition(":")
    percent, with_size, size_mib = percent.partition(":")
    if not sep or not 0 < len(volume_id) <= _ID_MAX_CHARS:
        return None, f"{ENGINE_LABEL_CACHE_FILL}={raw[:64]!r} is not <volume id>:<used percent>[:<file system MiB>]"
    # At most three digits: int() of thousands of digits would raise, not read as unreadable.
    if not (percent.isascii() and percent.isdigit()) or len(percent) > 3 or int(percent) > 100:
        return None, f"{ENGINE_LABEL_CACHE_FILL}={raw[:64]!r}: the used percent is not a whole number 0..100"
    if not with_size:
        return CacheFill(volume_id, int(percent)), ""
    if not (size_mib.isascii() and size_mib.isdigit()) or len(size_mib) > _FILESYSTEM_MIB_MAX_DIGITS:
        return None, f"{ENGINE_LABEL_CACHE_FILL}={raw[:64]!r}: the file system's size is not a whole number of MiB"
    return CacheFill(volume_id, int(percent), int(size_mib)), ""


def read_task(
    *,
    id: str,
    service_id: str,
    service_name: str,
    state: str,
    desired_state: str,
    reservations: Resources,
    constraints: Iterable[str],
    node_id: str | None,
    err: str,
    service_labels: Mapping[str, str],
    global_service: bool,
    created_at: float | None = None,
) -> Task:
    owner, owner_problem, placement = _placement(tuple(constraints))
    cache: CachePolicy | None
    try:
        cache, cache_problem = CachePolicy.from_labels(service_labels), ""
    except InvalidCachePolicy as error:
        cache, cache_problem = None, f"service {service_name}: {error}"
    return Task(
        id=id,
        service_id=service_id,
        service_name=service_name,
        state=intern(state),
        desired_state=intern(desired_state),
        reservations=reservations,
        owner=owner,
        owner_problem=owner_problem,
        constraints=placement,
        node_id=node_id,
        err=err,
        cache=cache,
        cache_problem=cache_problem,
        global_service=global_service,
        created_at=created_at,
    )


@functools.lru_cache(maxsize=65_536)
def _placement(constraints: tuple[str, ...]) -> tuple[Owner | None, str, tuple[Constraint, ...]]:
    """A task's owner (or why it has none) and its other constraints. Read once per distinct text: a
    service's tasks, and the same tasks each cycle, carry the same constraints."""
    try:
        owner, rest = parse_constraints(constraints)
    except InvalidOwner as error:
        return None, str(error), ()
    return owner, "", tuple(Constraint.parse(text) for text in rest)


def read_instance(
    *,
    id: str,
    instance_type: str,
    availability_zone: str,
    state: str,
    launched_at: float,
    tags: Mapping[str, str],
    private_ip: str = "",
) -> Instance:
    frozen = _frozen(tags)
    volume_id = frozen.get(INSTANCE_VOLUME_TAG, "")
    scrub = _scrub(frozen.get(INSTANCE_SCRUB_TAG))
    served_owners = tuple(frozen.get(INSTANCE_SERVED_OWNERS_TAG, "").split())
    return Instance(
        id=id,
        instance_type=intern(instance_type),
        availability_zone=intern(availability_zone),
        state=intern(state),
        launched_at=launched_at,
        owner=owner_in(frozen),
        volume_id=volume_id if 0 < len(volume_id) <= _ID_MAX_CHARS else None,
        private_ip=private_ip,
        tags=frozen,
        batch=frozen.get(INSTANCE_BATCH_TAG) or None,
        warm_ttl_s=_warm_ttl(frozen.get(INSTANCE_WARM_TTL_TAG)),
        warm_until=_moment(frozen.get(INSTANCE_WARM_UNTIL_TAG)),
        buffer=frozen.get(INSTANCE_BUFFER_TAG, "").strip().lower() == "true",
        hot=frozen.get(INSTANCE_BUFFER_KIND_TAG, "").strip().lower() == BUFFER_KIND_HOT,
        claimed_at=_moment(frozen.get(INSTANCE_CLAIMED_AT_TAG)),
        started_at=_moment(frozen.get(INSTANCE_STARTED_AT_TAG)),
        recyclable=frozen.get(INSTANCE_RECYCLE_TAG, "").strip().lower() == "true",
        recycled=_recycled(frozen, scrub, served_owners),
        scrub=scrub,
        served_owners=served_owners,
        launch_settings=frozen.get(INSTANCE_LAUNCH_SETTINGS_TAG, ""),
    )


def read_volume(
    *,
    id: str,
    availability_zone: str,
    state: str,
    size_gib: int,
    volume_type: str,
    created_at: float,
    tags: Mapping[str, str],
    attachments: Iterable[VolumeAttachment] = (),
) -> Volume:
    frozen = _frozen(tags)
    unreadable: set[str] = set()
    ttl_s = _ttl(frozen.get(VOLUME_TTL_TAG))
    released_at = _moment(frozen.get(VOLUME_RELEASED_AT_TAG))
    expires_at = _moment(frozen.get(VOLUME_EXPIRES_AT_TAG))
    grown_at = _moment(frozen.get(VOLUME_GROWN_AT_TAG))
    read = {
        VOLUME_TTL_TAG: ttl_s,
        VOLUME_RELEASED_AT_TAG: released_at,
        VOLUME_EXPIRES_AT_TAG: expires_at,
        VOLUME_GROWN_AT_TAG: grown_at,
    }
    for key, value in read.items():
        if key in frozen and value is None:
            unreadable.add(key)
    return Volume(
        id=id,
        availability_zone=intern(availability_zone),
        state=intern(state),
        size_gib=size_gib,
        volume_type=intern(volume_type),
        created_at=created_at,
        owner=owner_in(frozen),
        ttl_s=ttl_s,
        released_at=released_at,
        expires_at=expires_at,
        unreadable_tags=frozenset(unreadable),
        pinned=frozen.get(VOLUME_PINNED_TAG, "").strip().lower() == "true",
        grown_at=grown_at,
        attachments=tuple(attachments),
        tags=frozen,
    )


def _ttl(raw: str | None) -> int | None:
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return None
    value = int(raw)
    return value if value <= MAX_CACHE_TTL_S else None


def _warm_ttl(raw: str | None) -> int:
    """A warm tier we can read, else none: an unreadable tag must not keep a machine (and its cost) around."""
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return 0
    value = int(raw)
    return value if value <= MAX_WARM_TTL_S else 0


def _count(raw: str | None) -> int | None:
    """A recycle count as we write it (ASCII digits without a leading zero, at most _RECYCLED_MAX); None when absent
    or unreadable."""
    if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > _RECYCLED_MAX_DIGITS:
        return None
    value = int(raw)
    return value if value <= _RECYCLED_MAX and str(value) == raw else None


def _recycled(tags: Mapping[str, str], scrub: Scrub | None, served_owners: tuple[str, ...]) -> int | None:
    """How many times the machine was recycled, or None when that cannot be known, so that it served an unknown owner:
    the count tag unreadable; missing while a recycle trace is there (a scrub tag, the audit tag, a stripped launch
    reason); or contradicted by them (RecycleMachine writes the count and the scrub's generation alike, and adds one
    owner to the audit tag: a scrub of another generation, or more owners than recycles, means it was lost or set
    back; a count without a scrub tag, which every recycle writes, means that tag was lost). 0 only for a machine with
    no trace of a recycle at all."""
    raw = tags.get(INSTANCE_RECYCLED_TAG)
    if raw is None:
        traced = (
            scrub is not None
            or INSTANCE_SERVED_OWNERS_TAG in tags
            or tags.get(LAUNCH_REASON_TAG) == LAUNCH_REASON_STRIPPED
        )
        return None if traced else 0
    count = _count(raw)
    if count is None or len(served_owners) > count:
        return None
    if scrub is None:
        return count if count == 0 else None  # recycles without the scrub tag each of them wrote: it was lost
    if scrub.generation == 0 or scrub.generation != count:
        return None  # an unreadable scrub tag, or a scrub of another generation than the count
    return count


def _generation(raw: str | None) -> int | None:
    """A recycle generation (1, 2, ...); None when absent or unreadable. Never 0: an unreadable scrub tag reads as
    owed for generation 0, and nothing may prove that."""
    value = _count(raw)
    return value if value else None


def _token(raw: str | None) -> str | None:
    """A scrub token `<generation>.<mark's epoch s>` exactly as we write it (no sign, no leading zero, no space), or
    None: anything else, a legacy bare generation included, is no token and proves nothing."""
    if raw is None or len(raw) > _TOKEN_MAX_CHARS:
        return None
    generation, dot, moment = raw.partition(".")
    if not dot or _generation(generation) is None or str(int(generation)) != generation:
        return None
    if not (moment.isascii() and moment.isdigit()) or str(int(moment)) != moment:
        return None
    return raw


def _scrub(raw: str | None) -> Scrub | None:
    """The scrub a recycled machine owes ("pending-<n>.<t>") or proved ("done-<n>.<t>"); None without the tag. A legacy
    "pending-<n>" is owed with no token (no node can prove it: terminated at its start timeout), a legacy "done-<n>"
    done. Anything else is owed for generation 0 with no token: a hand-edited or garbled tag keeps the machine from
    every owner rather than letting it pass for scrubbed."""
    if raw is None:
        return None
    for prefix, done in ((SCRUB_PENDING_PREFIX, False), (SCRUB_DONE_PREFIX, True)):
        if raw.startswith(prefix):
            written = raw[len(prefix) :]
            token = _token(written)
            if token is not None:
                return Scrub(int(token.partition(".")[0]), done, token)
            legacy = _generation(written) if written.isascii() and written.isdigit() else None
            if legacy is not None and str(legacy) == written:
                return Scrub(legacy, done)
    return Scrub(0, False)


def _moment(raw: str | None) -> float | None:
    return None if raw is None else parse_timestamp(raw)
