#!/bin/sh
# warmswarm scrub script, for a recycled machine (issue 33). It runs at every boot before the Docker daemon and
# before the cache script (a systemd unit docker.service requires). While the instance's `warmswarm:scrub` tag
# says pending-<n>, the boot removes what the last owner left on the root disk, and only once every step
# succeeded names the proof `warmswarm.scrubbed=<n>` in the daemon's labels: the autoscaler offers the machine
# to another owner only after its node shows it. What it removes, in Docker's data root (graph drivers overlay2,
# fuse-overlayfs and vfs):
#   - every container (containers/: its config, environment, logs with the json-file/local log drivers);
#   - every volume, named or anonymous (volumes/, with its metadata.db);
#   - each container's writable and init layers (found by image/<driver>/layerdb/mounts/<id>), then that entry;
#   - the swarm worker's task records (swarm/worker/: the owner's task specs, secrets' and registry auth's
#     references); swarm/certificates, state.json and docker-state.json stay: the node rejoins as itself;
#   - the runtime records naming the containers: the daemon's own containerd's (containerd/: each container's
#     OCI spec, its command and environment among them; dockerd starts that containerd afresh) and the local
#     network store (network/files/local-kv.db: endpoints; the default networks are made again at start);
#   - Docker's temp files (tmp/), and everything under the cache path (a volume must never be mounted there).
# Kept: image layers and the image store (the next owner finds the images pulled). Not scrubbed: the daemon's
# own log (journald: container and service names, errors; no container output with json-file or local, which
# is why any other daemon log driver is refused), and a system containerd's records (/var/lib/containerd, when
# dockerd uses that one: it cannot be edited while containerd is stopped). It refuses (exit 1: docker does not start, the node never rejoins) when it cannot know or
# prove: the tag unreadable or malformed, a mount under what it removes, a container whose writable layer it
# cannot find (e.g. containerd's image store), an unknown graph driver. Each step is idempotent and the proof
# is dropped first, so a boot after an interrupted scrub does all of it again.
# Usage: node_scrub.sh CONFIG (shell variables: data_root cache_path daemon_json scrub_tag_file).
set -eu
conf="${1:?usage: node_scrub.sh CONFIG}"
# shellcheck disable=SC1090
. "$conf"

say() { echo "warmswarm: $*" >&2; }
refuse() { say "scrub refused: $*; docker does not start"; exit 1; }

# The instance's scrub tag: "yes VALUE" or "no". On EC2 the metadata service (instance tags in metadata
# enabled): a 404 is "no such tag"; any other failure means it cannot know. The sandbox plays it with a file.
scrub_tag() {
  if [ -n "${scrub_tag_file:-}" ]; then
    [ -e "$scrub_tag_file" ] || { echo no; return; }
    value=$(cat "$scrub_tag_file") || refuse "the scrub tag's answer ($scrub_tag_file) cannot be read"
    echo "yes $value"
    return
  fi
  imds=http://169.254.169.254/latest
  token=$(curl -fsS -X PUT "$imds/api/token" -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') ||
    refuse "no metadata token: the scrub tag cannot be read"
  answer=$(curl -sS -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $token" \
    "$imds/meta-data/tags/instance/warmswarm:scrub") || refuse "the metadata service does not answer the scrub tag"
  code=$(printf '%s\n' "$answer" | tail -n 1)
  case "$code" in
    200) echo "yes $(printf '%s\n' "$answer" | sed '$d')" ;;
    404) echo no ;;
    *) refuse "the metadata service answers the scrub tag with HTTP $code" ;;
  esac
}

# daemon.json's labels, merged as node_cache.sh does: ours replaced, the others (and other settings) kept.
# With an argument, the proof of that generation is added; without, any proof is removed.
set_proof() {
  python3 - "$daemon_json" "${1:-}" <<'PY'
import json, os, sys
path, generation = sys.argv[1:3]
try:
    with open(path) as current:
        config = json.load(current)
except FileNotFoundError:
    config = {}
labels = [label for label in config.get("labels", []) if not label.startswith("warmswarm.scrubbed=")]
if generation:
    labels.append("warmswarm.scrubbed=" + generation)
config["labels"] = labels
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as new:
    json.dump(config, new, indent=2)
os.replace(path + ".tmp", path)
PY
}

log_driver() {
  python3 -c 'import json,sys
try: print(json.load(open(sys.argv[1])).get("log-driver", ""))
except FileNotFoundError: print("")' "$daemon_json"
}

# rm -rf goes through a mounted filesystem before it fails on the mount point: look first.
no_mount_under() {
  if awk -v p="$1" '$5 == p || index($5, p "/") == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo; then
    refuse "something is mounted at or under $1"
  fi
}

