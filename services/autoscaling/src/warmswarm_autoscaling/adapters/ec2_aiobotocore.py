"""The Ec2 port on aiobotocore: one cluster's instances, cache volumes and the instance types; AWS errors made ours."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Final

from warmswarm_models import CLUSTER_TAG, GPU, ROLE_CACHE, ROLE_TAG, Resources

from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client
from warmswarm_autoscaling.adapters.ec2_reader import Ec2Reader
from warmswarm_autoscaling.adapters.ec2_states import Ec2InstanceStates
from warmswarm_autoscaling.ports import Ec2Error, LaunchRequest, TokenSpent, VolumeRequest
from warmswarm_autoscaling.readings import read_instance, read_volume
from warmswarm_autoscaling.snapshot import Instance, InstanceType, Volume, VolumeAttachment

log = logging.getLogger(__name__)

# Every state but terminated: a stopped or stopping instance is still ours to account for.
_LISTED_STATES: Final = ("pending", "running", "shutting-down", "stopping", "stopped")
_VOLUME_NOT_FOUND_CODE: Final = "InvalidVolume.NotFound"
# The role tag on the root volume of an instance we launch. Not ROLE_CACHE: a root volume goes with its
# instance and must never be listed, kept, reattached or deleted as a cache volume.
ROLE_ROOT: Final = "root"
# DescribeVolumes' MaxResults is 5-500 (DescribeInstances' goes to 1000): a larger page size is capped.
_VOLUMES_MAX_PAGE: Final = 500
_TAG_VALUE_MAX_CHARS: Final = 255  # EC2 rejects longer tag values
# DescribeInstances' page size when reads run on a reader (ec2_reader.py) and none is given. botocore feeds a
# whole answer to expat in one C call, which holds the GIL and so stalls the service's loop too: measured on
# loopback, a 1,000-instance page (4.9 MB) is ~150 ms of it, a 250-instance one ~16 ms. Ten thousand instances
# take 40 calls instead of 10, well within DescribeInstances' request rate.
READER_PAGE_SIZE: Final = 250
# DescribeInstanceTypes takes at most 100 names.
_DESCRIBE_TYPES_MAX_NAMES: Final = 100
# Values of one filter in a Describe call: AWS allows 200.
_FILTER_MAX_VALUES: Final = 200


class AiobotocoreEc2(Ec2InstanceStates):
    """Implements ports.Ec2. `call_counts[(operation, code)]` counts AWS calls by outcome ("ok" on success)."""

    def __init__(
        self,
        client: Ec2Client,
        *,
        launch_client: Ec2Client | None = None,
        reader: Ec2Reader | None = None,
        page_size: int | None = None,
    ) -> None:
        super().__init__(client, launch_client=launch_client, reader=reader)
        # page_size is DescribeInstances' MaxResults (AWS allows 5-1000); None lets AWS choose, except with a
        # reader, whose pages must stay small enough to parse in one short hold of the GIL.
        self._page_size = READER_PAGE_SIZE if page_size is None and reader is not None else page_size

    async def list_instances(self, cluster: str) -> list[Instance]:
        return await self._instances(_instance_filters(cluster))

    async def describe_instances(self, cluster: str, instance_ids: Sequence[str]) -> list[Instance]:
        # By filter, not InstanceIds=: with InstanceIds AWS fails the whole call (InvalidInstanceID.NotFound) for one
        # id that is gone, where the filter leaves it out of the answer.
        unique = sorted(set(instance_ids))
        found: list[Instance] = []
        for start in range(0, len(unique), _FILTER_MAX_VALUES):
            chunk = unique[start : start + _FILTER_MAX_VALUES]
            found += await self._instances([*_instance_filters(cluster), {"Name": "instance-id", "Values": chunk}])
        return found

    async def _instances(self, filters: list[dict[str, Any]]) -> list[Instance]:
        pagination: dict[str, int] = {"PageSize": self._page_size} if self._page_size else {}
        return await self._pages(
            "DescribeInstances",
            "describe_instances",
            lambda page: [
                _instance(raw)
                for reservation in page.get("Reservations", [])
                for raw in reservation.get("Instances", [])
            ],
            Filters=filters,
            PaginationConfig=pagination,
        )

    async def describe_instance_types(self, names: Sequence[str]) -> list[InstanceType]:
        unique = sorted(set(names))
        types: list[InstanceType] = []
        for start in range(0, len(unique), _DESCRIBE_TYPES_MAX_NAMES):
            types += await self._pages(
                "DescribeInstanceTypes",
                "describe_instance_types",
                lambda page: [_instance_type(raw) for raw in page.get("InstanceTypes", [])],
                InstanceTypes=unique[start : start + _DESCRIBE_TYPES_MAX_NAMES],
            )
        return types

    async def run_instance(self, request: LaunchRequest) -> str:
        [instance_id] = await self.run_instances(replace(request, count=1))
        return instance_id

    async def run_instances(self, request: LaunchRequest) -> list[str]:
        placement = {"AvailabilityZone": request.availability_zone}
        params: dict[str, Any] = {
            "ImageId": request.image_id,
            "InstanceType": request.instance_type,
            # As many as there is capacity for, up to count: the machines not launched are planned again.
            "MinCount": 1,
            "MaxCount": request.count,
            "Placement": placement,
            # Plain text: botocore base64-encodes RunInstances' UserData itself.
            "UserData": request.user_data,
            # Makes botocore's own retries of this call safe on AWS: one token, one instance.
            "ClientToken": request.client_token,
            # IMDSv2 only, and its token answers travel one hop: a container on the node (one hop further
            # behind its bridge) cannot get a token, so it cannot read the user data (with the swarm's
            # join token) or the instance role's credentials.
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 1,
                # A buffer machine learns its owner's volume from its tags when claimed (node_cache.sh).
                "InstanceMetadataTags": "enabled",
            },
        }
        if request.tags:
            params["TagSpecifications"] = [
                {"ResourceType": "instance", "Tags": _tag_list(request.tags)},
                {"ResourceType": "volume", "Tags": _tag_list(_root_volume_tags(request.tags))},
            ]
        if request.subnet_id:
            params["SubnetId"] = request.subnet_id
        if request.security_group_ids:
            params["SecurityGroupIds"] = list(request.security_group_ids)
        if request.iam_instance_profile:
            profile = request.iam_instance_profile
            params["IamInstanceProfile"] = {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
        if request.key_name:
            params["KeyName"] = request.key_name
        response = await self._call("RunInstances", "run_instances", client=self._launch_client, **params)
        made = {
            str(raw["InstanceId"]): str(raw.get("State", {}).get("Name", "pending")) for raw in response["Instances"]
        }
        live = [instance_id for instance_id, state in made.items() if state in ("pending", "running")]
        if not live:
            # A replayed token answers with the instances it made the first time, as they are now.
            first_id, state = next(iter(made.items()))
            raise TokenSpent("RunInstances", request.client_token, first_id, state)
        log.info(
            "launched %s (%s in %s, token %s)",
            ", ".join(live),
            request.instance_type,
            request.availability_zone,
            request.client_token,
        )
        return live

    async def list_volumes(self, cluster: str) -> list[Volume]:
        return await self._volumes(_volume_filters(cluster))

    async def describe_volumes(self, cluster: str, volume_ids: Sequence[str]) -> list[Volume]:
        # By filter, as for instances: VolumeIds= fails the whole call (InvalidVolume.NotFound) for one deleted id.
        unique = sorted(set(volume_ids))
        found: list[Volume] = []
        for start in range(0, len(unique), _FILTER_MAX_VALUES):
            chunk = unique[start : start + _FILTER_MAX_VALUES]
            found += await self._volumes([*_volume_filters(cluster), {"Name": "volume-id", "Values": chunk}])
        return found

    async def _volumes(self, filters: list[dict[str, Any]]) -> list[Volume]:
        pagination: dict[str, int] = {"PageSize": min(self._page_size, _VOLUMES_MAX_PAGE)} if self._page_size else {}
        return await self._pages(
            "DescribeVolumes",
            "describe_volumes",
            lambda page: [_volume(raw) for raw in page.get("Volumes", [])],
            Filters=filters,
            PaginationConfig=pagination,
        )

    async def create_volume(self, request: VolumeRequest) -> str:
        params: dict[str, Any] = {
            "AvailabilityZone": request.availability_zone,
            "Size": request.size_gib,
            "VolumeType": request.volume_type,
            # A user's data at rest: always encrypted (with the account's default EBS key).
            "Encrypted": True,
            # A retried CreateVolume (botocore's own retries, or a later cycle that lost the answer)
            # returns the volume the token first made instead of a second, billed one.
            "ClientToken": request.client_token,
        }
        if request.tags:
            params["TagSpecifications"] = [{"ResourceType": "volume", "Tags": _tag_list(request.tags)}]
        response = await self._call("CreateVolume", "create_volume", **params)
        volume_id = str(response["VolumeId"])
        state = str(response.get("State", "creating"))
        if state in ("deleting", "deleted", "error"):
            raise TokenSpent("CreateVolume", request.client_token, volume_id, state)
        log.info(
            "created volume %s (%d GiB %s in %s, token %s)",
            volume_id,
            request.size_gib,
            request.volume_type,
            request.availability_zone,
            request.client_token,
        )
        return volume_id

    async def attach_volume(self, volume_id: str, instance_id: str, device: str) -> None:
        await self._call("AttachVolume", "attach_volume", VolumeId=volume_id, InstanceId=instance_id, Device=device)
        log.info("attaching volume %s to %s as %s", volume_id, instance_id, device)

    async def detach_volume(self, volume_id: str, instance_id: str, *, force: bool = False) -> None:
        # InstanceId is passed, not left to AWS: a volume re-attached elsewhere meanwhile must not be
        # detached from its new instance. Force skips the guest's flush: data may be lost, a last resort.
        await self._call("DetachVolume", "detach_volume", VolumeId=volume_id, InstanceId=instance_id, Force=force)
        log.info("detaching volume %s from %s%s", volume_id, instance_id, " (forced)" if force else "")

    async def tag_instance(self, instance_id: str, tags: Mapping[str, str]) -> None:
        await self._call("CreateTags", "create_tags", Resources=[instance_id], Tags=_tag_list(tags))

    async def untag_instance(self, instance_id: str, keys: Sequence[str]) -> None:
        if not keys:
            return
        # Keys only, as for volumes: with a Value, DeleteTags would remove a tag only while it still holds that
        # value. AWS answers a key the instance does not carry with success.
        tags = [{"Key": key} for key in dict.fromkeys(keys)]
        await self._call("DeleteTags", "delete_tags", Resources=[instance_id], Tags=tags)

    async def tag_volume(self, volume_id: str, set_tags: Mapping[str, str], remove_keys: Sequence[str]) -> None:
        # Two calls, not atomic: the set goes first, so a failure in between leaves the new values in
        # place and only stale keys behind, which the caller's retry removes.
        if set_tags:
            await self._call("CreateTags", "create_tags", Resources=[volume_id], Tags=_tag_list(set_tags))
        if remove_keys:
            # Keys only: with a Value, DeleteTags would remove a tag only while it still holds that value.
            tags = [{"Key": key} for key in dict.fromkeys(remove_keys)]
            await self._call("DeleteTags", "delete_tags", Resources=[volume_id], Tags=tags)

    async def modify_volume(self, volume_id: str, size_gib: int) -> None:
        # The size only: the type, IOPS and throughput stay as they are (AWS keeps what a call leaves out).
        await self._call("ModifyVolume", "modify_volume", VolumeId=volume_id, Size=size_gib)
        log.info("growing volume %s to %d GiB", volume_id, size_gib)

    async def delete_volume(self, volume_id: str) -> None:
        try:
            await self._call("DeleteVolume", "delete_volume", VolumeId=volume_id)
        except Ec2Error as error:
            # Gone already (deleted by an earlier try whose answer was lost): what we wanted.
            if error.code != _VOLUME_NOT_FOUND_CODE:
                raise
            return
        log.info("deleted volume %s", volume_id)

    async def describe_volume(self, volume_id: str) -> Volume | None:
        try:
            response = await self._call("DescribeVolumes", "describe_volumes", VolumeIds=[volume_id])
        except Ec2Error as error:
            if error.code == _VOLUME_NOT_FOUND_CODE:
                return None
            raise
        found = response.get("Volumes", [])
        return _volume(found[0]) if found else None


def _instance_filters(cluster: str) -> list[dict[str, Any]]:
    return [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": list(_LISTED_STATES)},
    ]


def _volume_filters(cluster: str) -> list[dict[str, Any]]:
    # Both tags: the cluster tag alone would also list the root volumes of our instances.
    return [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": f"tag:{ROLE_TAG}", "Values": [ROLE_CACHE]},
    ]


def _instance(raw: Mapping[str, Any]) -> Instance:
    return read_instance(
        id=str(raw["InstanceId"]),
        instance_type=str(raw["InstanceType"]),
        availability_zone=str(raw.get("Placement", {}).get("AvailabilityZone", "")),
        state=str(raw["State"]["Name"]),
        launched_at=float(raw["LaunchTime"].timestamp()),
        tags={str(tag["Key"]): str(tag["Value"]) for tag in raw.get("Tags", [])},
        private_ip=str(raw.get("PrivateIpAddress") or ""),
    )


def _tag_list(tags: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"Key": key, "Value": value[:_TAG_VALUE_MAX_CHARS]} for key, value in tags.items()]


def _root_volume_tags(instance_tags: Mapping[str, str]) -> dict[str, str]:
    """Whose the root volume is (the cluster) and that it is a root volume; nothing of the owner's.

    The owner keys stay on the instance: "the volumes with user_id=X" must mean X's cache volumes only,
    and a root volume holds nothing of the user's (it goes with its instance).
    """
    tags = {ROLE_TAG: ROLE_ROOT}
    if CLUSTER_TAG in instance_tags:
        tags[CLUSTER_TAG] = instance_tags[CLUSTER_TAG]
    return tags


def _volume(raw: Mapping[str, Any]) -> Volume:
    return read_volume(
        id=str(raw["VolumeId"]),
        availability_zone=str(raw.get("AvailabilityZone", "")),
        state=str(raw.get("State", "")),
        size_gib=int(raw.get("Size", 0)),
        volume_type=str(raw.get("VolumeType", "")),
        created_at=float(raw["CreateTime"].timestamp()),
        tags={str(tag["Key"]): str(tag["Value"]) for tag in raw.get("Tags", [])},
        attachments=[_attachment(one) for one in raw.get("Attachments", [])],
    )


def _attachment(raw: Mapping[str, Any]) -> VolumeAttachment:
    attached = raw.get("AttachTime")
    return VolumeAttachment(
        instance_id=str(raw.get("InstanceId", "")),
        state=str(raw.get("State", "")),
        # AWS always sends AttachTime; 0 (the epoch) if not, which reads as "attached long ago".
        attached_at=float(attached.timestamp()) if attached is not None else 0.0,
        device=str(raw.get("Device", "")),
    )


def _instance_type(raw: Mapping[str, Any]) -> InstanceType:
    gpus = sum(int(gpu.get("Count", 0)) for gpu in raw.get("GpuInfo", {}).get("Gpus", []))
    return InstanceType(
        name=str(raw["InstanceType"]),
        resources=Resources(
            cpus=float(raw["VCpuInfo"]["DefaultVCpus"]),
            memory_bytes=int(raw["MemoryInfo"]["SizeInMiB"]) * 2**20,
            generic=MappingProxyType({GPU: gpus} if gpus > 0 else {}),
        ),
        max_ebs_attachments=int(raw.get("EbsInfo", {}).get("MaximumEbsAttachments", 0)),
    )
