"""The machine tiers' part of the planner's rules: arbitrary warm and buffer tags, and what no plan may do to them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import strategies as st
from warmswarm_autoscaling.actions import (
    BindMachine,
    ClaimBufferMachine,
    LabelNode,
    MarkScrubbed,
    RecycleMachine,
    Start,
    Stop,
    StripOwner,
    Terminate,
)
from warmswarm_autoscaling.plan import Plan
from warmswarm_autoscaling.plan.cluster import is_ours
from warmswarm_autoscaling.plan.tiers import STOPPED_STATES
from warmswarm_autoscaling.snapshot import Snapshot
from warmswarm_models import (
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
    INSTANCE_CLAIMED_AT_TAG,
    INSTANCE_LAUNCH_SETTINGS_TAG,
    INSTANCE_RECYCLE_TAG,
    INSTANCE_RECYCLED_TAG,
    INSTANCE_SCRUB_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    OWNER_KEYS,
    Owner,
    format_timestamp,
)
from warmswarm_models.cache import MAX_WARM_TTL_S

from .factories import NOW, set_tags

# The planner's allowed clock skew in the property test's policy (the default): a warm-until this far beyond the
# longest warm tier is still trusted.
POLICY_SKEW_S = 60.0

# A warm-until in the past, ahead, or unreadable; warm tiers odd and proper; a buffer tag in its forms.
_WARM_UNTIL = (format_timestamp(NOW - 60), format_timestamp(NOW + 600), "soon", "")
_WARM_TTL = ("0", "3600", "604801", "-5", "warm")
_BUFFER = ("true", "TRUE", "false", "")
# The hot buffer's kind, and a claim's moment: just now, long ago (past any hot_attach_s), unreadable.
_BUFFER_KIND = (BUFFER_KIND_HOT, "warm", "")
_CLAIMED_AT = (format_timestamp(NOW - 30), format_timestamp(NOW - 3600), "soon")
# Recycling: the group's mark, a count, the scrub owed or proven (or unreadable), launch settings not today's.
_RECYCLE = ("true", "false", "")
_RECYCLED = ("1", "2", "19", "x")
_SCRUB = ("pending-1", "pending-2", "done-1", "done-2", "pending-x", "")
_LAUNCH_SETTINGS = ("0123456789abcdef",)


@dataclass(frozen=True, slots=True)
class Broken:
    """A rule a plan broke, with what broke it."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@st.composite
def tier_tags(draw: st.DrawFn) -> dict[str, str]:
    tags: dict[str, str] = {}
    for key, values in ((INSTANCE_WARM_UNTIL_TAG, _WARM_UNTIL), (INSTANCE_WARM_TTL_TAG, _WARM_TTL)):
        if draw(st.integers(0, 2)) == 0:
            tags[key] = draw(st.sampled_from(values))
    if draw(st.integers(0, 3)) == 0:
        tags[INSTANCE_BUFFER_TAG] = draw(st.sampled_from(_BUFFER))
    if draw(st.integers(0, 3)) == 0:
        tags[INSTANCE_BUFFER_KIND_TAG] = draw(st.sampled_from(_BUFFER_KIND))
    if draw(st.integers(0, 3)) == 0:
        tags[INSTANCE_CLAIMED_AT_TAG] = draw(st.sampled_from(_CLAIMED_AT))
    recycling: tuple[tuple[str, tuple[str, ...]], ...] = (
        (INSTANCE_RECYCLE_TAG, _RECYCLE),
        (INSTANCE_RECYCLED_TAG, _RECYCLED),
        (INSTANCE_SCRUB_TAG, _SCRUB),
        (INSTANCE_LAUNCH_SETTINGS_TAG, _LAUNCH_SETTINGS),
    )
    for key, choices in recycling:
        if draw(st.integers(0, 3)) == 0:
            tags[key] = draw(st.sampled_from(choices))
    return tags


