"""EC2 Query-API answers (XML) for a fleet, in moto's shape (as moto 5.2.5 answered) or the EC2 API reference's.

moto's shape was recorded from moto's server (one instance launched with ten tags, one volume) and turned into the
templates below; the reference's adds the members the EC2 API reference lists for an Instance and a Volume that moto
leaves out (CPU options, boot mode, usage operation, DNS name options, the interface's extras...), as AWS sends them.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Literal
from xml.sax.saxutils import escape

from cycle_world import INSTANCE_TYPE, CacheVolume, Fleet, Machine

Shape = Literal["moto", "reference"]
SHAPES: Final[tuple[Shape, ...]] = ("moto", "reference")
NAMESPACE: Final = "http://ec2.amazonaws.com/doc/2016-11-15/"
ACCOUNT: Final = "123456789012"
# DescribeInstances' page when the request names no MaxResults (the adapter's default): 1,000, AWS's largest.
INSTANCES_PAGE: Final = 1000
# (vCPUs, MiB) of the types the benchmark's settings allow.
TYPES: Final = {"t3.medium": (2, 4096), "m5.large": (2, 8192)}


def ec2_time(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _tag_set(tags: dict[str, str]) -> str:
    items = "".join(f"<item><key>{escape(k)}</key><value>{escape(v)}</value></item>" for k, v in tags.items())
    return f"<tagSet>{items}</tagSet>"


def _ids(machine: Machine) -> dict[str, str]:
    """The ids an instance's answer names besides its own, derived from it (a checksum, so stable across runs)."""
    digest = f"{zlib.crc32(machine.instance_id.encode()):08x}{zlib.crc32(machine.instance_id[::-1].encode()):08x}"
    return {
        "vol": "vol-0" + digest,
        "eni": "eni-0" + digest,
        "attach": "eni-attach-0" + digest,
        "reservation": "r-0" + digest,
        "token": f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[1:4]}-{digest}"[:36],
        "mac": ":".join(["02", digest[0:2], digest[2:4], digest[4:6], digest[6:8], digest[8:10]]),
    }


def _moto_instance(m: Machine, cluster: str) -> str:
    ids, launched, ip, dns = _ids(m), ec2_time(m.launched_at_s), m.private_ip, m.hostname + ".ec2.internal"
    return (
        "<item><architecture>x86_64</architecture><blockDeviceMapping><item><deviceName>/dev/sda1</deviceName><ebs>"
        f"<attachTime>{launched}</attachTime><deleteOnTermination>true</deleteOnTermination><status>attached</status>"
        f"<volumeId>{ids['vol']}</volumeId></ebs></item></blockDeviceMapping><clientToken>{ids['token']}</clientToken>"
        "<ebsOptimized>false</ebsOptimized><hypervisor>xen</hypervisor><networkInterfaceSet><item><attachment>"
        f"<attachTime>{launched}</attachTime><attachmentId>{ids['attach']}</attachmentId>"
        "<deleteOnTermination>false</deleteOnTermination><deviceIndex>0</deviceIndex><status>attached</status>"
        "<networkCardIndex>0</networkCardIndex></attachment><description>Primary network interface</description>"
        "<groupSet><item><groupId>sg-0f91352466b40ac29</groupId><groupName>default</groupName></item></groupSet>"
        f"<ipv6AddressesSet/><macAddress>{ids['mac']}</macAddress><networkInterfaceId>{ids['eni']}</networkInterfaceId>"
        f"<ownerId>{ACCOUNT}</ownerId><privateDnsName>{dns}</privateDnsName><privateIpAddress>{ip}</privateIpAddress>"
        f"<privateIpAddressesSet><item><primary>true</primary><privateIpAddress>{ip}</privateIpAddress></item>"
        "</privateIpAddressesSet><sourceDestCheck>true</sourceDestCheck><status>in-use</status>"
        "<subnetId>subnet-0c743fcb1b4aa786</subnetId><vpcId>vpc-06ff4ab25f1c55a63</vpcId>"
        "<interfaceType>interface</interfaceType></item></networkInterfaceSet><rootDeviceName>/dev/sda1</rootDeviceName>"
        "<rootDeviceType>ebs</rootDeviceType><groupSet/><sourceDestCheck>true</sourceDestCheck>"
        "<sriovNetSupport>simple</sriovNetSupport><stateReason><code/><message/></stateReason>"
        f"{_tag_set(m.instance_tags(cluster))}<virtualizationType>hvm</virtualizationType><hibernationOptions/>"
        "<metadataOptions><state>applied</state><httpTokens>required</httpTokens>"
        "<httpPutResponseHopLimit>1</httpPutResponseHopLimit><httpEndpoint>enabled</httpEndpoint>"
        "<httpProtocolIpv6>disabled</httpProtocolIpv6><instanceMetadataTags>enabled</instanceMetadataTags>"
        f"</metadataOptions><instanceId>{m.instance_id}</instanceId><imageId>ami-0bench000000000001</imageId>"
        f"<instanceState><code>16</code><name>running</name></instanceState><privateDnsName>{dns}</privateDnsName>"
        f"<dnsName/><reason/><amiLaunchIndex>0</amiLaunchIndex><productCodes/><instanceType>{INSTANCE_TYPE}"
        f"</instanceType><launchTime>{launched}</launchTime><placement><groupName/><tenancy>default</tenancy>"
        f"<availabilityZone>{m.zone}</availabilityZone></placement><monitoring><state>disabled</state></monitoring>"
        "<subnetId>subnet-0c743fcb1b4aa786</subnetId><vpcId>vpc-06ff4ab25f1c55a63</vpcId>"
        f"<privateIpAddress>{ip}</privateIpAddress></item>"
    )


