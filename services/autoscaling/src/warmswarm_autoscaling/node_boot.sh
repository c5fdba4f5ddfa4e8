#!/bin/sh
# warmswarm node boot (EC2 user data, which cloud-init runs once per instance). It installs the per-boot
# cache script as a unit Docker requires, so every later boot (a reboot, a stop and start) mounts the
# owner's cache before the daemon starts; runs it for this first boot; and joins the swarm drained: the
# autoscaler labels the node for its owner and only then activates it, so no other work lands on it first.
# It also installs a udev rule for a volume attached while the machine runs (a hot-buffer claim): the same
# cache script, in its "hot" mode, mounts it and reloads the daemon's labels. And the cache's fill report and
# online growth (node_cache_fill.sh): on a timer, and on the udev "change" event of a disk EC2 grew.
# Before the cache unit, it installs the per-boot scrub of a recycled machine (node_scrub.sh): every boot while
# the instance's scrub tag is pending scrubs the root disk before Docker starts. The first boot has nothing to
# scrub, so it does not run it now. Both units are ordered after the network: they read the instance's tags from the
# metadata service, with bounded retries.
set -eu
say() { echo "warmswarm: $*" >&2; }
# The per-boot scripts come in one gzip stream, in base64 (EC2 takes 16 KiB of user data), each after a line
# `#=warmswarm-file NAME`: unpack DIR PACKED writes each to DIR/NAME.
unpack() {
  printf '%s\n' "$2" | base64 -d | gzip -dc |
    awk -v dir="$1" '/^#=warmswarm-file / { file = dir "/" $2; next } { print > file }'
}

# The local sandbox gives each machine a root disk of its own and plays the instance metadata service;
# on EC2 both are unset.
root="${WARMSWARM_NODE_ROOT:-}"
etc="$root/etc/warmswarm"
daemon_json="$root/etc/docker/daemon.json"

# The instance metadata service (a loopback stand-in in tests), each read retried for up to imds_wait_s: it may answer
# late early in a boot.
imds_url="${WARMSWARM_IMDS_URL:-http://169.254.169.254}"
imds_wait_s=60
instance_id="${WARMSWARM_INSTANCE_ID:-}"
deadline=$(($(date +%s) + imds_wait_s))
while [ -z "$instance_id" ]; do
  imds_token=$(curl -fsS --connect-timeout 2 --max-time 5 -X PUT "$imds_url/latest/api/token" \
    -H 'X-aws-ec2-metadata-token-ttl-seconds: 60' || true)
  instance_id=$(curl -fsS --connect-timeout 2 --max-time 5 -H "X-aws-ec2-metadata-token: $imds_token" \
    "$imds_url/latest/meta-data/instance-id" || true)
  case "$instance_id" in i-*[!0-9a-f]* | i-) instance_id="" ;; i-*) ;; *) instance_id="" ;; esac
  [ -n "$instance_id" ] && break
  [ "$(date +%s)" -lt "$deadline" ] || { say "no instance id from the metadata service ($imds_url) in $imds_wait_s s"; exit 1; }
  sleep 1
done
mkdir -p "$etc" "$root/etc/systemd/system" "$root/etc/udev/rules.d"
cat > "$etc/cache.conf" <<CONF
instance_id='$instance_id'
volume_id='${volume_id}'
cache_path='${cache_path}'
device_wait_s=${device_wait_s}
daemon_json='$daemon_json'
device_dir='${WARMSWARM_DEVICE_DIR:-}'
volume_tag_file='${WARMSWARM_VOLUME_TAG_FILE:-}'
imds_url='$imds_url'
imds_wait_s=$imds_wait_s
CONF
# The scrub reads Docker's layout from docker.service as systemd runs it (the sandbox, which plays systemd, names a
# file that says so) and daemon.json; its per-boot marker lives in a tmpfs run dir, gone at every reboot.
cat > "$etc/scrub.conf" <<CONF
node_root='$root'
cache_path='${cache_path}'
daemon_json='$daemon_json'
scrub_tag_file='${WARMSWARM_SCRUB_TAG_FILE:-}'
cache_conf='$etc/cache.conf'
run_dir='${WARMSWARM_RUN_DIR:-/run}/warmswarm'
imds_url='$imds_url'
imds_wait_s=$imds_wait_s
docker_unit_show='${WARMSWARM_DOCKER_UNIT_SHOW:-systemctl show -p ExecStart -p Environment -p EnvironmentFiles docker.service}'
CONF
unpack "$etc" '${per_boot_scripts}'
cat > "$root/etc/systemd/system/warmswarm-scrub.service" <<UNIT
[Unit]
Description=warmswarm: scrub a recycled machine's root disk before Docker starts (while its scrub tag is pending)
Before=docker.service warmswarm-cache.service
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh $etc/node_scrub.sh $etc/scrub.conf

