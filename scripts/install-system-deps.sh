#!/usr/bin/env bash
# Installs the system packages the sandbox and tests run on (Docker Engine, busybox, Redis, tini, iproute2 for the
# machines' own networks, what a node's boot script uses: blkid, mountpoint, cmp, mkfs.xfs, python3; mkfs.ext4 for a
# volume an earlier release formatted; losetup, which makes a sandbox volume a real block device; mmdebstrap, which
# makes the stack's base image, as no registry serves one here, and Prometheus with promtool, which check the alerts
# and run them in a test), only when one is missing, so a warm machine pays nothing. Needs root (apt-get).
set -euo pipefail
missing=()
for cmd in dockerd docker busybox redis-server tini unshare nsenter ip blkid mountpoint cmp mkfs.ext4 mkfs.xfs \
  losetup mmdebstrap prometheus promtool; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
# The machines' boot scripts run with the system's PATH: a python3 of pyenv or a venv does not count.
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing system packages (missing: ${missing[*]})"
export DEBIAN_FRONTEND=noninteractive
# The packages' own daemons (a Prometheus on :9090, a Redis on :6379, dockerd) must not start: the sandbox and the
# tests start their own, on ports of their choosing. policy-rc.d answering 101 is Debian's way to say so; one that
# is there already (a container image's) is left as it is.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker.io busybox-static redis-server tini util-linux iproute2 \
  e2fsprogs xfsprogs diffutils python3 mmdebstrap prometheus >/dev/null
# On a host run by systemd, the package enables its unit for the next boot: a Prometheus on :9090 the tests did not
# ask for. Only when this script installed it.
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  systemctl disable prometheus.service >/dev/null 2>&1 || true
fi
