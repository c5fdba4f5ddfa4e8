#!/bin/sh
# warmswarm scrub script, for a recycled machine (issues 33 and 42). It runs at every boot before the Docker daemon
# and before the cache script (a systemd unit docker.service requires). While the instance's `warmswarm:scrub` tag
# says pending-<n>.<t> (the scrub token: the recycle's generation and the moment it was asked for), the boot removes
# what the last owner left on the root disk, and only once every step succeeded names the proof
# `warmswarm.scrubbed=<n>.<t>` in the daemon's labels: the autoscaler offers the machine to another owner only after
# its node shows exactly the token it asked for.
# It fails closed:
#   - at every boot that owes a scrub, the first thing it does is remove any proof from daemon.json: a proof on the
#     disk is never a reason to skip (a count set back or lost asks again for an old generation; a reboot while the
#     scrub is owed). It skips only when THIS boot already finished THIS token: a marker in the per-boot run dir
#     (run_dir, a tmpfs: /run/warmswarm on EC2), so a second run of the unit in one boot (the daemon restarted on
#     a hot claim runs its required units again) does not remove the next owner's work; the proof goes back then;
#   - it reads the layout it cleans from Docker's effective configuration: daemon.json (the file the daemon reads)
#     and docker.service as systemd runs it (its ExecStart with drop-ins, its environment and environment files):
#     the data root, exec root, storage driver, log driver and options, a system containerd, containerd's image
#     store. Anything it does not fully know (a flag or key not listed here, a log driver that keeps output
#     outside containers/, a system containerd, containerd's image store) is refused with the reason.
# What it removes, in Docker's data root (graph drivers overlay2, fuse-overlayfs and vfs):
#   - every container (containers/: its config, environment, logs with the json-file/local log drivers);
#   - every volume, named or anonymous (volumes/, with its metadata.db);
#   - each container's writable and init layers (found by image/<driver>/layerdb/mounts/<id>), then that entry;
#   - the swarm worker's task records (swarm/worker/); swarm/certificates, state.json and docker-state.json stay:
#     the node rejoins as itself;
#   - the daemon's own containerd's records (containerd/: each container's OCI spec), the local network store
#     (network/files/local-kv.db), the build cache (buildkit/), Docker's temp files (tmp/) and the exec root;
#   - everything under the cache path (a volume must never be mounted there);
# and on the root disk: the persistent journal of earlier boots (rotated, then its archived files removed: the
# daemon's log, the cache units' output naming the last owner's volume), core dumps (/var/lib/systemd/coredump,
# /var/crash) and the sandbox's unit logs (/var/log/warmswarm-*.log, truncated).
# Kept: image layers and the image store (docs/operations.md, "Recycled machines", says why and what else stays).
# Each step is idempotent and the proof is dropped first, so a boot after an interrupted scrub does all of it again.
# Usage: node_scrub.sh CONFIG (shell variables: node_root cache_path daemon_json scrub_tag_file cache_conf run_dir
# imds_url imds_wait_s docker_unit_show).
set -eu
conf="${1:?usage: node_scrub.sh CONFIG}"
# shellcheck disable=SC1090
. "$conf"
# The machine's root as this script sees it ('' on EC2): Docker's and systemd's default paths are under it.
node_root="${node_root:-}"
run_dir="${run_dir:-/run/warmswarm}"
imds_url="${imds_url:-http://169.254.169.254}"
imds_wait_s="${imds_wait_s:-60}"
# What yields docker.service as systemd runs it (drop-ins applied): its ExecStart, Environment and EnvironmentFiles.
docker_unit_show="${docker_unit_show:-systemctl show -p ExecStart -p Environment -p EnvironmentFiles docker.service}"

say() { echo "warmswarm: $*" >&2; }
refuse() { say "scrub refused: $*; docker does not start"; exit 1; }

# One instance metadata path, retried (each try bounded) for up to imds_wait_s: the metadata service may answer late
# early in a boot. Prints the body; returns 0 (200), 4 (404: no such tag) or 1 (no answer in time).
imds_get() {
  deadline=$(($(date +%s) + imds_wait_s))
  while :; do
    last="no session token"
    if token=$(curl -fsS --connect-timeout 2 --max-time 5 -X PUT "$imds_url/latest/api/token" \
      -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' 2>/dev/null); then
      last="no answer"
      if answer=$(curl -sS --connect-timeout 2 --max-time 5 -w '\n%{http_code}' \
        -H "X-aws-ec2-metadata-token: $token" "$imds_url/latest/meta-data/$1" 2>/dev/null); then
        code=$(printf '%s\n' "$answer" | tail -n 1)
        case "$code" in
          200) printf '%s\n' "$answer" | sed '$d'; return 0 ;;
          404) return 4 ;;
        esac
        last="HTTP $code"
      fi
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      say "the metadata service ($imds_url) gives $1: $last, still after $imds_wait_s s"
      return 1
    fi
    sleep 1
  done
}

