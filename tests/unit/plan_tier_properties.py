"""The machine tiers' part of the planner's rules: arbitrary warm and buffer tags, and what no plan may do to them."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
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
    INSTANCE_SERVED_OWNERS_TAG,
    INSTANCE_WARM_TTL_TAG,
    INSTANCE_WARM_UNTIL_TAG,
    LAUNCH_REASON_TAG,
    OWNER_KEYS,
    Owner,
    format_timestamp,
)
from warmswarm_models.cache import MAX_WARM_TTL_S
from warmswarm_models.keys import LAUNCH_REASON_STRIPPED

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
# Recycling: the group's mark, a count (or an odd one), the scrub owed or proven by token (legacy, garbled), the audit
# tag, a stripped launch reason, launch settings not today's. Tokens of two marks of generation 1 and one of 2: a node
# may show the proof of either (plan_properties._node).
MARK_1, MARK_1_EARLIER, MARK_2 = f"1.{int(NOW) - 600}", f"1.{int(NOW) - 90_000}", f"2.{int(NOW) - 600}"
_RECYCLE = ("true", "false", "")
_RECYCLED = ("0", "1", "2", "19", "x", "01")
_SCRUB = (
    *(f"{state}-{token}" for state in ("pending", "done") for token in (MARK_1, MARK_1_EARLIER, MARK_2)),
    *("pending-1", "pending-2", "done-1", "done-2", "pending-x", "done-1.", ""),
)
_SERVED_OWNERS = ("carol/p2", "carol/p2 dave/p3", "")
_LAUNCH_REASON = (LAUNCH_REASON_STRIPPED, "t1 of alice/p1/n1 waits")
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
        (INSTANCE_SERVED_OWNERS_TAG, _SERVED_OWNERS),
        (LAUNCH_REASON_TAG, _LAUNCH_REASON),
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
    aws_now = snapshot.now if snapshot.aws_now is None else snapshot.aws_now
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
            if _may_have_served_others(i.tags) and refusing:
                broken.append(Broken("recycled machine given to an owner whose group forbids it", f"{i.id}"))
        if isinstance(action, RecycleMachine):
            i = instances[action.instance_id]
            if not i.recyclable or i.owner is None or i.owner.is_nobody or i.scrub_owed:
                broken.append(Broken("machine recycled that its group does not let go", i.id))
            known = _known_count(i.tags)
            if known is None:
                broken.append(Broken("machine of unknown recycle count recycled again", i.id))
            elif action.generation != known + 1:
                broken.append(
                    Broken("recycle not counted on from the count", f"{i.id}: {known} -> {action.generation}")
                )
            if action.token != f"{action.generation}.{int(aws_now)}":  # the plan's clock: AWS's
                broken.append(Broken("mark not stamped with its moment", f"{i.id}: {action.token}"))
        if isinstance(action, StripOwner):
            i = instances[action.instance_id]
            if i.state != "stopped" or i.id in attached or not i.scrub_owed:
                broken.append(Broken("owner stripped before the machine is stopped and detached", i.id))
        if isinstance(action, MarkScrubbed):
            # The raw tag, not the reader's Scrub: the proof is the very text the pending tag asked for.
            asked = instances[action.instance_id].tags.get(INSTANCE_SCRUB_TAG, "")
            proof = any(
                n.engine_instance_id == action.instance_id and n.state == "ready" and n.scrubbed == action.token
                for n in snapshot.nodes
            )
            if not proof or asked != f"pending-{action.token}" or "." not in action.token:
                broken.append(Broken("scrub marked without its proof", f"{action.instance_id}: {asked!r}"))
    return broken


def _may_have_served_others(tags: Mapping[str, str]) -> bool:
    """From the raw tags, not the reader: a machine that never served another owner carries no trace of a recycle at
    all (no scrub tag, no audit tag, no stripped launch reason) and a count that is absent or exactly "0"."""
    traces = INSTANCE_SCRUB_TAG in tags or INSTANCE_SERVED_OWNERS_TAG in tags
    return (
        traces or tags.get(LAUNCH_REASON_TAG) == LAUNCH_REASON_STRIPPED or tags.get(INSTANCE_RECYCLED_TAG, "0") != "0"
    )


def _known_count(tags: Mapping[str, str]) -> int | None:
    """The recycle count the tags prove, from the raw text: 0 without any trace; n where the count says n in plain
    digits, the scrub tag (which every recycle writes beside it) is of generation n, and the audit tag names at most n
    owners; None (unknown) otherwise."""
    count = tags.get(INSTANCE_RECYCLED_TAG)
    if count is None:
        return None if _may_have_served_others(tags) else 0
    if not re.fullmatch(r"0|[1-9][0-9]{0,4}", count):
        return None
    scrub = tags.get(INSTANCE_SCRUB_TAG)
    if scrub is None:
        return 0 if count == "0" and not _may_have_served_others({**tags, INSTANCE_RECYCLED_TAG: "0"}) else None
    match = re.fullmatch(r"(?:pending|done)-([1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))?", scrub)
    if match is None or match.group(1) != count or len(tags.get(INSTANCE_SERVED_OWNERS_TAG, "").split()) > int(count):
        return None
    return int(count)


def _keeps(task_owner: Owner | None, node_owner: Owner | None, buffer: bool) -> bool:
    """Whether a task on a node keeps its machine from being stopped."""
    if buffer:
        return True
    if task_owner is None or node_owner is None or task_owner.is_nobody or node_owner.is_nobody:
        return False
    return all(dict(node_owner.items()).get(key) == value for key, value in task_owner.items())
