"""The strict EC2 layer's instances: AWS's rules (warmswarm_ec2rules: capacity, ClientTokens, state changes) on
moto's world, pending after a launch or a start, kept volumes detaching at terminate."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final
from xml.etree import ElementTree as ET

from warmswarm_ec2rules import instances
from warmswarm_ec2rules.capacity import Offering, capacity_refusal
from warmswarm_ec2rules.refusals import Refusal

from warmswarm_sandbox.strict_ec2_state import IdempotentCalls, Mirror, Move, NodeAddresses
from warmswarm_sandbox.strict_ec2_upstream import Answer, Call, Upstream
from warmswarm_sandbox.strict_ec2_wire import (
    XmlAnswer,
    items,
    numbered,
    param,
    remove_items,
    set_text,
    take_filters,
    text,
)

_INSTANCE_STATE_FILTERS: Final = ("instance-state-name", "instance-state-code")


class InstanceRules:
    """RunInstances, StartInstances, StopInstances, DescribeInstances and TerminateInstances as AWS answers them."""

    def __init__(
        self, upstream: Upstream, mirror: Mirror, tokens: IdempotentCalls, addresses: NodeAddresses | None = None
    ) -> None:
        self._upstream = upstream
        self._mirror = mirror
        self._tokens = tokens
        # In the sandbox: each instance's private address is its machine's address on the sandbox's bridge.
        self.addresses = addresses
        # (instance type, AZ); AZ None: no capacity for the type anywhere.
        self.no_capacity: set[Offering] = set()

    async def run_instances(self, call: Call) -> Answer:
        return await self._tokens.idempotent(call, self._launch, self._as_now)

    async def _as_now(self, call: Call, first: Answer) -> Answer:
        """A replayed launch: its first answer, each instance's state as it is now (terminated once gone)."""
        xml = XmlAnswer.parse(first.body)
        for instance in items(xml.root, "instancesSet"):
            instance_id = text(instance, "instanceId") or ""
            found = await self._upstream.instance(call, instance_id)
            state = "terminated" if found is None else text(found, "instanceState/name") or "terminated"
            state = self._mirror.visible_state(instance_id, state, time.monotonic()) or state
            set_text(instance, "instanceState/name", state)
            set_text(instance, "instanceState/code", instances.STATE_CODES.get(state, "48"))
        return first.with_xml(xml)

    async def _launch(self, call: Call) -> Answer:
        instance_type = param(call.params, "InstanceType") or "m1.small"  # EC2's default type
        zone = await self._launch_zone(call)
        no_room = capacity_refusal(self.no_capacity, instance_type, zone)
        if no_room is not None:
            return Answer.refused(no_room)
        # AWS launches as many as it has capacity for, up to MaxCount (at least MinCount); moto launches
        # MinCount. Capacity here is all or nothing for a (type, zone), so AWS would launch MaxCount.
        most = param(call.params, "MaxCount")
        params = [(key, most if key == "MinCount" and most else value) for key, value in call.params]
        answer = await self._upstream.forward(call, params)
        if answer.ok:
            launched_s = time.monotonic()
            xml = XmlAnswer.parse(answer.body)
            for instance in items(xml.root, "instancesSet"):
                self._mirror.started_s[text(instance, "instanceId") or ""] = launched_s
                self._give_address(instance)
            answer = answer.with_xml(xml)
        return answer

    def _give_address(self, instance: ET.Element) -> None:
        if self.addresses is None:
            return
        address = self.addresses.of(text(instance, "instanceId") or "")
        set_text(instance, "privateIpAddress", address)
        set_text(instance, "privateDnsName", f"ip-{address.replace('.', '-')}.ec2.internal")

    async def _launch_zone(self, call: Call) -> str | None:
        zone = param(call.params, "Placement.AvailabilityZone")
        subnet_id = param(call.params, "SubnetId")
        if zone or not subnet_id:
            return zone
        found = await self._upstream.lookup(call, "DescribeSubnets", [("SubnetId.1", subnet_id)])
        subnets = items(None if found is None else found.root, "subnetSet")
        return text(subnets[0], "availabilityZone") if subnets else None

    async def start_instances(self, call: Call) -> Answer:
        def start(instance_id: str, instance: ET.Element, state: str) -> instances.Outcome:
            kind, zone = text(instance, "instanceType") or "", text(instance, "placement/availabilityZone")
            return instances.start(instance_id, state, capacity_refusal=capacity_refusal(self.no_capacity, kind, zone))

        changing = await self._changing(call, start)
        if isinstance(changing, Answer):
            return changing
        answer = await self._upstream.forward(call)
        if answer.ok:
            # A started instance is pending again before it runs, as after a launch (one already pending or
            # running is left as it is).
            started_s = time.monotonic()
            for instance_id in changing:
                self._mirror.started_s[instance_id] = started_s
        return answer

    async def stop_instances(self, call: Call) -> Answer:
        changing = await self._changing(call, lambda instance_id, _, state: instances.stop(instance_id, state))
        return changing if isinstance(changing, Answer) else await self._upstream.forward(call)

    async def _changing(
        self, call: Call, rule: Callable[[str, ET.Element, str], instances.Outcome]
    ) -> list[str] | Answer:
        """The instances `rule` moves to a new state, or its refusal (or moto's, for an unknown id) as the answer."""
        instance_ids = numbered(call.params, "InstanceId")
        found = await self._upstream.lookup(
            call, "DescribeInstances", [(f"InstanceId.{n}", i) for n, i in enumerate(instance_ids, 1)]
        )
        by_id = {
            text(instance, "instanceId") or "": instance
            for reservation in items(None if found is None else found.root, "reservationSet")
            for instance in items(reservation, "instancesSet")
        }
        if not instance_ids or any(instance_id not in by_id for instance_id in instance_ids):
            return await self._upstream.forward(call)  # moto's own answer: InvalidInstanceID.NotFound, ...
        now_s = time.monotonic()
        changing = []
        for instance_id in instance_ids:
            instance = by_id[instance_id]
            state = self._mirror.visible_state(instance_id, text(instance, "instanceState/name"), now_s) or ""
            outcome = rule(instance_id, instance, state)
            if isinstance(outcome, Refusal):
                return Answer.refused(outcome)
            if outcome is not None:
                changing.append(instance_id)
        return changing

    async def describe_instances(self, call: Call) -> Answer:
        # moto would filter on its own state ("running" at once): the state filters are applied here,
        # to the state AWS would show. Taken off every page alike, so moto's NextToken stays valid.
        params, filters = take_filters(call.params, _INSTANCE_STATE_FILTERS)
        answer = await self._upstream.forward(call, params if filters else None)
        mirror = self._mirror
        if not answer.ok or not (filters or mirror.started_s or mirror.moves or self.addresses is not None):
            return answer
        now_s = time.monotonic()
        xml = XmlAnswer.parse(answer.body)
        reservation_set = xml.root.find("reservationSet")
        empty = []
        for reservation in items(xml.root, "reservationSet"):
            instance_set = reservation.find("instancesSet")
            dropped = []
            for instance in items(reservation, "instancesSet"):
                instance_id = text(instance, "instanceId") or ""
                self._give_address(instance)
                state = mirror.visible_state(instance_id, text(instance, "instanceState/name"), now_s)
                if state == "pending":
                    set_text(instance, "instanceState/code", "0")
                    set_text(instance, "instanceState/name", "pending")
                for mapping in items(instance, "blockDeviceMapping"):
                    move = mirror.moves.get(text(mapping, "ebs/volumeId") or "")
                    if move is not None and move.state == "attaching":
                        set_text(mapping, "ebs/status", "attaching")
                fields = {"instance-state-name": state, "instance-state-code": text(instance, "instanceState/code")}
                if not all(one.matches(fields[one.name]) for one in filters):
                    dropped.append(instance)
            if instance_set is not None:
                remove_items(instance_set, dropped)
                if dropped and not instance_set.findall("item"):
                    empty.append(reservation)
        if reservation_set is not None:
            remove_items(reservation_set, empty)
        return answer.with_xml(xml)

    async def terminate_instances(self, call: Call) -> Answer:
        instance_ids = numbered(call.params, "InstanceId")
        async with self._mirror.volume_lock:
            # moto frees kept volumes at once; on AWS they detach while the instance shuts down.
            found = await self._upstream.lookup(
                call, "DescribeInstances", [(f"InstanceId.{n}", i) for n, i in enumerate(instance_ids, 1)]
            )
            kept = [
                (text(instance, "instanceId") or "", mapping)
                for reservation in items(None if found is None else found.root, "reservationSet")
                for instance in items(reservation, "instancesSet")
                # One already shutting down or terminated is left as it is: its volumes are on their way.
                if instances.terminate(text(instance, "instanceState/name") or "") is not None
                for mapping in items(instance, "blockDeviceMapping")
                if text(mapping, "ebs/deleteOnTermination") == "false"
            ]
            answer = await self._upstream.forward(call)
            if answer.ok:
                until_s = time.monotonic() + self._mirror.detach_s
                for instance_id, mapping in kept:
                    volume_id = text(mapping, "ebs/volumeId") or ""
                    self._mirror.moves[volume_id] = Move(
                        "detaching",
                        instance_id,
                        text(mapping, "deviceName") or "",
                        text(mapping, "ebs/attachTime") or "",
                        until_s,
                    )
                for instance_id in instance_ids:
                    self._mirror.started_s.pop(instance_id, None)
            return answer
