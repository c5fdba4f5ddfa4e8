#!/usr/bin/env bash
# Installs the system packages the sandbox and tests run on (Docker Engine, busybox, Redis, tini, iproute2 for the
# machines' own networks, what a node's boot script uses: blkid, mountpoint, cmp, mkfs.ext4, python3, and
# mmdebstrap, which makes the stack's base image, as no registry serves one here),
# only when one is missing, so a warm machine pays nothing. Needs root (apt-get).
set -euo pipefail
missing=()
for cmd in dockerd docker busybox redis-server tini unshare nsenter ip blkid mountpoint cmp mkfs.ext4 mmdebstrap; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
# The machines' boot scripts run with the system's PATH: a python3 of pyenv or a venv does not count.
[ -x /usr/bin/python3 ] || missing+=(python3)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing system packages (missing: ${missing[*]})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker.io busybox-static redis-server tini util-linux iproute2 \
  e2fsprogs diffutils python3 mmdebstrap >/dev/null