def _reference_instance(m: Machine, cluster: str) -> str:
    ids, launched, ip, dns = _ids(m), ec2_time(m.launched_at_s), m.private_ip, m.hostname + ".ec2.internal"
    group = (
        "<groupSet><item><groupId>sg-0f91352466b40ac29</groupId><groupName>warmswarm-nodes</groupName></item>"
        "</groupSet>"
    )
    return (
        f"<item><instanceId>{m.instance_id}</instanceId><imageId>ami-0bench000000000001</imageId>"
        f"<instanceState><code>16</code><name>running</name></instanceState><privateDnsName>{dns}</privateDnsName>"
        "<dnsName/><reason/><keyName>warmswarm-ops</keyName><amiLaunchIndex>0</amiLaunchIndex><productCodes/>"
        f"<instanceType>{INSTANCE_TYPE}</instanceType><launchTime>{launched}</launchTime><placement>"
        f"<availabilityZoneId>use1-az{m.index % 3 + 1}</availabilityZoneId><availabilityZone>{m.zone}"
        "</availabilityZone><groupName/><tenancy>default</tenancy></placement><monitoring><state>disabled</state>"
        "</monitoring><subnetId>subnet-0c743fcb1b4aa786</subnetId><vpcId>vpc-06ff4ab25f1c55a63</vpcId>"
        f"<privateIpAddress>{ip}</privateIpAddress><sourceDestCheck>true</sourceDestCheck>{group}"
        "<architecture>x86_64</architecture><rootDeviceType>ebs</rootDeviceType><rootDeviceName>/dev/xvda"
        "</rootDeviceName><blockDeviceMapping><item><deviceName>/dev/xvda</deviceName><ebs>"
        f"<volumeId>{ids['vol']}</volumeId><status>attached</status><attachTime>{launched}</attachTime>"
        "<deleteOnTermination>true</deleteOnTermination></ebs></item></blockDeviceMapping>"
        f"<virtualizationType>hvm</virtualizationType><clientToken>{ids['token']}</clientToken>"
        f"{_tag_set(m.instance_tags(cluster))}<hypervisor>xen</hypervisor><networkInterfaceSet><item>"
        f"<networkInterfaceId>{ids['eni']}</networkInterfaceId><subnetId>subnet-0c743fcb1b4aa786</subnetId>"
        f"<vpcId>vpc-06ff4ab25f1c55a63</vpcId><description/><ownerId>{ACCOUNT}</ownerId><status>in-use</status>"
        f"<macAddress>{ids['mac']}</macAddress><privateIpAddress>{ip}</privateIpAddress>"
        f"<privateDnsName>{dns}</privateDnsName><sourceDestCheck>true</sourceDestCheck>{group}<attachment>"
        f"<attachmentId>{ids['attach']}</attachmentId><deviceIndex>0</deviceIndex><status>attached</status>"
        f"<attachTime>{launched}</attachTime><deleteOnTermination>true</deleteOnTermination>"
        "<networkCardIndex>0</networkCardIndex><enaQueueCount>2</enaQueueCount></attachment>"
        f"<privateIpAddressesSet><item><privateIpAddress>{ip}</privateIpAddress><privateDnsName>{dns}"
        "</privateDnsName><primary>true</primary></item></privateIpAddressesSet><ipv6AddressesSet/>"
        "<interfaceType>interface</interfaceType><operator><managed>false</managed></operator></item>"
        f"</networkInterfaceSet><iamInstanceProfile><arn>arn:aws:iam::{ACCOUNT}:instance-profile/warmswarm-node"
        "</arn><id>AIPAJBENCHPROFILE0001</id></iamInstanceProfile><ebsOptimized>false</ebsOptimized>"
        "<enaSupport>true</enaSupport><cpuOptions><coreCount>1</coreCount><threadsPerCore>2</threadsPerCore>"
        "</cpuOptions><capacityReservationSpecification><capacityReservationPreference>open"
        "</capacityReservationPreference></capacityReservationSpecification><hibernationOptions>"
        "<configured>false</configured></hibernationOptions><metadataOptions><state>applied</state>"
        "<httpTokens>required</httpTokens><httpPutResponseHopLimit>1</httpPutResponseHopLimit>"
        "<httpEndpoint>enabled</httpEndpoint><httpProtocolIpv6>disabled</httpProtocolIpv6>"
        "<instanceMetadataTags>enabled</instanceMetadataTags></metadataOptions><enclaveOptions><enabled>false"
        "</enabled></enclaveOptions><bootMode>uefi-preferred</bootMode><platformDetails>Linux/UNIX</platformDetails>"
        f"<usageOperation>RunInstances</usageOperation><usageOperationUpdateTime>{launched}</usageOperationUpdateTime>"
        "<privateDnsNameOptions><hostnameType>ip-name</hostnameType><enableResourceNameDnsARecord>false"
        "</enableResourceNameDnsARecord><enableResourceNameDnsAAAARecord>false</enableResourceNameDnsAAAARecord>"
        "</privateDnsNameOptions><maintenanceOptions><autoRecovery>default</autoRecovery><rebootMigration>default"
        "</rebootMigration></maintenanceOptions><currentInstanceBootMode>legacy-bios</currentInstanceBootMode>"
        "<networkPerformanceOptions><bandwidthWeighting>default</bandwidthWeighting></networkPerformanceOptions>"
        "<operator><managed>false</managed></operator></item>"
    )


