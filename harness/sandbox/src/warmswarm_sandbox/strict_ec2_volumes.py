"""The strict EC2 layer's volumes: AWS's EBS rules (warmswarm_ec2rules) on moto's world, attaching, detaching and
modifying that take time, ClientTokens."""

from __future__ import annotations

import time
from typing import Final, Literal
from xml.etree import ElementTree as ET

from warmswarm_ec2rules.modifications import COMPLETED, Modification, modify_refusal, progress_percent, state_of
from warmswarm_ec2rules.volumes import (
    ATTACHED,
    IN_USE,
    EbsVolume,
    Ec2Instance,
    attach_refusal,
    delete_refusal,
    detach_refusal,
)

from warmswarm_sandbox.strict_ec2_state import IdempotentCalls, Mirror, Move
from warmswarm_sandbox.strict_ec2_upstream import Answer, Call, Upstream
from warmswarm_sandbox.strict_ec2_wire import (
    Filter,
    XmlAnswer,
    add_fields,
    items,
    param,
    remove_items,
    set_text,
    take_filters,
    text,
    with_param,
)

_VOLUME_STATE_FILTERS: Final = ("status", "attachment.status", "attachment.instance-id")


class VolumeRules:
    """CreateVolume, AttachVolume, DetachVolume, DeleteVolume, ModifyVolume, DescribeVolumes and
    DescribeVolumesModifications as AWS answers them."""

    def __init__(self, upstream: Upstream, mirror: Mirror, tokens: IdempotentCalls) -> None:
        self._upstream = upstream
        self._mirror = mirror
        self._tokens = tokens

    async def create_volume(self, call: Call) -> Answer:
        return await self._tokens.idempotent(call, self._upstream.forward, self._as_now)

    async def _as_now(self, call: Call, first: Answer) -> Answer:
        """A replayed CreateVolume: its first answer with the volume's state now ("deleted" once gone)."""
        xml = XmlAnswer.parse(first.body)
        found = await self._upstream.volume(call, text(xml.root, "volumeId") or "")
        set_text(xml.root, "status", "deleted" if found is None else text(found, "status") or "deleted")
        return first.with_xml(xml)

    async def attach_volume(self, call: Call) -> Answer:
        volume_id = param(call.params, "VolumeId") or ""
        instance_id = param(call.params, "InstanceId") or ""
        async with self._mirror.volume_lock:
            volume = await self._upstream.volume(call, volume_id)
            instance = await self._upstream.instance(call, instance_id)
            if volume is None or instance is None:
                return await self._upstream.forward(call)  # moto's own NotFound answer
            state = self._mirror.visible_state(instance_id, text(instance, "instanceState/name"), time.monotonic())
            seen = Ec2Instance(instance_id, text(instance, "placement/availabilityZone"), state or "")
            refused = attach_refusal(self._seen(volume_id, volume), seen)
            if refused is not None:
                return Answer.refused(refused)
            answer = await self._upstream.forward(call)
            if answer.ok:
                self._start_move(volume_id, "attaching", instance_id, answer, self._mirror.attach_s)
            return answer

    async def detach_volume(self, call: Call) -> Answer:
        volume_id = param(call.params, "VolumeId") or ""
        async with self._mirror.volume_lock:
            volume = await self._upstream.volume(call, volume_id)
            if volume is None:
                return await self._upstream.forward(call)
            seen = self._seen(volume_id, volume)
            params = call.params
            instance_id = param(params, "InstanceId")
            # Also spares moto's server, which crashes on a DetachVolume of a free volume without InstanceId.
            refused = detach_refusal(seen, instance_id)
            if refused is not None:
                return Answer.refused(refused)
            if instance_id is None:
                # AWS finds the attachment itself; moto's server crashes (HTTP 500) without the InstanceId.
                instance_id = seen.attached_to or ""
                params = with_param(params, "InstanceId", instance_id)
            answer = await self._upstream.forward(call, params if params is not call.params else None)
            if answer.ok:
                self._start_move(volume_id, "detaching", instance_id, answer, self._mirror.detach_s)
            return answer

    def _start_move(
        self,
        volume_id: str,
        state: Literal["attaching", "detaching"],
        instance_id: str,
        answer: Answer,
        takes_s: float,
    ) -> None:
        """Remember that moto's instant attach or detach is, to callers, still in progress for takes_s."""
        attachment = XmlAnswer.parse(answer.body).root
        self._mirror.moves[volume_id] = Move(
            state,
            instance_id,
            text(attachment, "device") or "",
            text(attachment, "attachTime") or "",
            time.monotonic() + takes_s,
        )

    async def delete_volume(self, call: Call) -> Answer:
        volume_id = param(call.params, "VolumeId") or ""
        async with self._mirror.volume_lock:
            # moto refuses an attached volume itself, but knows none still attaching or detaching.
            volume = await self._upstream.volume(call, volume_id)
            refused = None if volume is None else delete_refusal(self._seen(volume_id, volume))
            if refused is not None:
                return Answer.refused(refused)
            return await self._upstream.forward(call)  # moto deletes it, or answers InvalidVolume.NotFound

    async def modify_volume(self, call: Call) -> Answer:
        """A size that only grows, one modification at a time and six hours apart, going modifying, optimizing and
        completed over the mirror's times (moto shrinks a volume, completes at once and allows the next at once)."""
        volume_id = param(call.params, "VolumeId") or ""
        async with self._mirror.volume_lock:
            volume = await self._upstream.volume(call, volume_id)
            if volume is None:
                return await self._upstream.forward(call)  # moto's own NotFound answer
            size_gib = int(text(volume, "size") or "0")
            asked = param(call.params, "Size")
            target_gib = int(asked) if asked is not None and asked.isdigit() else None
            now_s = time.monotonic()
            last = self._mirror.modifications.get(volume_id)
            seen = self._seen(volume_id, volume)
            timing = self._mirror.modification_timing
            refused = modify_refusal(volume_id, seen.state, size_gib, target_gib, last, now_s, timing)
            if refused is not None:
                return Answer.refused(refused)
            answer = await self._upstream.forward(call)
            if not answer.ok:
                return answer
            modification = Modification(volume_id, size_gib, size_gib if target_gib is None else target_gib, now_s)
            self._mirror.modifications[volume_id] = modification
            xml = XmlAnswer.parse(answer.body)
            found = xml.root.find("volumeModification")
            if found is not None:
                self._as_modified_now(found, modification, now_s)
            return answer.with_xml(xml)

    async def describe_volumes_modifications(self, call: Call) -> Answer:
        """Each volume's last modification (moto lists them all), in the state the mirror's times give it."""
        answer = await self._upstream.forward(call)
        if not answer.ok:
            return answer
        xml = XmlAnswer.parse(answer.body)
        modification_set = xml.root.find("volumeModificationSet")
        listed = items(xml.root, "volumeModificationSet")
        last_of = {text(item, "volumeId"): item for item in listed}  # moto lists them in the order they were made
        now_s = time.monotonic()
        for volume_id, item in last_of.items():
            modification = self._mirror.modifications.get(volume_id or "")
            if modification is not None:
                self._as_modified_now(item, modification, now_s)
        if modification_set is not None:
            remove_items(modification_set, [item for item in listed if last_of.get(text(item, "volumeId")) is not item])
        return answer.with_xml(xml)

    def _as_modified_now(self, element: ET.Element, modification: Modification, now_s: float) -> None:
        timing = self._mirror.modification_timing
        state = state_of(modification, now_s, timing)
        set_text(element, "modificationState", state)
        set_text(element, "progress", str(progress_percent(modification, now_s, timing)))
        end_time = element.find("endTime")
        if state != COMPLETED and end_time is not None:
            element.remove(end_time)  # AWS gives an end time only once it is over

    def _seen(self, volume_id: str, volume: ET.Element) -> EbsVolume:
        """The volume as AWS would show it: moto's, with an attach or detach still under way where there is one."""
        zone, state = text(volume, "availabilityZone"), text(volume, "status") or ""
        move = self._mirror.moves.get(volume_id)
        if move is not None:
            # moto attached or freed it at once; on AWS it is in use until the move is done.
            return EbsVolume(volume_id, zone, IN_USE, move.state, move.instance_id)
        attachments = items(volume, "attachmentSet")
        if attachments:
            return EbsVolume(volume_id, zone, state, ATTACHED, text(attachments[0], "instanceId"))
        return EbsVolume(volume_id, zone, state)

    async def describe_volumes(self, call: Call) -> Answer:
        params, filters = take_filters(call.params, _VOLUME_STATE_FILTERS)
        answer = await self._upstream.forward(call, params if filters else None)
        if not answer.ok or not (filters or self._mirror.moves):
            return answer
        xml = XmlAnswer.parse(answer.body)
        volume_set = xml.root.find("volumeSet")
        dropped = []
        for volume in items(xml.root, "volumeSet"):
            volume_id = text(volume, "volumeId") or ""
            move = self._mirror.moves.get(volume_id)
            attachments = items(volume, "attachmentSet")
            if move is not None and move.state == "attaching":
                for attachment in attachments:
                    if text(attachment, "instanceId") == move.instance_id:
                        set_text(attachment, "status", "attaching")
            elif move is not None and not attachments:
                # moto forgot the attachment at once; AWS shows it detaching, the volume still in use.
                set_text(volume, "status", "in-use")
                attachment_set = volume.find("attachmentSet")
                if attachment_set is None:
                    attachment_set = volume.makeelement("attachmentSet", {})
                    volume.append(attachment_set)
                fields = {"volumeId": volume_id, "instanceId": move.instance_id, "device": move.device}
                add_fields(attachment_set, {**fields, "status": "detaching", "attachTime": move.attach_time})
                attachments = items(volume, "attachmentSet")
            if not all(_volume_matches(one, volume, attachments) for one in filters):
                dropped.append(volume)
        if volume_set is not None:
            remove_items(volume_set, dropped)
        return answer.with_xml(xml)


def _volume_matches(one: Filter, volume: ET.Element, attachments: list[ET.Element]) -> bool:
    if one.name == "status":
        return one.matches(text(volume, "status"))
    field = "status" if one.name == "attachment.status" else "instanceId"
    return any(one.matches(text(attachment, field)) for attachment in attachments)