[Install]
RequiredBy=docker.service
UNIT
cat > "$root/etc/systemd/system/warmswarm-cache.service" <<UNIT
[Unit]
Description=warmswarm: mount the owner's cache volume before Docker starts
Before=docker.service
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh $etc/node_cache.sh $etc/cache.conf

[Install]
RequiredBy=docker.service
UNIT
# A disk attached while the machine runs: udev asks systemd for a oneshot unit per EBS disk (on Nitro an NVMe
# disk whose controller's model is EBS's), not a RUN+= command, which udev kills after a few seconds. Ordered
# after the boot's own unit, so at boot (when udev also sees the disks present) the boot mounts first and the
# event's run finds it done.
cat > "$root/etc/udev/rules.d/90-warmswarm-cache.rules" <<RULE
ACTION=="add", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", ATTRS{model}=="Amazon Elastic Block Store*", TAG+="systemd", ENV{SYSTEMD_WANTS}+="warmswarm-hot-cache@%k.service"
RULE
cat > "$root/etc/systemd/system/warmswarm-hot-cache@.service" <<UNIT
[Unit]
Description=warmswarm: mount the owner's cache volume attached while the machine runs (%I)
After=warmswarm-cache.service

[Service]
Type=oneshot
ExecStart=/bin/sh $etc/node_cache.sh $etc/cache.conf hot
UNIT
# How full the cache is, and its growth: a timer every cache_fill_period_s (10 s by default: the swarm agent sends
# the labels on with its node update every 20 s, so a shorter period would hardly report sooner, and each run is a
# df and an xfs_info), and at once when EC2 grows the disk (the kernel's "change" event of a resized disk; a RUN of
# a non-blocking start, as SYSTEMD_WANTS acts only when a disk first appears). Nothing requires it: a failure
# leaves Docker and the sessions running.
cat > "$root/etc/systemd/system/warmswarm-cache-fill.service" <<UNIT
[Unit]
Description=warmswarm: report how full the cache volume is, and grow its filesystem to a grown disk
After=warmswarm-cache.service

[Service]
Type=oneshot
ExecStart=/bin/sh $etc/node_cache_fill.sh $etc/cache.conf
UNIT
cat > "$root/etc/systemd/system/warmswarm-cache-fill.timer" <<UNIT
[Unit]
Description=warmswarm: the cache fill every ${cache_fill_period_s} s

[Timer]
OnBootSec=${cache_fill_period_s}s
OnUnitActiveSec=${cache_fill_period_s}s
AccuracySec=1s

[Install]
WantedBy=timers.target
UNIT
cat > "$root/etc/udev/rules.d/91-warmswarm-cache-fill.rules" <<RULE
ACTION=="change", SUBSYSTEM=="block", ENV{DEVTYPE}=="disk", ATTRS{model}=="Amazon Elastic Block Store*", RUN+="/usr/bin/systemctl --no-block start warmswarm-cache-fill.service"
RULE
systemctl daemon-reload
# The scrub first: the sandbox's init runs the units Docker requires in the order they were enabled.
systemctl enable warmswarm-scrub.service
systemctl enable warmswarm-cache.service
systemctl enable --now warmswarm-cache-fill.timer
udevadm control --reload 2>/dev/null || true

# This first boot: cloud-init runs after Docker started, so the cache is mounted now and Docker restarted
# to read the labels. A failure stops the boot here: no join, nothing runs without (or over) the data.
before=$(cat "$daemon_json" 2>/dev/null || true)
sh "$etc/node_cache.sh" "$etc/cache.conf"
if [ "$(cat "$daemon_json")" != "$before" ]; then
  systemctl restart docker
fi

# A machine for the warm buffer has its images before it joins: once it joined, the autoscaler stops it.
for image in ${pull_images}; do
  docker image inspect "$image" >/dev/null 2>&1 || docker pull "$image"
done

# WARMSWARM_NODE_ADDR is set where several nodes share one host (the sandbox); on EC2 the
# daemon finds its own address.
docker swarm join --availability drain --token '${worker_token}' \
  ${WARMSWARM_NODE_ADDR:+--advertise-addr "$WARMSWARM_NODE_ADDR" --listen-addr "$WARMSWARM_NODE_ADDR:2377"} \
  '${manager_addr}'
