"""Apply: what the plan says, in the order AWS needs, each action behind the leader's gate; it decides nothing.

Each action is its own call (a stop or a start writes its tag first, a growth its tag after), independent of the
others' failures but for two orders AWS and ownership need: a launch or claim for a volume this plan creates waits
for that create, and a claimed machine's attach for its claim's tags. The gate is asked right before every call that
changes the world: a replica whose lease ran out (by the clock) while it was applying sends nothing more, whatever
the rest says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import assert_never

from warmswarm_autoscaling import tags
from warmswarm_autoscaling.actions import (
    Action,
    Activate,
    AttachVolume,
    BindMachine,
    ClaimBufferMachine,
    CreateVolume,
    DeleteVolume,
    DetachVolume,
    Drain,
    ExpireVolume,
    GrowVolume,
    LabelNode,
    Launch,
    LaunchBatch,
    MarkScrubbed,
    RecycleMachine,
    ReleaseVolume,
    RemoveNode,
    RenewVolume,
    SetVolumeTtl,
    Start,
    Stop,
    StripOwner,
    Terminate,
)
from warmswarm_autoscaling.outcome import Outcome
from warmswarm_autoscaling.plan.volumes import deletable
from warmswarm_autoscaling.ports import (
    Ec2,
    Ec2Error,
    InsufficientCapacity,
    JoinInfo,
    PortError,
    Swarm,
    TokenSpent,
)
from warmswarm_autoscaling.refusals import MODIFICATION_UNDER_WAY, NO_ANSWER_OR_RETRY
from warmswarm_autoscaling.requests import LaunchTemplate, batch_request, launch_request, volume_request
from warmswarm_autoscaling.userdata import render_user_data

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

    # Volumes first, then claims, then attaches, then the rest: a launch or claim for a volume this plan creates goes
    # with that volume's id (or not at all), in the same cycle; a claimed machine's volume is attached only once its
    # owner's tags landed; a stopped machine's attach is sent before its start (AWS refuses to attach to a pending
    # one). Within each phase everything runs at once.
    def send(action: Action) -> Awaitable[Outcome]:
        return _gated(action, swarm, ec2, template, join, gate, clock)

    creates = [a for a in actions if isinstance(a, CreateVolume)]
    created = await asyncio.gather(*(send(a) for a in creates))
    volume_of = {o.action.client_token: o.volume_id for o in created if isinstance(o.action, CreateVolume)}
    claims = [a for a in actions if isinstance(a, ClaimBufferMachine)]
    claimed = await asyncio.gather(*(_with_new_volume(a, volume_of, send) for a in claims))
    unclaimed = {o.action.instance_id for o in claimed if isinstance(o.action, ClaimBufferMachine) and not o.ok}
    attaches = [a for a in actions if isinstance(a, AttachVolume)]
    attached = await asyncio.gather(*(_after_claim(a, unclaimed, send) for a in attaches))
    done: dict[int, Outcome] = {
        id(a): o for a, o in zip((*creates, *claims, *attaches), (*created, *claimed, *attached), strict=True)
    }
    rest = [a for a in actions if not isinstance(a, CreateVolume | ClaimBufferMachine | AttachVolume)]
    outcomes = await asyncio.gather(*(_with_new_volume(a, volume_of, send) for a in rest))
    done.update({id(a): o for a, o in zip(rest, outcomes, strict=True)})
    return [done[id(a)] for a in actions]


async def _after_claim(
    action: AttachVolume, unclaimed: set[str], send: Callable[[Action], Awaitable[Outcome]]
) -> Outcome:
    """An attach to a machine whose claim in this apply did not land is not sent: the machine is not its owner's."""
    if action.instance_id in unclaimed:
        return Outcome(
            action,
            skipped=f"not attached: the claim of {action.instance_id} did not land in this cycle (see that action);"
            " the next cycle decides again",
        )
    return await send(action)


