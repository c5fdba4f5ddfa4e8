"""What every launch shares (the launch template, from settings), and the RunInstances and CreateVolume requests it
makes of a plan's Launch, LaunchBatch and CreateVolume."""

from __future__ import annotations

from dataclasses import dataclass

from warmswarm_models import DEFAULT_NODE_CACHE_PATH

from warmswarm_autoscaling import tags
from warmswarm_autoscaling.actions import CreateVolume, Launch, LaunchBatch
from warmswarm_autoscaling.ports import LaunchRequest, VolumeRequest
from warmswarm_autoscaling.userdata import DEFAULT_CACHE_FILL_PERIOD_S


@dataclass(frozen=True, slots=True)
class LaunchTemplate:
    """What every launch shares, from settings."""

    cluster: str
    image_id: str
    subnet_ids: dict[str, str]
    security_group_ids: tuple[str, ...] = ()
    iam_instance_profile: str | None = None
    key_name: str | None = None
    node_join_addr: str | None = None
    node_cache_path: str = DEFAULT_NODE_CACHE_PATH
    device_wait_s: int = 300
    cache_fill_period_s: int = DEFAULT_CACHE_FILL_PERIOD_S
    buffer_images: tuple[str, ...] = ()  # pulled by a buffer machine's boot before it joins (and is stopped)
    launch_settings: str = ""  # the digest of all the above and the boot scripts (settings.launch_settings_digest)


def launch_request(action: Launch, template: LaunchTemplate, user_data: str) -> LaunchRequest:
    launch_tags = tags.launch_tags(template.cluster, action)
    return _request(
        action.instance_type, action.availability_zone, launch_tags, action.client_token, template, user_data
    )


def batch_request(action: LaunchBatch, template: LaunchTemplate, user_data: str) -> LaunchRequest:
    batch_tags = tags.batch_tags(template.cluster, action)
    return _request(
        action.instance_type,
        action.availability_zone,
        batch_tags,
        action.client_token,
        template,
        user_data,
        action.count,
    )


def _request(
    instance_type: str,
    zone: str,
    instance_tags: dict[str, str],
    client_token: str,
    template: LaunchTemplate,
    user_data: str,
    count: int = 1,
) -> LaunchRequest:
    """A RunInstances request from the launch template: the zone's subnet, the template's image and profile."""
    instance_tags = {**instance_tags, **tags.launch_settings_tags(template.launch_settings)}
    return LaunchRequest(
        instance_type=instance_type,
        availability_zone=zone,
        image_id=template.image_id,
        user_data=user_data,
        tags=instance_tags,
        client_token=client_token,
        subnet_id=template.subnet_ids.get(zone),
        security_group_ids=template.security_group_ids,
        iam_instance_profile=template.iam_instance_profile,
        key_name=template.key_name,
        count=count,
    )


def volume_request(action: CreateVolume, template: LaunchTemplate) -> VolumeRequest:
    return VolumeRequest(
        availability_zone=action.availability_zone,
        size_gib=action.size_gib,
        volume_type=action.volume_type,
        tags=tags.volume_tags(template.cluster, action),
        client_token=action.client_token,
    )
