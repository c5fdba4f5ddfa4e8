#!/bin/sh
# warmswarm cache script. At boot (mode "boot", the default) it runs before the Docker daemon starts (a
# systemd unit that docker.service requires; the user data runs it once on the first boot). On a running
# machine (mode "hot") it runs when a volume is attached (a udev rule starts a oneshot unit for each new
# EBS disk: a claim of a hot-buffer machine attaches the owner's volume while the machine runs). Either
# way it mounts the owner's cache volume at the cache path and only then names it in the daemon's labels
# (reloaded with SIGHUP while the daemon runs), so a node whose labels say "cache" has the data. Its rules:
#   - a device is formatted only when it is provably blank: no filesystem signature (blkid -p exits 2)
#     AND its first MiB reads as zeros; anything else that is not a filesystem is refused;
#   - a device that cannot be read or probed is refused (exit 1), the volume left as it is. At boot the
#     boot stops: docker does not start, the node never joins, and the autoscaler replaces the machine. On
#     a running machine the labels never name the volume, so the node never takes the owner's work and the
#     autoscaler terminates the machine after its hot-attach deadline;
#   - a volume that does not appear in time: at boot, this boot has no cache; the cache path is removed,
#     so a service's bind mount of it fails instead of writing to the bare disk, and the daemon carries no
#     cache label, so the autoscaler drains the node. On a running machine, nothing changes.
# Usage: node_cache.sh CONFIG [boot|hot] (CONFIG holds shell variables: instance_id volume_id cache_path
# device_wait_s daemon_json device_dir volume_tag_file imds_url imds_wait_s).
set -eu
conf="${1:?usage: node_cache.sh CONFIG [boot|hot]}"
mode="${2:-boot}"
# shellcheck disable=SC1090
. "$conf"

say() { echo "warmswarm: $*" >&2; }

case "$mode" in
  boot) refused="the boot stops" ;;
  hot) refused="this machine takes no work for it" ;;
  *) say "unknown mode '$mode' (boot or hot)"; exit 64 ;;
esac

# The device's parts, as far as this script needs them: the same commands on EC2's NVMe disks and on the local
# sandbox's loop devices (a sandbox volume is a sparse file attached with losetup), so this path runs in the tests.
dev() {
  case "$1" in
    # 0: a filesystem; 2: none recognised. A disk whose reads fail also gives 2 (blkid skips what it cannot read):
    # the zero check below is what refuses such a disk.
    probe) blkid -p "$2" >/dev/null 2>&1 ;;
    zeroed) cmp -s -n 1048576 "$2" /dev/zero ;;           # 0: zeros; 1: data; else: unreadable
    # XFS, as Amazon Linux 2023's own volumes: it grows online (xfs_growfs on the mounted path) once the volume
    # is modified to a larger size. No -f: should a signature appear after the probe, mkfs.xfs refuses to
    # overwrite it.
    mkfs) mkfs.xfs -q "$2" ;;
    # No -t: a volume formatted ext4 by an earlier release still mounts as it is. nodev, nosuid: a device node or a
    # set-uid file on an owner's volume (written by a privileged container, or anyone with the disk) gives nothing.
    mount) mount -o nodev,nosuid "$2" "$3" ;;
  esac
}

# The daemon's labels, merged into daemon.json (a GPU AMI's runtime and other settings stay): the instance
# it is, and the cache volume only when it is mounted now. Its fill (node_cache_fill.sh's label) goes: the
# next fill run reports the volume mounted now.
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
ours = ("warmswarm.instance-id=", "warmswarm.cache-volume=", "warmswarm.cache-fill=")
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

# One instance metadata path, retried (each try bounded) for up to imds_wait_s: the metadata service may answer late
# early in a boot. Prints the body; returns 0 (200), 4 (404: no such tag) or 1 (no answer in time).
imds_get() {
  deadline=$(($(date +%s) + ${imds_wait_s:-60}))
  while :; do
    last="no session token"
    if token=$(curl -fsS --connect-timeout 2 --max-time 5 -X PUT "${imds_url:-http://169.254.169.254}/latest/api/token" \
      -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null); then
      last="no answer"
      if answer=$(curl -sS --connect-timeout 2 --max-time 5 -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
        "${imds_url:-http://169.254.169.254}/latest/meta-data/$1" 2>/dev/null); then
        code=$(printf '%s\n' "$answer" | tail -n 1)
        case "$code" in
          200) printf '%s\n' "$answer" | sed '$d'; return 0 ;;
          404) return 4 ;;
        esac
        last="HTTP $code"
      fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      say "the metadata service gives $1: $last, still after ${imds_wait_s:-60} s"
      return 1
    fi
    sleep 1
  done
}