# The instance's scrub tag: "yes VALUE" or "no". On EC2 the metadata service (instance tags in metadata
# enabled): a 404 is "no such tag"; no answer within imds_wait_s means it cannot know. The sandbox plays it with a file.
scrub_tag() {
  if [ -n "${scrub_tag_file:-}" ]; then
    [ -e "$scrub_tag_file" ] || { echo no; return; }
    value=$(cat "$scrub_tag_file") || refuse "the scrub tag's answer ($scrub_tag_file) cannot be read"
    echo "yes $value"
    return
  fi
  set +e
  value=$(imds_get "tags/instance/warmswarm:scrub")
  got=$?
  set -e
  case "$got" in
    0) echo "yes $value" ;;
    4) echo no ;;
    *) refuse "the metadata service does not answer the scrub tag" ;;
  esac
}

# daemon.json's labels, merged as node_cache.sh does: ours replaced, the others (and other settings) kept.
# With an argument, the proof of that token is added; without, any proof is removed.
set_proof() {
  python3 - "$daemon_json" "${1:-}" <<'PY'
import json, os, sys
path, token = sys.argv[1:3]
try:
    with open(path) as current:
        config = json.load(current)
except FileNotFoundError:
    config = {}
labels = [label for label in config.get("labels", []) if not label.startswith("warmswarm.scrubbed=")]
if token:
    labels.append("warmswarm.scrubbed=" + token)
config["labels"] = labels
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as new:
    json.dump(config, new, indent=2)
os.replace(path + ".tmp", path)
PY
}

# Docker's effective layout, as shell assignments (data_root exec_root), from docker.service as systemd runs it
# (stdin: `systemctl show`'s ExecStart, Environment and EnvironmentFiles) and the daemon.json the daemon reads.
# Exit 1 with the reason on stdout for anything not fully known.
docker_layout() {
  python3 -c '
import json, os, re, shlex, sys
node_root, our_daemon_json = sys.argv[1:3]
def refuse(why):
    print(why)
    sys.exit(1)
props = {}
for line in sys.stdin.read().splitlines():
    key, sep, value = line.partition("=")
    if sep:
        props.setdefault(key, []).append(value)
argvs = re.findall(r"argv\[\]=(.*?) ;", " ".join(props.get("ExecStart", [])))
if len(argvs) != 1:
    refuse("docker.service has %d ExecStart commands (systemctl show says %r); one dockerd is known here" % (len(argvs), props.get("ExecStart")))
env = {}
for assignment in shlex.split(" ".join(props.get("Environment", []))):
    name, _, value = assignment.partition("=")
    env[name] = value
for entry in props.get("EnvironmentFiles", []):
    if not entry.strip():
        continue
    path, _, flags = entry.partition(" (ignore_errors=")
    try:
        lines = open(node_root + path).read().splitlines()
    except FileNotFoundError:
        if flags.startswith("yes"):
            continue
        refuse("docker.service reads %s, which is missing" % path)
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        if not sep or line.endswith("\\"):
            refuse("%s has a line this scrub cannot read: %r" % (path, line))
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"\x27":
            value = value[1:-1]
        env[name.strip()] = value
argv = []
for word in shlex.split(argvs[0]):
    whole = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
    if whole:
        argv += env.get(whole.group(1), "").split()
        continue
    word = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word)
    if "$" in word:
        refuse("docker.service runs %r, whose variables this scrub cannot expand" % argvs[0])
    argv.append(word)
if not argv or os.path.basename(argv[0]) != "dockerd":
    refuse("docker.service runs %r, not dockerd" % (argv[:1],))
