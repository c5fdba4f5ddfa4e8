#!/usr/bin/env bash
# Installs the system packages the sandbox and tests run on (Docker Engine, busybox, Redis, tini),
# only when one is missing, so a warm machine pays nothing. Needs root (apt-get).
set -euo pipefail
missing=()
for cmd in dockerd docker busybox redis-server tini unshare nsenter; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing system packages (missing: ${missing[*]})"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends docker.io busybox-static redis-server tini util-linux iproute2 >/dev/null
