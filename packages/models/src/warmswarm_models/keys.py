"""Label and tag keys: the names the swarm, EC2 and both services agree on."""

from typing import Final

# The owner keys are used verbatim as swarm node labels, as the placement constraints
# `node.labels.<key>==<id>` and as EC2 tag keys, so one name means one thing everywhere.
OWNER_KEYS: Final = ("user_id", "project_id", "node_id")

# Set on the Docker daemon of every node we boot (by the instance's boot, from the
# instance metadata): the one reliable link from a swarm node to its EC2 instance.
ENGINE_LABEL_INSTANCE_ID: Final = "warmswarm.instance-id"
# Set on the node's daemon by its per-boot cache script, only once the owner's volume is mounted at
# the cache path in this boot: a node without it runs no cache work.
ENGINE_LABEL_CACHE_VOLUME: Final = "warmswarm.cache-volume"
# Set on the node's daemon by its cache script: how full the mounted cache volume's file system is, as
# `<volume id>:<used percent>:<file system MiB>` (a whole number 0..100; the file system's size, floored; a node script
# before the size wrote `<volume id>:<used percent>`). The volume id ties the figure to one volume: a label left
# from another volume (a machine recycled, a volume swapped) is never read for this one. The autoscaler grows a
# volume whose node reports it full enough (plan/grow.py), and not again while the size says its file system did not
# take up the last growth.
ENGINE_LABEL_CACHE_FILL: Final = "warmswarm.cache-fill"

# Node labels the autoscaler writes once a node has joined.
NODE_LABEL_INSTANCE_ID: Final = "warmswarm.instance-id"
NODE_LABEL_INSTANCE_TYPE: Final = "warmswarm.instance-type"
NODE_LABEL_AVAILABILITY_ZONE: Final = "warmswarm.availability-zone"

# EC2 tags. Everything warmswarm creates carries CLUSTER_TAG; we list by it and never
# touch a resource without it.
CLUSTER_TAG: Final = "warmswarm:cluster"
ROLE_TAG: Final = "warmswarm:role"
ROLE_WORKER: Final = "worker"
# Why the machine was launched, as the plan said it (it names the owner it was launched for): a recycled machine's strip
# overwrites it with LAUNCH_REASON_STRIPPED, which names nobody and says the machine served someone.
LAUNCH_REASON_TAG: Final = "warmswarm:launch-reason"
LAUNCH_REASON_STRIPPED: Final = "recycled: stripped of its last owner's tags for the buffer"
# On the machines one RunInstances started for several owners (the call's client token): they start
# without owner tags, each goes to an owner when its node joins, and gets that owner's tags then.
INSTANCE_BATCH_TAG: Final = "warmswarm:batch"
NODE_LABEL_VOLUME_ID: Final = "warmswarm.volume-id"

# Service labels the director writes: the owner's cache policy, read by the autoscaler.
SERVICE_LABEL_CACHE_ENABLED: Final = "warmswarm.cache.enabled"
SERVICE_LABEL_CACHE_TTL_S: Final = "warmswarm.cache.ttl-s"
SERVICE_LABEL_CACHE_SIZE_GIB: Final = "warmswarm.cache.size-gib"
SERVICE_LABEL_CACHE_VOLUME_TYPE: Final = "warmswarm.cache.volume-type"
# The largest the owner's cache volume may grow to, GiB (group property cache_max_size_gib); absent: no growth.
SERVICE_LABEL_CACHE_MAX_SIZE_GIB: Final = "warmswarm.cache.max-size-gib"
# The owner's warm tier (group property warm_ttl_s), on the service like the cache policy.
SERVICE_LABEL_WARM_TTL_S: Final = "warmswarm.warm-ttl-s"
# The request's groups whose properties made that policy, comma-separated in the request's order (group ids have
# no comma): a repeat of the request answers with the groups that applied when the service was made.
SERVICE_LABEL_GROUPS_APPLIED: Final = "warmswarm.groups-applied"

