"""The services' answers as plain aligned text; pure (the clock comes in as `now`), so tested on fixed JSON."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from warmswarm_models.answers import (
    AutoscalerStatusOut,
    BufferOut,
    DecisionOut,
    ExpiredOut,
    InstanceOut,
    LaunchOut,
    NodeOut,
    PendingOut,
    VolumesOut,
)
from warmswarm_models.cache import RecyclingDecisions
from warmswarm_models.reservation import ReservationOut, ReservationsOut

# Plain text rather than rich tables: rich wraps and cuts cells at the terminal's width, and the
# reason a task waits is the one cell an operator must read whole (and grep, and paste in a ticket).
_GAP = "  "
_NONE = "-"
_TASK_ID_CHARS = 12  # as `docker service ps` shortens them; unique in practice and fits a column
_OWNER_KEYS = (("user_id", "user"), ("project_id", "project"), ("node_id", "node"))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns two spaces apart; the last column is never padded nor cut."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append(_GAP.join(cells).rstrip())
    return lines


def duration(seconds: float) -> str:
    """12s, 5m, 3h, 2d: the largest unit, whole; enough to tell recent from old."""
    seconds = abs(seconds)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def ago(then: float | None, now: float) -> str:
    if then is None:
        return _NONE
    delta = now - then
    return f"in {duration(delta)}" if delta < 0 else f"{duration(delta)} ago"


def epoch(value: object) -> float | None:
    """Epoch seconds from a number or an ISO 8601 string (the volume tags' form); None if neither."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    return None


def moment(value: object, now: float) -> str:
    """'2026-11-30 06:00:00Z (in 23h)'; an unreadable value is shown as it came."""
    at = epoch(value)
    if at is None:
        return _NONE if value in (None, "") else str(value)
    stamp = datetime.fromtimestamp(int(at), tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return f"{stamp} ({ago(at, now)})"


def owner(labels: object) -> str:
    """'user=u1,project=p1,node=n1' (one token: the columns stay splittable); '-' for unowned."""
    if not isinstance(labels, Mapping):
        return _NONE
    parts = [f"{short}={labels[key]}" for key, short in _OWNER_KEYS if labels.get(key)]
    parts += [f"{key}={value}" for key, value in labels.items() if key not in dict(_OWNER_KEYS) and value]
    return ",".join(parts) or _NONE


def text(value: object) -> str:
    if value is None or value == "":
        return _NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value).replace("\n", " ")


def _section(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> list[str]:
    if not rows:
        return [f"{title}: {empty}"]
    return [f"{title} ({len(rows)})", *table(headers, rows)]


def status(body: AutoscalerStatusOut | Mapping[str, Any], now: float, *, decisions: int = 10) -> str:
    """The autoscaler's /v1/status as tables: nodes, pending tasks and why, launches, machines and their tiers, the
    buffers against their targets, decisions."""
    answer = body if isinstance(body, AutoscalerStatusOut) else AutoscalerStatusOut.model_validate(body)
    lines = [_headline(answer, now)]
    lines += ["", *_nodes(answer.nodes)]
    lines += ["", *_pending(answer.pending)]
    lines += ["", *_launches(answer.launches_in_flight)]
    lines += ["", *_machines(answer.instances)]
    lines += ["", *_buffers(answer.buffers)]
    if answer.reservations:  # only where ops made some: the status of a cluster without stays as it was
        lines += ["", *_reservations(answer.reservations, now)]
    lines += ["", *_decisions(answer.decisions, now, decisions)]
    return "\n".join(lines)


def _headline(body: AutoscalerStatusOut, now: float) -> str:
    parts = [f"cluster {text(body.cluster)}"]
    # An autoscaler without leader election reports no flag: nothing to say then.
    if body.leader is not None:
        parts.append(
            "this replica leads"
            if body.leader
            else "this replica follows (only the leader acts; ask it for current state)"
        )
    if body.dry_run:
        parts.append("DRY RUN: decisions are logged, nothing is applied")
    cycle = body.last_cycle
    if cycle is None:
        parts.append("no cycle yet")
    elif cycle.ok:
        parts.append(
            f"last cycle {ago(cycle.started_at, now)}: ok in {text(cycle.duration_s)} s,"
            f" {text(cycle.actions)} action(s)"
        )
    else:
        parts.append(f"last cycle {ago(cycle.started_at, now)} FAILED: {text(cycle.error)}")
    return " · ".join(parts)


def _nodes(nodes: Sequence[NodeOut]) -> list[str]:
    rows = [
        [
            text(n.hostname),
            text(n.role),
            text(n.state),
            text(n.availability),
            owner(n.owner),
            text(n.instance_id),
            text(n.instance_type),
            text(n.availability_zone),
            _NONE if n.idle_s is None else duration(n.idle_s),
        ]
        for n in nodes
    ]
    headers = ["HOSTNAME", "ROLE", "STATE", "AVAILABILITY", "OWNER", "INSTANCE", "TYPE", "ZONE", "IDLE"]
    return _section("NODES", headers, rows, "none")


def _pending(pending: Sequence[PendingOut]) -> list[str]:
    rows = [
        [
            text(p.service),
            text(p.task_id)[:_TASK_ID_CHARS],
            owner(p.owner),
            "unschedulable" if p.unschedulable else "starting" if p.starting else "waiting",
            text(p.reason),
        ]
        for p in pending
    ]
    lines = _section("PENDING TASKS", ["SERVICE", "TASK", "OWNER", "STATE", "WHY IT WAITS"], rows, "none")
    if any(p.unschedulable for p in pending):
        lines.append("unschedulable: no launch can place it; the request (or the autoscaler's settings) must change")
    return lines


def _launches(launches: Sequence[LaunchOut]) -> list[str]:
    rows = [
        [
            text(i.instance_id),
            text(i.instance_type),
            text(i.availability_zone),
            text(i.state),
            owner(i.owner),
            duration(i.age_s),
        ]
        for i in launches
    ]
    headers = ["INSTANCE", "TYPE", "ZONE", "STATE", "OWNER", "AGE"]
    return _section("LAUNCHES IN FLIGHT", headers, rows, "none")


def _machines(machines: Sequence[InstanceOut]) -> list[str]:
    rows = [
        [
            text(i.instance_id),
            text(i.instance_type),
            text(i.availability_zone),
            text(i.state),
            owner(i.owner),
            text(i.tier),
            text(i.tier_until),
        ]
        for i in machines
    ]
    headers = ["INSTANCE", "TYPE", "ZONE", "STATE", "OWNER", "TIER", "UNTIL"]
    return _section("MACHINES", headers, rows, "none")


def _buffers(buffers: Sequence[BufferOut]) -> list[str]:
    """Each part of the buffers: what it holds against its target, and the rule's figures (read whole, as a reason)."""
    rows = [
        [text(b.kind), text(b.instance_type), text(b.availability_zone), f"{b.held}/{b.target}", text(b.said)]
        for b in buffers
    ]
    return _section("BUFFERS", ["KIND", "TYPE", "ZONE", "HELD/TARGET", "WHY"], rows, "none configured")


def _decisions(decisions: Sequence[DecisionOut], now: float, limit: int) -> list[str]:
    # The autoscaler lists them newest first.
    shown = list(decisions[: max(limit, 0)])
    rows = []
    for d in shown:
        if d.dry_run:
            result, reason = "not applied (dry run)", text(d.reason)
        elif d.error:
            result, reason = "FAILED", f"{text(d.reason)} — failed: {text(d.error)}"
        else:
            result = f"ok: {d.created}" if d.created else "ok"
            reason = text(d.reason)
        rows.append([ago(d.at, now), text(d.action), result, reason])
    if not rows:
        return ["LAST DECISIONS: none"]
    title = f"LAST DECISIONS ({len(rows)} of {len(decisions)}, newest first)"
    return [title, *table(["WHEN", "ACTION", "RESULT", "REASON"], rows)]


def volumes(body: VolumesOut | Mapping[str, Any], now: float, *, user: str | None = None) -> str:
    """The autoscaler's /v1/volumes as one table."""
    answer = body if isinstance(body, VolumesOut) else VolumesOut.model_validate(body)
    rows = [
        [
            text(v.volume_id),
            owner(v.owner.model_dump()),
            text(v.availability_zone),
            text(v.state),
            f"{v.size_gib} GiB",
            text(v.volume_type),
            text(v.attached_to),
            moment(v.released_at, now),
            moment(v.expires_at, now),
        ]
        for v in answer.volumes
    ]
    headers = ["VOLUME", "OWNER", "ZONE", "STATE", "SIZE", "TYPE", "ATTACHED TO", "RELEASED", "EXPIRES"]
    empty = f"none for user {user}" if user else "none"
    return "\n".join(_section("CACHE VOLUMES", headers, rows, empty))


def expired(body: ExpiredOut | Mapping[str, Any], now: float) -> str:
    """The answer to an expire request."""
    answer = body if isinstance(body, ExpiredOut) else ExpiredOut.model_validate(body)
    return (
        f"volume {text(answer.volume_id)} now expires at {moment(answer.expires_at, now)};"
        " the autoscaler deletes it once it is available and unclaimed"
    )


# What each answer of a group to a recycling property does for a user in several groups (a refusal wins).
_RECYCLING_PROPERTIES: Final = ("recycle_machines", "accept_recycled")
_OPINIONS: Final = {
    False: " (refuses: wins over any other group's true)",
    True: " (grants, unless another of the user's groups refuses)",
    None: " (no opinion)",
}


def group(group_id: str, properties: Mapping[str, Any], etag: str | None = None) -> str:
    """A group's properties, one per line, after their version (ETag) when the director gave one."""
    rows = []
    for key, value in properties.items():
        shown = text(value)
        if key.endswith("_s") and isinstance(value, int | float) and not isinstance(value, bool) and value >= 60:
            shown += f" ({duration(float(value))})"
        if key in _RECYCLING_PROPERTIES and (value is None or isinstance(value, bool)):
            shown += _OPINIONS[value]
        rows.append([key, shown])
    heading = f"group {group_id}" if etag is None else f"group {group_id}  (etag {etag})"
    return "\n".join([heading, *("  " + line for line in table(["PROPERTY", "VALUE"], rows)[1:])])


def recycling(group_ids: Sequence[str], decisions: RecyclingDecisions, without_properties: Sequence[str]) -> str:
    """What a user in these groups gets for each recycling property, and which groups decided it."""
    rows = []
    for key in _RECYCLING_PROPERTIES:
        decision = getattr(decisions, key)
        if not decision.decided_by:
            why = "no group has an opinion: off"
        else:
            why = ("granted by " if decision.value else "refused by ") + ", ".join(decision.decided_by)
        rows.append([key, text(decision.value), why])
    lines = [f"a user in {', '.join(group_ids)}", *("  " + line for line in table(["PROPERTY", "VALUE", "WHY"], rows))]
    if without_properties:
        lines.append(f"  no properties stored (no opinion): {', '.join(without_properties)}")
    return "\n".join(lines)


def reservations(body: ReservationsOut | Mapping[str, Any], now: float) -> str:
    """The autoscaler's /v1/reservations as one table, then what may make the statuses incomplete."""
    answer = body if isinstance(body, ReservationsOut) else ReservationsOut.model_validate(body)
    lines = _reservations(answer.reservations, now)
    lines += [f"note: {notice}" for notice in answer.notices]
    return "\n".join(lines)


def _reservations(found: Sequence[ReservationOut], now: float) -> list[str]:
    rows = [
        [
            r.id,
            r.group,
            str(r.sessions),
            _size(r),
            moment(r.at, now),
            text(r.zone) if r.zone else "any",
            r.status,
            f"{r.machines_held}/{r.sessions - r.sessions_arrived}",
            text(r.instance_type),
            r.reason,
        ]
        for r in found
    ]
    headers = ["RESERVATION", "GROUP", "SESSIONS", "SIZE", "AT", "ZONE", "STATUS", "HELD", "TYPE", "WHY"]
    return _section("RESERVATIONS", headers, rows, "none")


def _size(r: ReservationOut) -> str:
    gpus = f",{r.resources.gpus}gpu" if r.resources.gpus else ""
    return f"{r.resources.cpus:g}cpu,{r.resources.memory_bytes / 2**20:.0f}MiB{gpus}"


def reservation(body: ReservationOut | Mapping[str, Any], now: float) -> str:
    """The answer to a new reservation: what it holds, and from when to when."""
    r = body if isinstance(body, ReservationOut) else ReservationOut.model_validate(body)
    where = f"in {r.zone}" if r.zone else "in any zone"
    return (
        f"reservation {r.id} for group {r.group}: {r.sessions} sessions of {_size(r)} at {moment(r.at, now)} {where};"
        f" the hot buffer fills from {moment(r.fill_from, now)} (lead {duration(r.lead_s)}) and lets what is unclaimed"
        f" go at {moment(r.release_at, now)}; now {r.status}: {r.reason}"
    )