def instance_reservation(machine: Machine, cluster: str, shape: Shape) -> str:
    """One reservation per instance: warmswarm launches one RunInstances per machine (moto answered the same)."""
    render = _moto_instance if shape == "moto" else _reference_instance
    requester = "" if shape == "moto" else "<requesterId>940372691376</requesterId>"
    return (
        f"<item><reservationId>{_ids(machine)['reservation']}</reservationId><ownerId>{ACCOUNT}</ownerId>"
        f"{requester}<groupSet/><instancesSet>{render(machine, cluster)}</instancesSet></item>"
    )


def instances_page(reservations: Sequence[str], next_token: str | None) -> bytes:
    token = f"<nextToken>{next_token}</nextToken>" if next_token else ""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstancesResponse xmlns="{NAMESPACE}">'
        f"<requestId>{_request_id(len(reservations))}</requestId><reservationSet>{''.join(reservations)}"
        f"</reservationSet>{token}</DescribeInstancesResponse>"
    ).encode()


def _volume(volume: CacheVolume, cluster: str, shape: Shape) -> str:
    extra = (
        ""
        if shape == "moto"
        else "<kmsKeyId>arn:aws:kms:us-east-1:123456789012:key/6876fb1b-example</kmsKeyId><snapshotId/>"
        "<multiAttachEnabled>false</multiAttachEnabled><fastRestored>false</fastRestored>"
        "<throughput>125</throughput><sseType>sse-ebs</sseType>"
    )
    return (
        f"<item><iops>3000</iops>{_tag_set(volume.tags(cluster))}<volumeType>gp3</volumeType>"
        f"<volumeId>{volume.volume_id}</volumeId><size>10</size><availabilityZone>{volume.zone}</availabilityZone>"
        f"<status>available</status><createTime>{ec2_time(volume.created_at_s)}</createTime><attachmentSet/>"
        f"<encrypted>true</encrypted>{extra}</item>"
    )