async def _with_new_volume(
    action: Action, volume_of: dict[str, str | None], send: Callable[[Action], Awaitable[Outcome]]
) -> Outcome:
    """A launch or claim for a volume created in this apply carries its id; without one (the create failed) it is not
    made, and the next cycle decides again."""
    if isinstance(action, (Launch, ClaimBufferMachine)) and action.volume_token is not None:
        volume_id = volume_of.get(action.volume_token)
        if volume_id is None:
            verb = "launched" if isinstance(action, Launch) else "claimed"
            return Outcome(
                action,
                skipped=f"not {verb}: its owner's cache volume was not created in this cycle (see that action);"
                " the next cycle decides again",
            )
        action = dataclasses.replace(action, volume_id=volume_id)
    return await send(action)


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
        # By AWS's clock (the Date of that read), which the expiry is kept by; this replica's without one.
        aws_now = ec2.aws_clock()
        refusal = deletable(current, clock() if aws_now is None else aws_now) if current is not None else None
        if refusal:
            return Outcome(action, skipped=f"not deleted: read again, {refusal}")
    if isinstance(action, Drain) and action.if_still_idle:
        # A drain evicts whatever runs there: an idle node is read again right before, since the owner's new
        # session may have landed on it after the observation (the fault campaign's seed 3930).
        try:
            tasks = await swarm.list_tasks()
        except PortError as error:
            return Outcome(
                action, error=f"could not read the tasks of {action.node_id} again before draining it: {error}"
            )
        landed = next((t for t in tasks if t.node_id == action.node_id and t.is_active and not t.global_service), None)
        if landed is not None:
            return Outcome(action, skipped=f"not drained: read again, it runs {landed.service_name} ({landed.id}) now")
    closed = gate()
    if closed is not None:
        return Outcome(action, skipped=f"not applied: {closed}")
    return await _apply_one(action, swarm, ec2, template, join, clock)


async def _grow(action: GrowVolume, ec2: Ec2, clock: Callable[[], float]) -> Outcome:
    """ModifyVolume, then the grown-at tag (AWS's clock), which keeps any replica from asking again for six hours.

    A refusal because a modification is under way or within AWS's six hours means an earlier growth's tag was lost:
    the tag is written now (conservative: six hours from now). Any other refusal AWS answered (a smaller size, no
    permission, ...) is tagged too, so that it is asked again in six hours at the earliest, never each cycle; only a
    call without an answer or one AWS says to retry (throttled, its own failure) is left to the next cycle."""
    try:
        await ec2.modify_volume(action.volume_id, action.to_gib)
    except Ec2Error as error:
        if error.code in NO_ANSWER_OR_RETRY:
            return Outcome(action, error=f"not grown: {error}; the next cycle decides again")
        why = (
            "an earlier growth is under way or within AWS's six hours (its grown-at tag was lost)"
            if error.code in MODIFICATION_UNDER_WAY
            else "refused"
        )
        tag_failed = await _tag_grown(action, ec2, clock)
        held = tag_failed or "tagged grown-at now: not asked again for six hours"
        return Outcome(action, error=f"not grown, {why}: {error}; {held}")
    tag_failed = await _tag_grown(action, ec2, clock)
    if tag_failed:
        # Grown all the same: the next cycle's request within six hours is refused by AWS, and tags it then.
        return Outcome(action, error=f"grown to {action.to_gib} GiB, but {tag_failed}")
    return Outcome(action)


