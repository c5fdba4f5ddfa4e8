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

# WARMSWARM_NODE_ADDR is set where several nodes share one host (the sandbox); on EC2 the
# daemon finds its own address.
docker swarm join --availability drain --token '${worker_token}' \
  ${WARMSWARM_NODE_ADDR:+--advertise-addr "$WARMSWARM_NODE_ADDR" --listen-addr "$WARMSWARM_NODE_ADDR:2377"} \
  '${manager_addr}'
