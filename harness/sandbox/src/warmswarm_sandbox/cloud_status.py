"""A sandbox's status report: each EC2 instance with the machine that plays it, each volume with its folder."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from warmswarm_models import INSTANCE_WARM_UNTIL_TAG, parse_timestamp
from warmswarm_models.tier import machine_tier

from warmswarm_sandbox import aws, node
from warmswarm_sandbox.boot_watcher import node_records
from warmswarm_sandbox.cloud_parts import SandboxError
from warmswarm_sandbox.engine import Engine, EngineError
from warmswarm_sandbox.layout import Layout


def status_report(lay: Layout, ec2_endpoint_url: str, region: str) -> dict[str, Any]:
    """Every EC2 instance and volume, with the machine that plays an instance and the folder
    that holds a volume (None until the volume is first attached)."""
    ec2 = aws.ec2_client(ec2_endpoint_url, region)
    records = node_records(lay)
    try:
        described = aws.all_instances(ec2)
        volumes = aws.all_volumes(ec2)
    except (BotoCoreError, ClientError) as error:
        raise SandboxError(f"moto at {ec2_endpoint_url} does not answer ({error}); is the sandbox up?") from error
    instances = [_instance_status(i, instance, records.get(i)) for i, instance in sorted(described.items())]
    return {"instances": instances, "volumes": [_volume_status(lay, v) for _, v in sorted(volumes.items())]}


def _instance_status(instance_id: str, instance: dict[str, Any], record: node.NodeRecord | None) -> dict[str, Any]:
    powered_on = record is not None and record.is_powered_on()
    docker_host = record.docker_host if record is not None and powered_on else None
    state = instance["State"]["Name"]
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
    warm_until = parse_timestamp(tags.get(INSTANCE_WARM_UNTIL_TAG, ""))
    tier, until = machine_tier(state, warm_until)
    return {
        "instance_id": instance_id,
        "state": state,
        "tier": tier,
        "tier_until": tags.get(INSTANCE_WARM_UNTIL_TAG) if until is not None else None,
        "availability_zone": instance["Placement"]["AvailabilityZone"],
        "node": None if docker_host is None else _swarm_node_id(docker_host),
        "docker_host": docker_host,
    }


def _volume_status(lay: Layout, volume: dict[str, Any]) -> dict[str, Any]:
    # Through the strict layer, so `attaching` and `detaching` show as on AWS.
    attachments = volume.get("Attachments") or []
    backing = lay.volume_file(volume["VolumeId"])
    return {
        "volume_id": volume["VolumeId"],
        "state": volume["State"],
        "availability_zone": volume["AvailabilityZone"],
        "attached_to": attachments[0]["InstanceId"] if attachments else None,
        "host_path": str(backing) if backing.is_file() else None,
    }


def _swarm_node_id(docker_host: str) -> str | None:
    try:
        info = Engine(docker_host, timeout_s=5.0).get("/info")
    except EngineError:
        return None
    node_id = info.get("Swarm", {}).get("NodeID") or None
    return None if node_id is None else str(node_id)
