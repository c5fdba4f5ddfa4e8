"""Apply: one adapter call per action, each independent of the others' failures, each behind the leader's gate.

The gate is asked right before every call that changes the world: a replica whose lease ran out (by the
clock) while it was applying sends nothing more, whatever the rest of its plan says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import assert_never

from warmswarm_models import (
    CLUSTER_TAG,
    DEFAULT_NODE_CACHE_PATH,
    INSTANCE_BATCH_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_VOLUME_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    LAUNCH_REASON_TAG,
    ROLE_CACHE,
    ROLE_TAG,
    ROLE_WORKER,
    VOLUME_TTL_TAG,
    format_timestamp,
)

from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    AttachVolume,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    LabelNode,
    Launch,
    LaunchBatch,
    RemoveNode,
    Start,
    Stop,
    TagInstance,
    TagVolume,
    Terminate,
)
from warmswarm_autoscaling.plan.volumes import deletable
from warmswarm_autoscaling.ports import (
    Ec2,
    InsufficientCapacity,
    JoinInfo,
    LaunchRequest,
    PortError,
    Swarm,
    TokenSpent,
    VolumeRequest,
)
from warmswarm_autoscaling.userdata import render_user_data


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
    buffer_images: tuple[str, ...] = ()  # pulled by a buffer machine's boot before it joins (and is stopped)


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    error: str | None = None
    instance_id: str | None = None
    volume_id: str | None = None
    # Set when AWS said it has no capacity for this (type, zone): the planner avoids it for a while.
    unavailable_offering: tuple[str, str] | None = None
    # Set when the call was not made, and why (the gate closed, a re-read changed the decision).
    skipped: str | None = None
    # The client token whose first use is over (what it made is gone): the decision takes the next one.
    spent_token: str | None = None
    # Every instance a LaunchBatch started (instance_id is the first of them).
    instance_ids: tuple[str, ...] = ()
    # A warm machine that could not be started (no capacity): the planner terminates it and launches anew.
    failed_start: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None


# Asked right before each mutating call: None to go ahead, else why not (the lease is no longer valid).
Gate = Callable[[], str | None]


def always_open() -> str | None:
    return None


async def apply(
    actions: tuple[Action, ...],
    swarm: Swarm,
    ec2: Ec2,
    template: LaunchTemplate,
    *,
    gate: Gate = always_open,
    clock: Callable[[], float] = time.time,
) -> list[Outcome]:
    # Read only while the gate is open; a launch without it is an error that says why, never a blind launch.
    join: JoinInfo | Exception | str = "it was not read, the gate being closed when apply began"
    if any(isinstance(a, (Launch, LaunchBatch)) for a in actions) and gate() is None:
        join = await _join_info(swarm, template)
    calls = (_gated(a, swarm, ec2, template, join, gate, clock) for a in actions)
    return list(await asyncio.gather(*calls))


async def _gated(
    action: Action,
    swarm: Swarm,
    ec2: Ec2,
    template: LaunchTemplate,
    join: JoinInfo | Exception | str,
    gate: Gate,
    clock: Callable[[], float],
) -> Outcome:
    if isinstance(action, DeleteVolume):
        # The one call that cannot be undone: the volume is read again, and the janitor's rule asked
        # again of what EC2 says now, right before it goes.
        try:
            current = await ec2.describe_volume(action.volume_id)
        except PortError as error:
            return Outcome(action, error=f"could not read {action.volume_id} again before deleting it: {error}")
        refusal = deletable(current, clock()) if current is not None else None
        if refusal:
            return Outcome(action, skipped=f"not deleted: read again, {refusal}")
    closed = gate()
    if closed is not None:
        return Outcome(action, skipped=f"not applied: {closed}")
    return await _apply_one(action, swarm, ec2, template, join)


async def _join_info(swarm: Swarm, template: LaunchTemplate) -> JoinInfo | Exception:
    """How new nodes join, or why it is unknown (then no launch happens this cycle)."""
    try:
        join = await swarm.join_info()
    except PortError as error:
        return error
    if template.node_join_addr:
        join = JoinInfo(template.node_join_addr, join.worker_token)
    return join


async def _apply_one(
    action: Action, swarm: Swarm, ec2: Ec2, template: LaunchTemplate, join: JoinInfo | Exception | str
) -> Outcome:
    try:
        match action:
            case Launch():
                if not isinstance(join, JoinInfo):
                    return Outcome(action, error=f"cannot tell how a node joins the swarm, so no launch: {join}")
                try:
                    user_data = render_user_data(
                        join,
                        volume_id=action.volume_id,
                        cache_path=template.node_cache_path,
                        device_wait_s=template.device_wait_s,
                        pull_images=template.buffer_images if action.buffer else (),
                    )
                except ValueError as error:
                    return Outcome(action, error=f"no node boot script, so no launch: {error}")
                instance_id = await ec2.run_instance(_launch_request(action, template, user_data))
                return Outcome(action, instance_id=instance_id)
            case LaunchBatch():
                if not isinstance(join, JoinInfo):
                    return Outcome(action, error=f"cannot tell how a node joins the swarm, so no launch: {join}")
                try:
                    user_data = render_user_data(join, cache_path=template.node_cache_path)
                except ValueError as error:
                    return Outcome(action, error=f"no node boot script, so no launch: {error}")
                instance_ids = await ec2.run_instances(_batch_request(action, template, user_data))
                return Outcome(action, instance_id=instance_ids[0], instance_ids=tuple(instance_ids))
            case TagInstance(instance_id=instance_id, tags=tags):
                await ec2.tag_instance(instance_id, tags)
            case CreateVolume():
                volume_id = await ec2.create_volume(_volume_request(action, template))
                return Outcome(action, volume_id=volume_id)
            case AttachVolume(volume_id=volume_id, instance_id=instance_id, device=device):
                await ec2.attach_volume(volume_id, instance_id, device)
            case DetachVolume(volume_id=volume_id, instance_id=instance_id, force=force):
                await ec2.detach_volume(volume_id, instance_id, force=force)
            case TagVolume(volume_id=volume_id, set_tags=set_tags, remove_keys=remove_keys):
                await ec2.tag_volume(volume_id, set_tags, remove_keys)
            case DeleteVolume(volume_id=volume_id):
                await ec2.delete_volume(volume_id)
            case LabelNode(node_id=node_id, labels=labels, activate=activate):
                await swarm.update_node(node_id, labels=labels, availability="active" if activate else None)
            case Drain(node_id=node_id):
                await swarm.update_node(node_id, availability="drain")
            case Activate(node_id=node_id):
                await swarm.update_node(node_id, availability="active")
            case Terminate(instance_id=instance_id):
                await ec2.terminate_instances([instance_id])
            case Stop(instance_id=instance_id, warm_until=warm_until):
                # The tag first: a machine found stopped without it is a stray, terminated after max_start_s.
                if warm_until is not None:
                    await ec2.tag_instance(instance_id, {INSTANCE_WARM_UNTIL_TAG: format_timestamp(warm_until)})
                await ec2.stop_instances([instance_id])
            case Start(instance_id=instance_id):
                try:
                    await ec2.start_instances([instance_id])
                except InsufficientCapacity as error:
                    return Outcome(action, error=str(error), failed_start=instance_id)
            case RemoveNode(node_id=node_id):
                await swarm.remove_node(node_id)
            case _:
                # A new action kind without its call here is a type error, never an outcome reported as applied.
                assert_never(action)
    except InsufficientCapacity as error:
        assert isinstance(action, (Launch, LaunchBatch))
        return Outcome(action, error=str(error), unavailable_offering=(action.instance_type, action.availability_zone))
    except TokenSpent as error:
        return Outcome(action, error=str(error), spent_token=error.token)
    except PortError as error:
        return Outcome(action, error=str(error))
    return Outcome(action)


def _launch_request(action: Launch, template: LaunchTemplate, user_data: str) -> LaunchRequest:
    tags = {
        CLUSTER_TAG: template.cluster,
        ROLE_TAG: ROLE_WORKER,
        LAUNCH_REASON_TAG: action.reason,
        "Name": f"warmswarm-{template.cluster}-{action.owner}",
        **action.owner.labels(),
    }
    if action.volume_id:
        tags[INSTANCE_VOLUME_TAG] = action.volume_id
    if action.warm_ttl_s > 0:
        tags[INSTANCE_WARM_TTL_TAG] = str(action.warm_ttl_s)
    if action.buffer:
        tags[INSTANCE_BUFFER_TAG] = "true"
        tags["Name"] = f"warmswarm-{template.cluster}-buffer"
    return _request(action.instance_type, action.availability_zone, tags, action.client_token, template, user_data)


def _batch_request(action: LaunchBatch, template: LaunchTemplate, user_data: str) -> LaunchRequest:
    # No owner tags: every instance of one call gets the same tags. Each is bound to an owner when its
    # node joins, and tagged for that owner then (TagInstance).
    tags = {
        CLUSTER_TAG: template.cluster,
        ROLE_TAG: ROLE_WORKER,
        LAUNCH_REASON_TAG: action.reason,
        INSTANCE_BATCH_TAG: action.client_token,
        "Name": f"warmswarm-{template.cluster}-batch",
    }
    return _request(
        action.instance_type, action.availability_zone, tags, action.client_token, template, user_data, action.count
    )


def _request(
    instance_type: str,
    zone: str,
    tags: dict[str, str],
    client_token: str,
    template: LaunchTemplate,
    user_data: str,
    count: int = 1,
) -> LaunchRequest:
    """A RunInstances request from the launch template: the zone's subnet, the template's image and profile."""
    return LaunchRequest(
        instance_type=instance_type,
        availability_zone=zone,
        image_id=template.image_id,
        user_data=user_data,
        tags=tags,
        client_token=client_token,
        subnet_id=template.subnet_ids.get(zone),
        security_group_ids=template.security_group_ids,
        iam_instance_profile=template.iam_instance_profile,
        key_name=template.key_name,
        count=count,
    )


def _volume_request(action: CreateVolume, template: LaunchTemplate) -> VolumeRequest:
    tags = {
        CLUSTER_TAG: template.cluster,
        ROLE_TAG: ROLE_CACHE,
        VOLUME_TTL_TAG: str(action.ttl_s),
        "Name": f"warmswarm-{template.cluster}-cache-{action.owner}",
        **action.owner.labels(),
    }
    return VolumeRequest(
        availability_zone=action.availability_zone,
        size_gib=action.size_gib,
        volume_type=action.volume_type,
        tags=tags,
        client_token=action.client_token,
    )