empty_dir() {
  [ -d "$1" ] || return 0
  no_mount_under "$1"
  find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf {} + || refuse "not everything in $1 could be removed"
}

# One container's layers in a graph driver's dirs; an id is only ever hex, or hex-init (never a path).
remove_layer() {
  driver=$1 id=$2
  case "${id%-init}" in "" | *[!0-9a-f]*) refuse "layer id '$id' in $driver's layerdb is not an id" ;; esac
  case "$driver" in
    overlay2 | fuse-overlayfs)
      dir="$data_root/$driver/$id"
      if [ -f "$dir/link" ]; then
        link=$(cat "$dir/link")
        case "$link" in "" | *[!0-9A-Za-z]*) refuse "$dir/link names '$link'" ;; esac
        rm -f "$data_root/$driver/l/$link"
      fi
      ;;
    vfs) dir="$data_root/vfs/dir/$id" ;;
    *) refuse "graph driver $driver: its layers are not known here" ;;
  esac
  no_mount_under "$dir"
  rm -rf "$dir" || refuse "$dir could not be removed"
}

case "$data_root" in /?*) ;; *) refuse "data root '$data_root' is not an absolute path" ;; esac
case "$cache_path" in /?*) ;; *) refuse "cache path '$cache_path' is not an absolute path" ;; esac

answer=$(scrub_tag)  # an assignment: a refusal inside exits here too
[ "$answer" != no ] || exit 0
value=${answer#yes }
case "$value" in
  done-*[!0-9]* | done-) refuse "the instance's scrub tag is '$value'" ;;
  done-*) exit 0 ;;
  pending-*[!0-9]* | pending-) refuse "the instance's scrub tag is '$value'" ;;
  pending-*) generation=${value#pending-} ;;
  *) refuse "the instance's scrub tag is '$value'" ;;
esac

exec 9>>"$conf.lock"
flock 9
started=$(cut -d ' ' -f 1 /proc/uptime)
set_proof ""
log_to=$(log_driver)
case "$log_to" in "" | json-file | local | none) ;; *) refuse "daemon log driver '$log_to' keeps output outside containers/" ;; esac

# Every container's writable layer must be found before any container is removed: the mounts entry is its
# only pointer (a daemon on containerd's image store keeps it elsewhere, which this script cannot prove gone).
if [ -d "$data_root/containers" ]; then
  for container in "$data_root"/containers/*; do
    [ -e "$container" ] || continue
    id=$(basename "$container")
    set -- "$data_root"/image/*/layerdb/mounts/"$id"
    [ -d "$1" ] || refuse "container $id has no layerdb mounts entry: its writable layer cannot be found"
  done
fi
empty_dir "$data_root/containers"
for entry in "$data_root"/image/*/layerdb/mounts/*; do
  [ -d "$entry" ] || continue
  driver=$(basename "$(dirname "$(dirname "$(dirname "$entry")")")")
  for part in mount-id init-id; do
    if [ -f "$entry/$part" ]; then remove_layer "$driver" "$(cat "$entry/$part")"; fi
  done
  rm -rf "$entry" || refuse "$entry could not be removed" # last: until its layers are gone, a rerun finds them through it
done
empty_dir "$data_root/volumes"
empty_dir "$data_root/swarm/worker"
empty_dir "$data_root/tmp"
empty_dir "$data_root/containerd"
no_mount_under "$data_root/network/files"
rm -f "$data_root/network/files/local-kv.db" || refuse "the local network store could not be removed"
if mountpoint -q "$cache_path" 2>/dev/null; then
  refuse "the cache path $cache_path is a mountpoint: a volume is never scrubbed"
fi
no_mount_under "$cache_path"
rm -rf "$cache_path" || refuse "$cache_path could not be removed"
# The machine is no longer its launch's owner's: the cache unit's config forgets the volume its user data named, so
# that the next owner's volume is read from the instance's tag (a claim writes it) and the last owner's is never waited
# for, nor mounted should it be attached again.
if [ -n "${cache_conf:-}" ] && [ -f "$cache_conf" ]; then
  sed -i "s/^volume_id=.*/volume_id=''/" "$cache_conf" || refuse "$cache_conf could not be rewritten"
  grep -qx "volume_id=''" "$cache_conf" || refuse "$cache_conf still names a volume"
fi

set_proof "$generation"
finished=$(cut -d ' ' -f 1 /proc/uptime)
say "scrub of generation $generation done in $(awk -v a="$started" -v b="$finished" 'BEGIN { printf "%.2f", b - a }') s"