# EBS cache volumes carry CLUSTER_TAG, the owner keys, ROLE_TAG=ROLE_CACHE and these.
ROLE_CACHE: Final = "cache"
VOLUME_TTL_TAG: Final = "warmswarm:ttl-s"
VOLUME_RELEASED_AT_TAG: Final = "warmswarm:released-at"
VOLUME_EXPIRES_AT_TAG: Final = "warmswarm:expires-at"
# An operator's hold: a volume tagged `warmswarm:pinned=true` is never deleted by the janitor, whatever
# its expiry says (remove the tag to let it expire).
VOLUME_PINNED_TAG: Final = "warmswarm:pinned"
# When the autoscaler last asked EBS to grow the volume (format_timestamp, AWS's clock). AWS refuses a second
# modification of a volume within six hours of the last: kept on the volume, so that a restart or a new leader
# never asks again within them.
VOLUME_GROWN_AT_TAG: Final = "warmswarm:grown-at"
# On an instance: the cache volume it is launched for (attached once the instance runs).
INSTANCE_VOLUME_TAG: Final = "warmswarm:volume-id"
# On an instance, from its launch: how long it is kept stopped once idle (the warm tier); absent or 0: never.
INSTANCE_WARM_TTL_TAG: Final = "warmswarm:warm-ttl-s"
# On a machine launched for the warm buffer ("true"): stopped once its images are pulled, owned by nobody until
# an owner's first session claims it (owner tags added then; it never returns to the buffer).
INSTANCE_BUFFER_TAG: Final = "warmswarm:buffer"
# Beside INSTANCE_BUFFER_TAG: "hot" for a machine of the hot buffer, which stays running (joined, drained, its
# images pulled) instead of being stopped; absent: the warm buffer.
INSTANCE_BUFFER_KIND_TAG: Final = "warmswarm:buffer-kind"
BUFFER_KIND_HOT: Final = "hot"
# On a machine an owner claimed from a buffer (hot or warm): when (format_timestamp, AWS's clock); an arrival for
# buffers sized by demand. A hot claim's node gets work once it says the owner's volume is mounted, and it is given
# `hot_attach_s` from this moment to say so.
INSTANCE_CLAIMED_AT_TAG: Final = "warmswarm:claimed-at"
# On a machine the autoscaler started from stopped for its owner (a warm resume, or a warm-buffer claim's start):
# when (format_timestamp, AWS's clock), written just before the start. With claimed-at and EC2's LaunchTime it
# tells a session's start path (warmswarm_models.start).
INSTANCE_STARTED_AT_TAG: Final = "warmswarm:started-at"
# On an instance we stopped for the warm tier: until when it is kept stopped (format_timestamp), then terminated.
INSTANCE_WARM_UNTIL_TAG: Final = "warmswarm:warm-until"

# Recycling (a machine serves the next owner once scrubbed). On an owner's machine whose group lets it be recycled
# ("true", written at its launch or claim from the owner's policy): once idle it is stopped, detached, stripped and
# scrubbed instead of terminated.
INSTANCE_RECYCLE_TAG: Final = "warmswarm:recycle"
# On a recycled machine: how many times it was recycled (n = 1, 2, ...), and the scrub its next boot owes, named by its
# scrub token `<n>.<t>` (t: the mark's moment, whole epoch seconds of AWS's clock, so that every mark's token is new):
# "pending-<n>.<t>": every boot scrubs (before Docker starts, after removing any proof on the disk) until the scrub of
# that token is proven; "done-<n>.<t>": the autoscaler saw the proof (ENGINE_LABEL_SCRUBBED=<n>.<t> on a ready node of
# it) and may offer it. Legacy values without `.<t>`: "pending-<n>" is owed and no node can prove it (the machine is
# terminated at its start timeout); "done-<n>" is done (our own MarkScrubbed wrote it).
# A count missing beside a recycle trace (scrub tag, served-owners tag, LAUNCH_REASON_STRIPPED), unreadable, or
# contradicting the scrub tag's generation: the machine served an unknown owner, is treated as recycled, and is never
# recycled again (readings.read_instance, Instance.recycled None).
INSTANCE_RECYCLED_TAG: Final = "warmswarm:recycled"
INSTANCE_SCRUB_TAG: Final = "warmswarm:scrub"
SCRUB_PENDING_PREFIX: Final = "pending-"
SCRUB_DONE_PREFIX: Final = "done-"
# For audit: the owners a recycled machine has served, space-separated `user_id/project_id`, oldest first (the tag
# is cut from the front past EC2's 256 characters; INSTANCE_RECYCLED_TAG keeps the count).
INSTANCE_SERVED_OWNERS_TAG: Final = "warmswarm:served-owners"
# On every machine from its launch: a digest of the AMI and the launch settings it booted with. A recycled machine
# whose digest is not today's is terminated instead of offered (stale buffer machines on an old AMI).
INSTANCE_LAUNCH_SETTINGS_TAG: Final = "warmswarm:launch-settings"
# Set on the node's daemon by the boot's scrub, only once the scrub of token <n>.<t> finished: the proof, the whole
# token exactly as the scrub tag said it. A proof of any other token (an earlier mark's) proves nothing.
ENGINE_LABEL_SCRUBBED: Final = "warmswarm.scrubbed"
# Service labels the director writes from the group properties: may the owner's machines be recycled, and may the
# owner receive recycled machines ("true" / "false"; absent: "false").
SERVICE_LABEL_RECYCLE_MACHINES: Final = "warmswarm.recycle-machines"
SERVICE_LABEL_ACCEPT_RECYCLED: Final = "warmswarm.accept-recycled"

# Where a node mounts its owner's cache volume; services see it at the director's mount path.
DEFAULT_NODE_CACHE_PATH: Final = "/var/lib/warmswarm/cache"
