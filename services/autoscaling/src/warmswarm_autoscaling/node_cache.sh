#!/bin/sh
# warmswarm per-boot cache script: runs on every boot, before the Docker daemon starts (a systemd unit
# that docker.service requires; the user data runs it once on the first boot). It mounts the owner's
# cache volume at the cache path and only then names it in the daemon's labels, so a node whose labels
# say "cache" has the data. Its rules:
#   - a device is formatted only when it is provably blank: no filesystem signature (blkid -p exits 2)
#     AND its first MiB reads as zeros; anything else that is not a filesystem stops the boot;
#   - a device that cannot be read or probed stops the boot (exit 1): docker does not start, the node
#     never joins, and the autoscaler replaces the machine; the volume is left as it is;
#   - a volume that does not appear in time: this boot has no cache; the cache path is removed, so a
#     service's bind mount of it fails instead of writing to the bare disk, and the daemon carries no
#     cache label, so the autoscaler drains the node.
# Usage: node_cache.sh CONFIG (shell variables: instance_id volume_id cache_path device_wait_s daemon_json
# device_dir device_tool).
set -eu
conf="${1:?usage: node_cache.sh CONFIG}"
# shellcheck disable=SC1090
. "$conf"

say() { echo "warmswarm: $*" >&2; }

# The device's hardware, as far as this script needs it. On EC2 the real tools; in the local sandbox,
# where a volume is a host folder, `device_tool` plays the same four parts.
dev() {
  if [ -n "${device_tool:-}" ]; then
    $device_tool "$@"
    return
  fi
  case "$1" in
    probe) blkid -p "$2" >/dev/null 2>&1 ;;              # 0: a filesystem; 2: none recognised; else: unreadable
    zeroed) cmp -s -n 1048576 "$2" /dev/zero ;;           # 0: zeros; 1: data; else: unreadable
    mkfs) mkfs.ext4 -q -F "$2" ;;
    mount) mount "$2" "$3" ;;
  esac
}

# The daemon's labels, merged into daemon.json (a GPU AMI's runtime and other settings stay): the instance
# it is, and the cache volume only when it is mounted now.
write_labels() {
  mkdir -p "$(dirname "$daemon_json")"
  python3 - "$daemon_json" "$instance_id" "$1" <<'PY'
import json, os, sys
path, instance_id, volume_id = sys.argv[1:4]
try:
    with open(path) as current:
        config = json.load(current)
except FileNotFoundError:
    config = {}
ours = ("warmswarm.instance-id=", "warmswarm.cache-volume=")
labels = [label for label in config.get("labels", []) if not label.startswith(ours)]
labels.append("warmswarm.instance-id=" + instance_id)
if volume_id:
    labels.append("warmswarm.cache-volume=" + volume_id)
config["labels"] = labels
with open(path + ".tmp", "w") as new:
    json.dump(config, new, indent=2)
os.replace(path + ".tmp", path)
PY
}

no_cache_this_boot() {
  if ! mountpoint -q "$cache_path" 2>/dev/null; then
    rmdir "$cache_path" 2>/dev/null || true
  fi
  write_labels ""
}

# A machine launched without a volume (from the warm buffer) learns its owner's when it is claimed: the
# autoscaler tags the instance with it before starting it, and the metadata service shows instance tags
# (in the local sandbox, a file plays that answer). Only a volume id's form is accepted.
if [ -z "$volume_id" ]; then
  if [ -n "${volume_tag_file:-}" ]; then
    tagged=$(cat "$volume_tag_file" 2>/dev/null || true)
  else
    imds_token=$(curl -fsS -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' || true)
    tagged=$(curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" \
      http://169.254.169.254/latest/meta-data/tags/instance/warmswarm:volume-id 2>/dev/null || true)
  fi
  case "$tagged" in
    vol-*[!0-9a-f]*) say "instance tag names $tagged, which is not a volume id: no cache this boot" ;;
    vol-?*) volume_id="$tagged" ;;
  esac
fi
if [ -z "$volume_id" ]; then
  write_labels ""
  exit 0
fi
if mountpoint -q "$cache_path" 2>/dev/null; then
  write_labels "$volume_id"   # mounted earlier in this boot (the first boot runs this script twice)
  exit 0
fi

if [ -n "${device_dir:-}" ]; then
  device="$device_dir/$volume_id"
else
  # Nitro instances expose EBS as NVMe; the by-id name carries the volume id without its dash.
  device="/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_$(echo "$volume_id" | tr -d -)"
fi
waited_s=0
until [ -e "$device" ]; do
  if [ "$waited_s" -ge "$device_wait_s" ]; then
    say "volume $volume_id did not appear as $device within $device_wait_s s: this boot has no cache (the node is drained)"
    no_cache_this_boot
    exit 0
  fi
  sleep 1
  waited_s=$((waited_s + 1))
done

set +e
dev probe "$device"
probed=$?
set -e
case "$probed" in
  0) ;;
  2)
    set +e
    dev zeroed "$device"
    zeroed=$?
    set -e
    case "$zeroed" in
      0) say "$device is blank: formatting it"; dev mkfs "$device" ;;
      1) say "$device holds data that no filesystem signature explains: not formatting it; the boot stops"; exit 1 ;;
      *) say "$device cannot be read (exit $zeroed): not formatting it; the boot stops"; exit 1 ;;
    esac
    ;;
  *) say "$device cannot be probed (blkid exit $probed): not formatting it; the boot stops"; exit 1 ;;
esac
mkdir -p "$cache_path"
dev mount "$device" "$cache_path"
write_labels "$volume_id"
say "volume $volume_id mounted at $cache_path"