LAYOUT_FLAGS = set("data-root graph exec-root storage-driver log-driver log-opt containerd config-file".split())
LAYOUT_KEYS = set("data-root graph exec-root storage-driver log-driver log-opts containerd".split())
SHORT = {"-g": "graph", "-s": "storage-driver", "-H": "host", "-p": "pidfile", "-l": "log-level", "-G": "group", "-b": "bridge", "-D": "debug"}
BOOLS = set("debug iptables ip6tables ip-masq ip-forward ipv6 userland-proxy live-restore icc experimental selinux-enabled tls tlsverify init no-new-privileges raw-logs".split())
HARMLESS = BOOLS | set("host pidfile cgroup-parent bridge bip dns dns-opt dns-search mtu ip fixed-cidr fixed-cidr-v6 default-gateway default-gateway-v6 default-address-pool default-ulimit default-runtime add-runtime exec-opt log-level group insecure-registry registry-mirror max-concurrent-downloads max-concurrent-uploads max-download-attempts shutdown-timeout default-shm-size metrics-addr swarm-default-advertise-addr data-path-addr data-path-port default-cgroupns-mode default-ipc-mode oom-score-adjust seccomp-profile tlscacert tlscert tlskey userland-proxy-path host-gateway-ip storage-opt node-generic-resource network-control-plane-mtu".split())
flags = {}
words = iter(argv[1:])
for word in words:
    if word in SHORT:
        name, given, value = SHORT[word], False, None
    elif word.startswith("--"):
        name, eq, value = word[2:].partition("=")
        given = bool(eq)
    else:
        refuse("dockerd is run with %r, which this scrub does not know" % word)
    if name not in HARMLESS and name not in LAYOUT_FLAGS:
        refuse("dockerd is run with --%s, which this scrub does not know" % name)
    if name in BOOLS:
        continue
    if not given:
        value = next(words, None)
        if value is None:
            refuse("dockerd is run with --%s and no value" % name)
    if name == "log-opt":
        key, _, opt = value.partition("=")
        flags.setdefault("log-opts", {})[key] = opt
    else:
        flags[name] = value
config_file = flags.get("config-file") or node_root + "/etc/docker/daemon.json"
if os.path.realpath(config_file) != os.path.realpath(our_daemon_json):
    refuse("dockerd reads %s, but the labels are written to %s" % (config_file, our_daemon_json))
try:
    with open(config_file) as raw:
        daemon = json.load(raw)
except FileNotFoundError:
    daemon = {}
except ValueError as error:
    refuse("%s is not JSON (%s)" % (config_file, error))
HARMLESS_KEYS = HARMLESS | set("labels hosts dns-opts default-ulimits registry-mirrors insecure-registries runtimes exec-opts default-address-pools node-generic-resources storage-opts features".split())
for key in daemon:
    if key not in HARMLESS_KEYS and key not in LAYOUT_KEYS:
        refuse("%s sets %r, which this scrub does not know" % (config_file, key))
features = daemon.get("features", {})
if not isinstance(features, dict) or not isinstance(daemon.get("log-opts", {}), dict):
    refuse("%s has features or log-opts that are not objects" % config_file)
for feature, on in features.items():
    if feature == "containerd-snapshotter" and on:
        refuse("%s turns on containerd'\''s image store: containers'\'' layers live outside Docker'\''s data root" % config_file)
    if feature not in ("containerd-snapshotter", "buildkit"):
        refuse("%s sets the feature %r, which this scrub does not know" % (config_file, feature))
def setting(name, legacy=None):
    for source in (flags, daemon):
        for key in (name, legacy):
            if key and source.get(key):
                return source[key]
    return None
containerd = setting("containerd")
if containerd:
    refuse("dockerd uses a system containerd (%s): its records of the owner'\''s containers are outside Docker'\''s data root, and this scrub cannot remove them" % containerd)
driver = setting("storage-driver")
if driver and driver not in ("overlay2", "fuse-overlayfs", "vfs"):
    refuse("storage driver %s: its layers are not known here" % driver)
log_driver = setting("log-driver") or "json-file"
if log_driver not in ("json-file", "local", "none"):
    refuse("daemon log driver %r keeps output outside containers/" % log_driver)
KNOWN_LOG_OPTS = set("max-size max-file compress labels labels-regex env env-regex tag mode max-buffer-size".split())
for key in setting("log-opts") or {}:
    if key not in KNOWN_LOG_OPTS:
        refuse("log option %r, which this scrub does not know" % key)
data_root = setting("data-root", "graph") or node_root + "/var/lib/docker"
exec_root = setting("exec-root") or node_root + "/var/run/docker"
for name, path in (("data root", data_root), ("exec root", exec_root)):
    if not path.startswith("/") or path.rstrip("/") == "":
        refuse("the %s %r is not an absolute path below /" % (name, path))
print("data_root=%s\nexec_root=%s" % (shlex.quote(data_root.rstrip("/")), shlex.quote(exec_root.rstrip("/"))))
' "$node_root" "$daemon_json"
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

# A scrub token: <n>.<t>, both whole numbers.
is_token() {
  case "$1" in "" | *[!0-9.]* | .* | *. | *.*.*) return 1 ;; *.*) return 0 ;; *) return 1 ;; esac
}