def tier_rules(snapshot: Snapshot, result: Plan) -> list[Broken]:
    """Broken rules about stopped, warm and buffer machines; and no machine's state changed twice in one plan."""
    # A machine's state changes and its owner's tags: twice in one cycle, the second call fails (a stop of a
    # stopping machine) or races the first. (Node updates and volume tags may repeat harmlessly: not checked.)
    tagging = BindMachine | ClaimBufferMachine
    keys = Counter((a.kind, a.target) for a in result.actions if isinstance(a, Start | Stop | tagging | Terminate))
    twice = [key for key, count in keys.items() if count > 1]
    instances = {i.id: i for i in snapshot.instances}
    nodes_of = {n.engine_instance_id: n for n in snapshot.nodes if n.engine_instance_id}
    # Work that keeps a machine: its owner's (a foreign task moves when the machine goes), or any on a buffer machine.
    owners = {n.id: n.owner for n in snapshot.nodes}
    work = [t for t in snapshot.tasks if t.node_id and t.is_active and not t.global_service]
    broken = [Broken("the same action twice", " ".join(key)) for key in twice]
    standing = {n.engine_instance_id for n in snapshot.nodes if is_ours(n, instances)}
    attached = {a.instance_id for v in snapshot.volumes for a in v.attachments if a.state != "detached"}
    # A buffer machine's claim (owner tags written to a stopped one) and a terminate of it: its owner would wait on a
    # machine that goes. (A running machine's owner tags follow its node's labels; it may go too: nobody waits on it.)
    buffered = {i.id for i in snapshot.instances if i.in_buffer and i.state == "stopped"}
    claimed = {
        a.instance_id
        for a in result.actions
        if isinstance(a, tagging) and a.instance_id in buffered and OWNER_KEYS & set_tags(a).keys()
    }
    broken += [
        Broken("machine claimed and terminated in one plan", a.instance_id)
        for a in result.actions
        if isinstance(a, Terminate) and a.instance_id in claimed
    ]
    # Tiers end by AWS's clock; a warm-until is trusted up to the later clock's reach (plan/clock.py).
    aws_now = snapshot.now if snapshot.aws_now is None else snapshot.aws_now
    later = max(snapshot.now, aws_now)
    for action in result.actions:
        if isinstance(action, Start) and instances[action.instance_id].scrub_owed:
            i = instances[action.instance_id]
            # A scrub boot: only of a stripped machine (the buffer's, nobody's), stopped, with nothing attached.
            if not (i.in_buffer and i.state == "stopped") or i.id in attached:
                broken.append(Broken("scrub boot of a machine not stripped or still attached", i.id))
        elif isinstance(action, Start):
            i = instances[action.instance_id]
            if (
                i.state != "stopped"
                or i.warm_until is None
                or i.warm_until <= aws_now
                or i.id in snapshot.carried.failed_starts
            ):
                broken.append(Broken("start of a machine no tier keeps", f"{i.id} {i.state} until {i.warm_until}"))
            if i.owner is None or i.owner.is_nobody:
                broken.append(Broken("start of nobody's machine", i.id))
        if isinstance(action, Terminate) and action.instance_id in instances:
            i = instances[action.instance_id]
            # A warm-until on a machine still in the buffer (a hand edit) keeps nothing: it is nobody's; nor does one
            # beyond any warm tier (a hand edit, a bad clock), nor a stopped machine no node of ours stands for (its
            # node removed: it cannot come back), nor one whose start failed.
            trusted = i.warm_until is not None and aws_now < i.warm_until <= later + MAX_WARM_TTL_S + POLICY_SKEW_S
            kept = i.state in STOPPED_STATES and trusted and not i.in_buffer
            # Outgrown (tiers.outgrown; test_plan_tiers checks the fit): only for the owner's new work waiting for room.
            outgrown = action.cause == "outgrown" and any(
                t.owner == i.owner and t.node_id is None and t.is_active for t in snapshot.tasks
            )
            excused = (
                (action.cause == "start_failed" and i.id in snapshot.carried.failed_starts)
                or (action.cause == "node_down" and i.state == "stopped" and i.id not in standing)
                or outgrown
            )
            if kept and not excused:
                broken.append(Broken("warm machine terminated before its tier ends", f"{i.id}: {action.reason}"))
        if isinstance(action, Stop):
            node = nodes_of.get(action.instance_id)
            buffer = instances[action.instance_id].in_buffer
            if node is not None and any(_keeps(t.owner, owners[node.id], buffer) for t in work if t.node_id == node.id):
                broken.append(Broken("machine with work stopped", f"{action.instance_id} on {node.id}"))
        if isinstance(action, tagging) and any(key in set_tags(action) for key in OWNER_KEYS):
            i = instances[action.instance_id]
            written = Owner.from_labels(set_tags(action))
            if i.owner is None or (not i.owner.is_nobody and i.owner != written):
                broken.append(Broken("machine's owner tags changed", f"{i.id} of {i.owner} -> {written}"))
        if isinstance(action, LabelNode):
            node = next(n for n in snapshot.nodes if n.id == action.node_id)
            labelled = instances.get(node.engine_instance_id or "")
            if labelled is not None and labelled.in_buffer:
                broken.append(Broken("buffer machine labelled for an owner", f"{node.id} of {labelled.id}"))
            # An owner's labels (and so their work) come only once the node itself says their volume is mounted:
            # a hot claim's attach in flight, or a mount its node refused, must not take the session.
            if labelled is not None and labelled.volume_id is not None and node.mounted_volume_id != labelled.volume_id:
                broken.append(Broken("node labelled before its volume is mounted", f"{node.id} of {labelled.id}"))
    changes = Counter(
        a.instance_id for a in result.actions if isinstance(a, Start | Stop | Terminate | RecycleMachine | StripOwner)
    )
    broken += [Broken("a machine changed twice in one plan", i) for i, count in changes.items() if count > 1]
    broken += recycle_rules(snapshot, result)
    return broken


