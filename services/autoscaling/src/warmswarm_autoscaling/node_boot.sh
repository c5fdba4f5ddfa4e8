#!/bin/sh
# warmswarm node boot (EC2 user data). Joins the swarm drained: the autoscaler labels the
# node for its owner and only then activates it, so no other work lands on it first.
set -eu

# The node's daemon must say which instance it is (engine label), so the autoscaler matches
# node and instance without guessing. The sandbox boots daemons already labelled; on EC2 the
# label is written here from the instance metadata (IMDSv2), once.
if ! docker info --format '{{json .Labels}}' | grep -q '"warmswarm.instance-id='; then
  imds_token=$(curl -fsS -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')
  instance_id=$(curl -fsS -H "X-aws-ec2-metadata-token: $imds_token" http://169.254.169.254/latest/meta-data/instance-id)
  mkdir -p /etc/docker
  printf '{"labels": ["warmswarm.instance-id=%s"]}\n' "$instance_id" > /etc/docker/daemon.json
  systemctl restart docker
fi

# The owner's cache: wait for the attached EBS volume, format it only if it is blank, mount it
# at the node's cache path, and only then join, so a node that takes work has its owner's data.
volume_id='${volume_id}'
cache_path='${cache_path}'
device_wait_s=${device_wait_s}
wait_for() {  # wait_for TEST PATH: until `test TEST PATH` holds, at most device_wait_s
  waited_s=0
  until test "$1" "$2"; do
    if [ "$waited_s" -ge "$device_wait_s" ]; then
      echo "warmswarm: volume $volume_id did not appear as $2 within $device_wait_s s" >&2
      exit 1
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}
if [ -n "$volume_id" ]; then
  mkdir -p "$cache_path"
  if [ -n "${WARMSWARM_DEVICE_DIR:-}" ]; then
    # The sandbox's hypervisor shows an attached volume as a folder named after it.
    device="$WARMSWARM_DEVICE_DIR/$volume_id"
    wait_for -d "$device"
    [ -e "$device/.warmswarm-formatted" ] || touch "$device/.warmswarm-formatted"
    mount --bind "$device" "$cache_path"
  else
    # Nitro instances expose EBS as NVMe; the by-id name carries the volume id without its dash.
    device="/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_$(echo "$volume_id" | tr -d -)"
    wait_for -b "$device"
    blkid "$device" >/dev/null 2>&1 || mkfs.ext4 -q "$device"
    mount "$device" "$cache_path"
  fi
fi

# WARMSWARM_NODE_ADDR is set where several nodes share one host (the sandbox); on EC2 the
# daemon finds its own address.
docker swarm join --availability drain --token '${worker_token}' \
  ${WARMSWARM_NODE_ADDR:+--advertise-addr "$WARMSWARM_NODE_ADDR" --listen-addr "$WARMSWARM_NODE_ADDR:2377"} \
  '${manager_addr}'