async def _tag_grown(action: GrowVolume, ec2: Ec2, clock: Callable[[], float]) -> str | None:
    """Tag the volume grown-at now, by AWS's clock (the Date of its last answer; this replica's without one); why
    not, if the tag failed."""
    aws_now = ec2.aws_clock()
    try:
        await ec2.tag_volume(action.volume_id, tags.grown_tags(clock() if aws_now is None else aws_now), ())
    except PortError as error:
        return f"its grown-at tag failed: {error}"
    return None


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
    action: Action,
    swarm: Swarm,
    ec2: Ec2,
    template: LaunchTemplate,
    join: JoinInfo | Exception | str,
    clock: Callable[[], float],
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
                        cache_fill_period_s=template.cache_fill_period_s,
                        pull_images=template.buffer_images if action.purpose != "pending_work" else (),
                    )
                except ValueError as error:
                    return Outcome(action, error=f"no node boot script, so no launch: {error}")
                instance_id = await ec2.run_instance(launch_request(action, template, user_data))
                return Outcome(action, instance_id=instance_id)
            case LaunchBatch():
                if not isinstance(join, JoinInfo):
                    return Outcome(action, error=f"cannot tell how a node joins the swarm, so no launch: {join}")
                try:
                    user_data = render_user_data(
                        join, cache_path=template.node_cache_path, cache_fill_period_s=template.cache_fill_period_s
                    )
                except ValueError as error:
                    return Outcome(action, error=f"no node boot script, so no launch: {error}")
                instance_ids = await ec2.run_instances(batch_request(action, template, user_data))
                return Outcome(action, instance_id=instance_ids[0], instance_ids=tuple(instance_ids))
            case BindMachine(instance_id=instance_id, owner=owner):
                await ec2.tag_instance(instance_id, tags.bound_tags(owner))
            case ClaimBufferMachine(instance_id=instance_id):
                # The owner's tags only: the volume's attach is the plan's own action, sent once these landed.
                await ec2.tag_instance(instance_id, tags.claim_tags(action))
            case CreateVolume():
                volume_id = await ec2.create_volume(volume_request(action, template))
                return Outcome(action, volume_id=volume_id)
            case AttachVolume(volume_id=volume_id, instance_id=instance_id, device=device):
                await ec2.attach_volume(volume_id, instance_id, device)
            case DetachVolume(volume_id=volume_id, instance_id=instance_id, force=force):
                await ec2.detach_volume(volume_id, instance_id, force=force)
            case ReleaseVolume(volume_id=volume_id):
                await ec2.tag_volume(volume_id, tags.release_tags(action), ())
            case RenewVolume(volume_id=volume_id):
                await ec2.tag_volume(volume_id, {}, tags.RELEASE_TAG_KEYS)
            case SetVolumeTtl(volume_id=volume_id):
                await ec2.tag_volume(volume_id, tags.ttl_tags(action), ())
            case ExpireVolume(volume_id=volume_id):
                await ec2.tag_volume(volume_id, tags.expiry_tags(action), ())
            case DeleteVolume(volume_id=volume_id):
                await ec2.delete_volume(volume_id)
            case GrowVolume():
                return await _grow(action, ec2, clock)
            case LabelNode(node_id=node_id):
                await swarm.update_node(node_id, labels=tags.node_labels(action), availability="active")
            case Drain(node_id=node_id):
                await swarm.update_node(node_id, availability="drain")
            case Activate(node_id=node_id):
                await swarm.update_node(node_id, availability="active")
            case Terminate(instance_id=instance_id):
                await ec2.terminate_instances([instance_id])
            case Stop(instance_id=instance_id, warm_until=warm_until):
                # The tag first: a machine found stopped without it is a stray, terminated after max_start_s.
                if warm_until is not None:
                    await ec2.tag_instance(instance_id, tags.warm_until_tags(warm_until))
                await ec2.stop_instances([instance_id])
            case Start(instance_id=instance_id):
                # The tag first, like a stop's: a start whose moment is not written could not tell its session's
                # start path (a failed tag is retried with the start next cycle).
                started = tags.started_tags(action)
                if started:
                    await ec2.tag_instance(instance_id, started)
                try:
                    await ec2.start_instances([instance_id])
                except InsufficientCapacity as error:
                    return Outcome(action, error=str(error), failed_start=instance_id)
            case RemoveNode(node_id=node_id):
                await swarm.remove_node(node_id)
            case RecycleMachine(instance_id=instance_id):
                # The owed scrub first: from this tag on nothing offers the machine or gives it work; a failed stop
                # is retried next cycle (plan/recycle.py stops a recycling machine it finds running).
                await ec2.tag_instance(instance_id, tags.recycle_tags(action))
                if action.stop:
                    await ec2.stop_instances([instance_id])
            case StripOwner(instance_id=instance_id):
                # The nodes first (their labels are what places work), then the instance: the buffer's tags, then its
                # owner's removed. A failure part-way leaves a machine that still owes its scrub: retried next cycle.
                for node_id in action.node_ids:
                    await swarm.update_node(node_id, availability="drain", remove_labels=tags.STRIPPED_NODE_LABELS)
                set_tags, remove_keys = tags.strip_tags(template.cluster, action)
                await ec2.tag_instance(instance_id, set_tags)
                await ec2.untag_instance(instance_id, remove_keys)
            case MarkScrubbed(instance_id=instance_id):
                await ec2.tag_instance(instance_id, tags.scrubbed_tags(action))
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