case "$cache_path" in /?*) ;; *) refuse "cache path '$cache_path' is not an absolute path" ;; esac
case "$run_dir" in /?*) ;; *) refuse "run dir '$run_dir' is not an absolute path" ;; esac

answer=$(scrub_tag)  # an assignment: a refusal inside exits here too
[ "$answer" != no ] || exit 0
value=${answer#yes }
case "$value" in
  # Nothing owed. A legacy done-<n> was proven by the autoscaler's own mark: nothing owed either.
  done-*)
    case "${value#done-}" in "" | *[!0-9.]*) refuse "the instance's scrub tag is '$value'" ;; esac
    is_token "${value#done-}" || case "${value#done-}" in *.*) refuse "the instance's scrub tag is '$value'" ;; esac
    exit 0
    ;;
  pending-*) token=${value#pending-} ;;
  *) refuse "the instance's scrub tag is '$value'" ;;
esac
if ! is_token "$token"; then
  case "$token" in
    "" | *[!0-9]*) refuse "the instance's scrub tag is '$value'" ;;
    *) refuse "the instance's scrub tag is '$value', from before scrub tokens (pending-<n>.<t>): no proof of it could be told from an earlier scrub's" ;;
  esac
fi

exec 9>>"$conf.lock"
flock 9
# First, before anything that could skip: no proof stays on the disk of a machine that owes a scrub.
set_proof ""
marker="$run_dir/scrubbed"
if [ "$(cat "$marker" 2>/dev/null || true)" = "$token" ]; then
  # This very boot finished this very token (the daemon restarted, its required units run again while the tag still
  # reads pending): what is on the machine now is its next owner's. The proof this boot earned goes back.
  set_proof "$token"
  say "scrub $token was done in this boot already: nothing to do"
  exit 0
fi
started=$(cut -d ' ' -f 1 /proc/uptime)
layout=$(sh -c "$docker_unit_show" </dev/null) || refuse "docker.service's configuration cannot be read ($docker_unit_show)"
assignments=$(printf '%s\n' "$layout" | docker_layout) || refuse "$assignments"
eval "$assignments"
say "scrubbing $token: data root $data_root, exec root $exec_root"

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
empty_dir "$data_root/buildkit"
empty_dir "$exec_root"
no_mount_under "$data_root/network/files"
rm -f "$data_root/network/files/local-kv.db" || refuse "the local network store could not be removed"
if mountpoint -q "$cache_path" 2>/dev/null; then
  refuse "the cache path $cache_path is a mountpoint: a volume is never scrubbed"
fi
no_mount_under "$cache_path"
rm -rf "$cache_path" || refuse "$cache_path could not be removed"

# The root disk's residue of the last owner's boots. The persistent journal: journald keeps writing the active files,
# so it archives them first (--rotate), then every archived file goes (this boot's lines so far with them).
journal="$node_root/var/log/journal"
if [ -d "$journal" ] && [ -n "$(find "$journal" -name '*.journal*' -print -quit)" ]; then
  journalctl --rotate >/dev/null 2>&1 || refuse "the journal of earlier boots could not be rotated (journalctl --rotate)"
  find "$journal" \( -name '*@*.journal' -o -name '*.journal~' \) -type f -delete ||
    refuse "the journal of earlier boots could not be removed"
fi
empty_dir "$node_root/var/lib/systemd/coredump"
empty_dir "$node_root/var/crash"
for unit_log in "$node_root"/var/log/warmswarm-*.log; do
  [ -f "$unit_log" ] || continue
  : >"$unit_log" || refuse "$unit_log could not be emptied"
done

# The machine is no longer its launch's owner's: the cache unit's config forgets the volume its user data named, so
# that the next owner's volume is read from the instance's tag (a claim writes it) and the last owner's is never waited
# for, nor mounted should it be attached again.
if [ -n "${cache_conf:-}" ] && [ -f "$cache_conf" ]; then
  sed -i "s/^volume_id=.*/volume_id=''/" "$cache_conf" || refuse "$cache_conf could not be rewritten"
  grep -qx "volume_id=''" "$cache_conf" || refuse "$cache_conf still names a volume"
fi

set_proof "$token"
mkdir -p "$run_dir" && printf '%s\n' "$token" >"$marker.tmp" && mv "$marker.tmp" "$marker" ||
  refuse "the run dir $run_dir cannot hold this boot's marker"
finished=$(cut -d ' ' -f 1 /proc/uptime)
say "scrub of token $token done in $(awk -v a="$started" -v b="$finished" 'BEGIN { printf "%.2f", b - a }') s"
