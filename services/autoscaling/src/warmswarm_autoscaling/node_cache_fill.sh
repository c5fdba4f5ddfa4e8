#!/bin/sh
# warmswarm cache fill: run by a systemd timer (warmswarm-cache-fill.timer) and by a udev "change" event of an
# EBS disk (a volume modified to a larger size), on a machine whose cache volume is mounted. It
#   - grows the filesystem online (xfs_growfs on the mount point, no unmount) when the disk is larger than it:
#     the autoscaler asked EC2 for a larger volume because this node said it was full;
#   - tells the autoscaler how full the filesystem is, and how large: the engine label
#     warmswarm.cache-fill=<volume id>:<percent>:<filesystem MiB> in the daemon's daemon.json, reloaded with SIGHUP
#     (docker.service's ExecReload; no container stops). The percent is floored to BUCKET_PCT steps, so the daemon is
#     reloaded when the fill crosses a step (or the filesystem grows), not at every byte written, and the label never
#     says a volume is fuller than it is. The size (xfs_info's data section after any growth, floored to MiB) tells
#     the autoscaler whether the filesystem took up its last growth: if not, it is not grown again.
# It never writes to the volume: it reads sizes (blockdev, xfs_info, df) and runs xfs_growfs. A failure here
# only means a later run tries again: nothing requires this unit, so Docker and the sessions go on.
# Usage: node_cache_fill.sh CONFIG (node_cache.sh's: cache_path daemon_json).
set -u
conf="${1:?usage: node_cache_fill.sh CONFIG}"
# shellcheck disable=SC1090
. "$conf"

BUCKET_PCT=5
# A disk this much larger than its filesystem is grown: xfs_growfs rounds down to whole filesystem blocks, so a
# disk a few KiB larger would be "grown" by nothing at every run.
GROW_SLACK_BYTES=1048576
LABEL=warmswarm.cache-fill
MOUNTED_LABEL=warmswarm.cache-volume

say() { echo "warmswarm: $*" >&2; }

# -- decisions (pure: numbers in, an answer out) --

# The percent used, floored to BUCKET_PCT: bucket USED_KIB AVAILABLE_KIB
bucket() { echo $(( $1 * 100 / ($1 + $2) / BUCKET_PCT * BUCKET_PCT )); }

# 0 when a disk of DISK_BYTES holds a filesystem of FS_BYTES that should grow: needs_growth DISK_BYTES FS_BYTES
needs_growth() { [ "$1" -ge $(( $2 + GROW_SLACK_BYTES )) ]; }

# -- reading and acting --

# A label's value in daemon.json: node_cache.sh names the volume (warmswarm.cache-volume) only once it is mounted.
label() { sed -n "s/.*\"$1=\([^\"]*\)\".*/\1/p" "$daemon_json" 2>/dev/null | head -n 1; }

# The filesystem's data section in bytes (xfs_info's "data = bsize=B blocks=N").
xfs_bytes() {
  xfs_info "$1" | sed -n 's/^data *= *bsize=\([0-9]*\) *blocks=\([0-9]*\),.*/\1 \2/p' | {
    read -r block_bytes blocks && echo $(( block_bytes * blocks ))
  }
}

grow_if_larger() {
  disk_bytes=$(blockdev --getsize64 "$(findmnt -n -o SOURCE --mountpoint "$cache_path")") || return 1
  fs_bytes=$(xfs_bytes "$cache_path")
  [ -n "$fs_bytes" ] || return 1
  if needs_growth "$disk_bytes" "$fs_bytes"; then
    say "disk $disk_bytes bytes, filesystem $fs_bytes: xfs_growfs"
    xfs_growfs "$cache_path" >/dev/null
  fi
}

write_fill_label() {
  python3 - "$daemon_json" "$LABEL" "$1" <<'PY'
import json, os, sys
path, key, value = sys.argv[1:4]
with open(path) as current:
    config = json.load(current)
labels = [label for label in config.get("labels", []) if not label.startswith(key + "=")]
config["labels"] = labels + [key + "=" + value]
with open(path + ".tmp", "w") as new:
    json.dump(config, new, indent=2)
os.replace(path + ".tmp", path)
PY
}

mountpoint -q "$cache_path" 2>/dev/null || exit 0
# An ext4 volume of an earlier release is neither grown (its online resize is refused on these machines) nor
# reported: a fill report would have EC2 grow a disk its filesystem cannot use, billed until it is deleted.
[ "$(findmnt -n -o FSTYPE --mountpoint "$cache_path")" = xfs ] || exit 0
# node_cache.sh's lock: it writes daemon.json too, and restarts the daemon on a hot attach.
exec 9>>"$conf.lock"
flock -w 30 9 || exit 0
volume=$(label "$MOUNTED_LABEL")
[ -n "$volume" ] || exit 0  # mounted, but not (yet) named in the labels: node_cache.sh is not done
status=0
grow_if_larger || status=1
# df -P: 1024-byte blocks, one line per filesystem; columns 3 and 4 are used and available.
# shellcheck disable=SC2046
set -- $(df -P "$cache_path" | sed -n '2p')
fill="$volume:$(bucket "$3" "$4")"
# The filesystem's size after any growth above; without it (xfs_info failed) the label says no size, and the
# autoscaler grows a volume no second time.
fs_bytes=$(xfs_bytes "$cache_path")
[ -z "$fs_bytes" ] || fill="$fill:$(( fs_bytes / 1048576 ))"
[ "$fill" != "$(label "$LABEL")" ] || exit "$status"
write_fill_label "$fill" || exit 1
# Not held over the reload: a daemon restarting meanwhile (node_cache.sh's hot attach) runs the per-boot cache
# script, which takes this lock, before it starts, and the reload waits for the start.
exec 9>&-
# Reloading rereads the labels (a daemon that is down reads them when it starts); the swarm agent sends them to the
# managers with its next node update.
systemctl reload docker || status=1
say "$LABEL=$fill"
exit "$status"
