"""Apply: one adapter call per action, each independent of the others' failures."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from warmswarm_models import CLUSTER_TAG, LAUNCH_REASON_TAG, ROLE_TAG, ROLE_WORKER

from warmswarm_autoscaling.actions import Action, Activate, Drain, LabelNode, Launch, RemoveNode, Terminate
from warmswarm_autoscaling.ports import Ec2, InsufficientCapacity, JoinInfo, LaunchRequest, PortError, Swarm
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


@dataclass(frozen=True, slots=True)
class Outcome:
    action: Action
    error: str | None = None
    instance_id: str | None = None
    # Set when AWS said it has no capacity for this (type, zone): the planner avoids it for a while.
    unavailable_offering: tuple[str, str] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


async def apply(actions: tuple[Action, ...], swarm: Swarm, ec2: Ec2, template: LaunchTemplate) -> list[Outcome]:
    user_data: str | Exception | None = None
    if any(isinstance(a, Launch) for a in actions):
        user_data = await _user_data(swarm, template)
    return list(await asyncio.gather(*(_apply_one(a, swarm, ec2, template, user_data) for a in actions)))


async def _user_data(swarm: Swarm, template: LaunchTemplate) -> str | Exception:
    """The boot script, or why there is none (then no launch happens this cycle)."""
    try:
        join = await swarm.join_info()
        if template.node_join_addr:
            join = JoinInfo(template.node_join_addr, join.worker_token)
        return render_user_data(join)
    except (PortError, ValueError) as error:
        return error


async def _apply_one(
    action: Action, swarm: Swarm, ec2: Ec2, template: LaunchTemplate, user_data: str | Exception | None
) -> Outcome:
    try:
        match action:
            case Launch():
                if not isinstance(user_data, str):
                    return Outcome(action, error=f"no node boot script, so no launch: {user_data}")
                instance_id = await ec2.run_instance(_launch_request(action, template, user_data))
                return Outcome(action, instance_id=instance_id)
            case LabelNode(node_id=node_id, labels=labels):
                await swarm.update_node(node_id, labels=labels, availability="active")
            case Drain(node_id=node_id):
                await swarm.update_node(node_id, availability="drain")
            case Activate(node_id=node_id):
                await swarm.update_node(node_id, availability="active")
            case Terminate(instance_id=instance_id):
                await ec2.terminate_instances([instance_id])
            case RemoveNode(node_id=node_id):
                await swarm.remove_node(node_id)
    except InsufficientCapacity as error:
        assert isinstance(action, Launch)
        return Outcome(action, error=str(error), unavailable_offering=(action.instance_type, action.availability_zone))
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
    return LaunchRequest(
        instance_type=action.instance_type,
        availability_zone=action.availability_zone,
        image_id=template.image_id,
        user_data=user_data,
        tags=tags,
        client_token=action.client_token,
        subnet_id=template.subnet_ids.get(action.availability_zone),
        security_group_ids=template.security_group_ids,
        iam_instance_profile=template.iam_instance_profile,
        key_name=template.key_name,
    )