def volume_items(fleet: Fleet, shape: Shape) -> dict[str, str]:
    """Each cache volume's item of a DescribeVolumes answer, by volume id."""
    return {v.volume_id: _volume(v, fleet.cluster, shape) for v in fleet.volumes}


def volumes_answer(items_by_id: Mapping[str, str], volume_ids: Collection[str] | None = None) -> bytes:
    """The volumes in one answer (the adapter names no MaxResults, and then EC2 sends them all): every one, or those
    of `volume_ids` (a volume-id filter; an id EC2 does not have is simply absent)."""
    chosen = items_by_id.values() if volume_ids is None else (items_by_id[i] for i in volume_ids if i in items_by_id)
    items = "".join(chosen)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeVolumesResponse xmlns="{NAMESPACE}">'
        f"<requestId>{_request_id(len(items))}</requestId><volumeSet>{items}</volumeSet></DescribeVolumesResponse>"
    ).encode()


def instance_types_answer(names: Sequence[str]) -> bytes:
    """moto's DescribeInstanceTypes item for each known name, with that type's vCPUs and memory."""
    items = "".join(
        f"<item><instanceType>{name}</instanceType><currentGeneration>true</currentGeneration>"
        "<supportedUsageClasses><item>on-demand</item><item>spot</item></supportedUsageClasses>"
        "<bareMetal>false</bareMetal><hypervisor>nitro</hypervisor><processorInfo><supportedArchitectures>"
        "<item>x86_64</item></supportedArchitectures><sustainedClockSpeedInGhz>2.5</sustainedClockSpeedInGhz>"
        f"</processorInfo><vCpuInfo><defaultVCpus>{TYPES[name][0]}</defaultVCpus><defaultCores>1</defaultCores>"
        f"<defaultThreadsPerCore>2</defaultThreadsPerCore></vCpuInfo><memoryInfo><sizeInMiB>{TYPES[name][1]}"
        "</sizeInMiB></memoryInfo><instanceStorageSupported>false</instanceStorageSupported><ebsInfo>"
        "<ebsOptimizedSupport>default</ebsOptimizedSupport><encryptionSupport>supported</encryptionSupport>"
        "<nvmeSupport>required</nvmeSupport><maximumEbsAttachments>27</maximumEbsAttachments></ebsInfo>"
        "<networkInfo><networkPerformance>Up to 5 Gigabit</networkPerformance><maximumNetworkInterfaces>3"
        "</maximumNetworkInterfaces><ipv4AddressesPerInterface>6</ipv4AddressesPerInterface></networkInfo>"
        "<hibernationSupported>true</hibernationSupported><supportedBootModes><item>legacy-bios</item>"
        "<item>uefi</item></supportedBootModes></item>"
        for name in names
        if name in TYPES
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeInstanceTypesResponse xmlns="{NAMESPACE}">'
        f"<requestId>{_request_id(len(items))}</requestId><instanceTypeSet>{items}</instanceTypeSet>"
        "</DescribeInstanceTypesResponse>"
    ).encode()


def error_answer(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{_request_id(0)}</RequestID></Response>"
    ).encode()


def _request_id(salt: int) -> str:
    digest = f"{zlib.crc32(str(salt).encode()):08x}"
    return f"{digest}-1111-4222-8333-{digest}{digest[:4]}"