def recycle_rules(snapshot: Snapshot, result: Plan) -> list[Broken]:
    """What no plan may do with recycling: offer a machine that owes its scrub, carries an attachment or a mount, or a
    recycled one to an owner whose groups do not accept it; recycle a machine its group does not let go; strip an
    owner before their volume is detached; mark a scrub no node proved."""
    instances = {i.id: i for i in snapshot.instances}
    attached = {a.instance_id for v in snapshot.volumes for a in v.attachments if a.state != "detached"}
    mounted = {n.engine_instance_id for n in snapshot.nodes if n.mounted_volume_id and n.engine_instance_id}
    broken: list[Broken] = []
    for action in result.actions:
        if isinstance(action, ClaimBufferMachine):
            i = instances[action.instance_id]
            if i.scrub is not None and not i.scrub.done:
                broken.append(Broken("machine offered before its scrub is proven", i.id))
            if i.id in attached or i.id in mounted:
                broken.append(Broken("machine offered with an attachment or a mount", i.id))
            wanting = [t for t in snapshot.tasks if t.owner == action.owner and t.node_id is None and t.is_active]
            refusing = any(t.cache is None or not t.cache.accept_recycled for t in wanting)
            if i.recycled > 0 and refusing:
                broken.append(Broken("recycled machine given to an owner whose group forbids it", f"{i.id}"))
        if isinstance(action, RecycleMachine):
            i = instances[action.instance_id]
            if not i.recyclable or i.owner is None or i.owner.is_nobody or i.scrub_owed:
                broken.append(Broken("machine recycled that its group does not let go", i.id))
        if isinstance(action, StripOwner):
            i = instances[action.instance_id]
            if i.state != "stopped" or i.id in attached or not i.scrub_owed:
                broken.append(Broken("owner stripped before the machine is stopped and detached", i.id))
        if isinstance(action, MarkScrubbed):
            proof = any(
                n.engine_instance_id == action.instance_id and n.state == "ready" and n.scrubbed == action.generation
                for n in snapshot.nodes
            )
            i = instances[action.instance_id]
            if not proof or i.scrub is None or i.scrub.generation != action.generation:
                broken.append(Broken("scrub marked without its proof", action.instance_id))
    return broken


def _keeps(task_owner: Owner | None, node_owner: Owner | None, buffer: bool) -> bool:
    """Whether a task on a node keeps its machine from being stopped."""
    if buffer:
        return True
    if task_owner is None or node_owner is None or task_owner.is_nobody or node_owner.is_nobody:
        return False
    return all(dict(node_owner.items()).get(key) == value for key, value in task_owner.items())