no_cache_this_boot() {
  if ! mountpoint -q "$cache_path" 2>/dev/null; then
    rmdir "$cache_path" 2>/dev/null || true
  fi
  write_labels ""
}

# A machine launched without a volume (from a buffer) learns its owner's when it is claimed: the autoscaler
# tags the instance with it before attaching it (and, for a warm claim, before starting it); the metadata
# service shows instance tags (in the local sandbox, a file plays that answer). Only a volume id's form is
# accepted.
tagged_volume() {
  if [ -n "${volume_tag_file:-}" ]; then
    tagged=$(cat "$volume_tag_file" 2>/dev/null || true)
  else
    tagged=$(imds_get tags/instance/warmswarm:volume-id || true)
  fi
  case "$tagged" in
    vol-*[!0-9a-f]*) say "instance tag names $tagged, which is not a volume id: no cache" ;;
    vol-?*) echo "$tagged" ;;
  esac
}

device_of() {
  if [ -n "${device_dir:-}" ]; then
    echo "$device_dir/$1"
  else
    # Nitro instances expose EBS as NVMe; the by-id name carries the volume id without its dash.
    echo "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_$(echo "$1" | tr -d -)"
  fi
}

# One run at a time: at boot the unit and the user data, on a running machine a udev event per disk.
exec 9>>"$conf.lock"
flock 9

if [ "$mode" = hot ]; then
  # A disk appeared while the machine runs. It is the owner's once the instance's tag names a volume whose
  # device is present (the tag may reach the metadata service after the disk does); else it is left alone.
  waited_s=0
  while :; do
    [ -n "$volume_id" ] || volume_id=$(tagged_volume)
    if [ -n "$volume_id" ] && [ -e "$(device_of "$volume_id")" ]; then
      break
    fi
    if [ "$waited_s" -ge "$device_wait_s" ]; then
      say "a disk appeared, but no owner's volume (tag: ${volume_id:-none}) shows within $device_wait_s s: left alone"
      exit 0
    fi
    flock -u 9
    sleep 1
    flock 9
    waited_s=$((waited_s + 1))
  done
  if mountpoint -q "$cache_path" 2>/dev/null; then
    exit 0  # mounted already (at boot, or by the event of an earlier disk)
  fi
else
  [ -n "$volume_id" ] || volume_id=$(tagged_volume)
  if [ -z "$volume_id" ]; then
    write_labels ""
    exit 0
  fi
  if mountpoint -q "$cache_path" 2>/dev/null; then
    write_labels "$volume_id"   # mounted earlier in this boot (the first boot runs this script twice)
    exit 0
  fi
fi

device=$(device_of "$volume_id")
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
      1) say "$device holds data that no filesystem signature explains: not formatting it; $refused"; exit 1 ;;
      *) say "$device cannot be read (exit $zeroed): not formatting it; $refused"; exit 1 ;;
    esac
    ;;
  *) say "$device cannot be probed (blkid exit $probed): not formatting it; $refused"; exit 1 ;;
esac
mkdir -p "$cache_path"
dev mount "$device" "$cache_path"
write_labels "$volume_id"
say "volume $volume_id mounted at $cache_path"
if [ "$mode" = hot ]; then
  exec 9>&-  # the lock is not held over the daemon's restart: the restart's per-boot run of this script takes it
  # The daemon must name the volume in its labels. A reload (SIGHUP, docker.service's ExecReload) rereads them,
  # but the swarm agent sends a node's description only every 20 s, so the labels would show up to 20 s late.
  # A restart re-registers the node at once (about 3 s); it would stop the daemon's containers, so it is used
  # only on a daemon that runs none (a hot-buffer machine runs nothing until its claim's labels arrive).
  if running=$(docker ps -q 2>/dev/null); then
    if [ -z "$running" ]; then
      systemctl restart docker
      say "docker restarted (it ran no container): its labels name volume $volume_id"
    else
      systemctl reload docker
      say "docker reloaded (it runs containers a restart would stop): the swarm sees volume $volume_id within 20 s"
    fi
  else
    say "docker is not running: it reads its labels (naming volume $volume_id) when it starts"
  fi
fi
