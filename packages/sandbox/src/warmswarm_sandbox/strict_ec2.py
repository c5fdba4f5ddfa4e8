"""A strict EC2 proxy in front of moto: adds back AWS rules moto skips, and faults; owns only the state they need."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal, NamedTuple
from xml.etree import ElementTree as ET

import aiohttp
from aiohttp import web
from yarl import URL

from warmswarm_sandbox.strict_ec2_admin import admin_routes
from warmswarm_sandbox.strict_ec2_wire import (
    EC2_API_VERSION,
    XML_CONTENT_TYPE,
    Filter,
    Params,
    XmlAnswer,
    add_fields,
    encode_form,
    error_body,
    error_code,
    items,
    numbered,
    param,
    parse_form,
    remove_items,
    set_text,
    take_filters,
    text,
    with_param,
)

log = logging.getLogger(__name__)

OK: Final = "ok"  # the answer code counted for a call that succeeded


class BucketSize(NamedTuple):
    burst: float
    refill_per_s: float


# AWS's documented per-account defaults ("Request throttling for the Amazon EC2 API").
DEFAULT_BUCKETS: Final[Mapping[str, BucketSize]] = {
    "run_instances": BucketSize(burst=5, refill_per_s=2),
    "mutating": BucketSize(burst=50, refill_per_s=5),
    "describe": BucketSize(burst=100, refill_per_s=20),
}

# Headers of one hop, or set again by whoever sends the next one (aiohttp: Host, Content-Length).
_HOP_HEADERS: Final = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host", "content-length"}
)
# aiohttp hands us the answer decompressed, and our server writes its own Date and Server.
_ANSWER_HEADERS_DROPPED: Final = _HOP_HEADERS | {"content-encoding", "date", "server"}

_FORM: Final = "application/x-www-form-urlencoded"
_INSTANCE_STATE_FILTERS: Final = ("instance-state-name", "instance-state-code")
_VOLUME_STATE_FILTERS: Final = ("status", "attachment.status", "attachment.instance-id")


def category(action: str) -> str:
    """The throttling bucket an action draws from: AWS counts non-mutating calls apart from mutating ones."""
    if action == "RunInstances":
        return "run_instances"
    if action.startswith(("Describe", "Get", "List", "Search")):
        return "describe"
    return "mutating"


class TokenBucket:
    """Refills continuously at `refill_per_s` up to `burst`; a call takes one token or is throttled."""

    def __init__(self, size: BucketSize, now_s: float) -> None:
        self.size = size
        self.tokens = float(size.burst)
        self._updated_s = now_s

    def take(self, now_s: float) -> bool:
        elapsed_s = max(0.0, now_s - self._updated_s)
        self.tokens = min(float(self.size.burst), self.tokens + elapsed_s * self.size.refill_per_s)
        self._updated_s = now_s
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class Fault:
    action: str
    code: str
    status: int
    message: str
    times: int


@dataclass(frozen=True)
class _Move:
    """A volume attaching or detaching: moto does either at once, AWS takes a while."""

    state: Literal["attaching", "detaching"]
    instance_id: str
    device: str
    attach_time: str
    until_s: float


@dataclass(frozen=True)
class _Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def code(self) -> str:
        return OK if self.ok else (error_code(self.body) or f"HTTP{self.status}")

    def with_xml(self, xml: XmlAnswer) -> _Answer:
        return replace(self, body=xml.to_bytes())

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=self.body, headers=list(self.headers))

    @classmethod
    def error(cls, status: int, code: str, message: str) -> _Answer:
        return cls(status, error_body(code, message), (("Content-Type", XML_CONTENT_TYPE),))


@dataclass(frozen=True)
class _Call:
    """One EC2 Query call as received: forwarded byte for byte unless a rule changes its parameters."""

    action: str
    params: Params
    body: bytes
    headers: tuple[tuple[str, str], ...]
    path_qs: str


@dataclass(frozen=True)
class _Launch:
    fingerprint: tuple[tuple[str, str], ...]
    answer: _Answer


class StrictEc2:
    """An EC2 Query API proxy that answers as AWS would where moto is lenient. Admin API (JSON) under /strict/."""

    def __init__(
        self,
        upstream_url: str,
        *,
        pending_s: float = 0.0,
        attach_s: float = 0.5,
        detach_s: float = 0.5,
        throttle: bool = True,
        buckets: Mapping[str, BucketSize] | None = None,
    ) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.pending_s = pending_s
        self.attach_s = attach_s
        self.detach_s = detach_s
        self.throttle = throttle
        self.url: str | None = None
        now_s = time.monotonic()
        self._buckets = {
            name: TokenBucket(size, now_s) for name, size in {**DEFAULT_BUCKETS, **(buckets or {})}.items()
        }
        self._faults: list[Fault] = []
        # (instance type, AZ); AZ None: no capacity for the type anywhere.
        self._no_capacity: set[tuple[str, str | None]] = set()
        self._received: Counter[str] = Counter()
        self._forwarded: Counter[str] = Counter()
        self._lookups: Counter[str] = Counter()
        self._answers: defaultdict[str, Counter[str]] = defaultdict(Counter)
        # Mirrors of what moto does not model: when an instance (re)started, volumes on the move,
        # and the first answer to each ClientToken.
        self._started_s: dict[str, float] = {}
        self._moves: dict[str, _Move] = {}
        self._launches: dict[str, _Launch] = {}
        self._token_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # One volume change at a time: a check ("not attached") and the change it allows must not interleave.
        self._volume_lock = asyncio.Lock()
        self._rules: dict[str, Callable[[_Call], Awaitable[_Answer]]] = {
            "RunInstances": self._run_instances,
            "CreateVolume": self._create_volume,
            "StartInstances": self._start_instances,
            "DescribeInstances": self._describe_instances,
            "TerminateInstances": self._terminate_instances,
            "AttachVolume": self._attach_volume,
            "DetachVolume": self._detach_volume,
            "DeleteVolume": self._delete_volume,
            "DescribeVolumes": self._describe_volumes,
        }
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        # trust_env=False (the default, said out loud): no proxy from the environment, only the upstream.
        self._session = aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=120))
        app = web.Application(client_max_size=16 * 2**20)
        # The admin routes first: the catch-all after them sends everything else upstream.
        app.add_routes([*admin_routes(self), web.route("*", "/{tail:.*}", self._handle)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()
        bound_host, bound_port = self._runner.addresses[0][:2]
        self.url = f"http://{bound_host}:{bound_port}"
        log.info("strict EC2 layer on %s in front of %s", self.url, self.upstream_url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- controls (the admin API calls these; in-process tests may too) -------------------------

    def set_capacity(self, instance_type: str, availability_zone: str | None, *, available: bool) -> None:
        """`availability_zone` None: the type in every AZ (also a launch that names no AZ)."""
        offering = (instance_type, availability_zone)
        if available:
            self._no_capacity.discard(offering)
        else:
            self._no_capacity.add(offering)

    def capacity(self) -> list[dict[str, str | None]]:
        """The offerings without capacity."""
        return [{"instance_type": kind, "availability_zone": zone} for kind, zone in sorted(self._no_capacity, key=str)]

    def inject_fault(self, action: str, code: str, *, status: int = 500, times: int = 1, message: str = "") -> None:
        """The next `times` calls of `action` fail with `code` and HTTP `status`, before any other rule."""
        self._faults.append(Fault(action, code, status, message or f"{code} (injected by the strict EC2 layer)", times))

    def faults(self) -> list[dict[str, Any]]:
        return [asdict(fault) for fault in self._faults]

    def clear_faults(self) -> None:
        self._faults.clear()

    def set_bucket(self, name: str, size: BucketSize) -> None:
        if name not in self._buckets:
            raise ValueError(f"unknown bucket {name!r}; one of {sorted(self._buckets)}")
        self._buckets[name] = TokenBucket(size, time.monotonic())

    def buckets(self) -> dict[str, dict[str, float]]:
        return {name: {**bucket.size._asdict(), "tokens": bucket.tokens} for name, bucket in self._buckets.items()}

    def config(self) -> dict[str, float | bool]:
        return {
            "pending_s": self.pending_s,
            "attach_s": self.attach_s,
            "detach_s": self.detach_s,
            "throttle": self.throttle,
        }

    def calls(self) -> dict[str, Any]:
        return {
            "received": dict(self._received),
            "forwarded": dict(self._forwarded),
            "lookups": dict(self._lookups),
            "answers": {action: dict(codes) for action, codes in self._answers.items()},
        }

    def reset(self) -> None:
        """Clears injected faults, capacity holes and counters, and refills the buckets; the world stays."""
        self._faults.clear()
        self._no_capacity.clear()
        for counter in (self._received, self._forwarded, self._lookups):
            counter.clear()
        self._answers.clear()
        for name, bucket in self._buckets.items():
            self._buckets[name] = TokenBucket(bucket.size, time.monotonic())

    # --- the proxy -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = tuple((key, value) for key, value in request.headers.items() if key.lower() not in _HOP_HEADERS)
        params = parse_form(body) if request.method == "POST" and request.content_type == _FORM else None
        if params is None or param(params, "Version") != EC2_API_VERSION:
            answer = await self._send(request.method, request.raw_path, headers, body)
            if request.path == "/moto-api/reset" and answer.ok:
                self._forget_world()
            return answer.response()
        call = _Call(param(params, "Action") or "", params, body, headers, request.raw_path)
        self._received[call.action] += 1
        answer = await self._answer(call)
        self._answers[call.action][answer.code] += 1
        if answer.code != OK:
            log.info("%s answered %s (HTTP %d)", call.action, answer.code, answer.status)
        return answer.response()

    async def _answer(self, call: _Call) -> _Answer:
        now_s = time.monotonic()
        self._prune(now_s)
        fault = next((one for one in self._faults if one.action == call.action), None)
        if fault is not None:
            fault.times -= 1
            if fault.times <= 0:
                self._faults.remove(fault)
            return _Answer.error(fault.status, fault.code, fault.message)
        if self.throttle and not self._buckets[category(call.action)].take(now_s):
            return _Answer.error(503, "RequestLimitExceeded", "Request limit exceeded.")
        rule = self._rules.get(call.action)
        # A DryRun only checks permissions on AWS: no state rule applies, and moto answers DryRunOperation.
        dry_run = (param(call.params, "DryRun") or "").lower() == "true"
        return await rule(call) if rule is not None and not dry_run else await self._forward(call)

    async def _forward(self, call: _Call, params: Params | None = None) -> _Answer:
        """Sends the call upstream: its own body unless `params` replaces it."""
        self._forwarded[call.action] += 1
        body = call.body if params is None else encode_form(params)
        return await self._send("POST", call.path_qs, call.headers, body)

    async def _send(self, method: str, path_qs: str, headers: Sequence[tuple[str, str]], body: bytes) -> _Answer:
        assert self._session is not None, "StrictEc2.start() first"
        url = URL(self.upstream_url + path_qs, encoded=True)
        async with self._session.request(method, url, headers=list(headers), data=body, allow_redirects=False) as got:
            content = await got.read()
            kept = tuple(
                (key, value) for key, value in got.headers.items() if key.lower() not in _ANSWER_HEADERS_DROPPED
            )
            return _Answer(got.status, content, kept)

    async def _lookup(self, call: _Call, action: str, params: Params) -> XmlAnswer | None:
        """A read of moto's view for a rule, outside the client's counts and buckets; None if moto refuses."""
        self._lookups[action] += 1
        # The client's Authorization header carries the account (access key) and region moto keys its state by.
        headers = [(key, value) for key, value in call.headers if key.lower() == "authorization"]
        headers.append(("Content-Type", _FORM))
        answer = await self._send(
            "POST", "/", headers, encode_form([("Action", action), ("Version", EC2_API_VERSION), *params])
        )
        return XmlAnswer.parse(answer.body) if answer.ok else None

    async def _volume(self, call: _Call, volume_id: str) -> ET.Element | None:
        found = await self._lookup(call, "DescribeVolumes", [("VolumeId.1", volume_id)])
        volumes = items(None if found is None else found.root, "volumeSet")
        return volumes[0] if volumes else None

    async def _instance(self, call: _Call, instance_id: str) -> ET.Element | None:
        found = await self._lookup(call, "DescribeInstances", [("InstanceId.1", instance_id)])
        reservations = items(None if found is None else found.root, "reservationSet")
        instances = items(reservations[0], "instancesSet") if reservations else []
        return instances[0] if instances else None

    def _prune(self, now_s: float) -> None:
        self._started_s = {key: at_s for key, at_s in self._started_s.items() if now_s < at_s + self.pending_s}
        self._moves = {key: move for key, move in self._moves.items() if now_s < move.until_s}

    def _forget_world(self) -> None:
        # moto was reset: the instances, volumes and launches these mirror are gone.
        self._started_s.clear()
        self._moves.clear()
        self._launches.clear()

    def _visible_state(self, instance_id: str, moto_state: str | None, now_s: float) -> str | None:
        started_s = self._started_s.get(instance_id)
        if moto_state == "running" and started_s is not None and now_s < started_s + self.pending_s:
            return "pending"
        return moto_state

    # --- instances -------------------------------------------------------------------------------

    async def _run_instances(self, call: _Call) -> _Answer:
        return await self._idempotent(call, self._launch)

    async def _create_volume(self, call: _Call) -> _Answer:
        return await self._idempotent(call, self._forward)

    async def _idempotent(self, call: _Call, act: Callable[[_Call], Awaitable[_Answer]]) -> _Answer:
        """AWS's ClientToken rule: the same token answers the first success again; other arguments are refused."""
        token = param(call.params, "ClientToken")
        if not token:
            return await act(call)
        key = f"{call.action}:{token}"
        # One answer per token even when retries of one call race each other.
        async with self._token_locks[key]:
            fingerprint = tuple(sorted((k, value) for k, value in call.params if k != "ClientToken"))
            seen = self._launches.get(key)
            if seen is not None:
                if seen.fingerprint != fingerprint:
                    return _Answer.error(
                        400,
                        "IdempotentParameterMismatch",
                        f"The client token {token} was used before with different arguments.",
                    )
                return seen.answer
            answer = await act(call)
            # Only a success is remembered: after a failure AWS lets the same token try again.
            if answer.ok:
                self._launches[key] = _Launch(fingerprint, answer)
            return answer

    async def _launch(self, call: _Call) -> _Answer:
        instance_type = param(call.params, "InstanceType") or "m1.small"  # EC2's default type
        zone = await self._launch_zone(call)
        if (instance_type, None) in self._no_capacity or (
            zone is not None and (instance_type, zone) in self._no_capacity
        ):
            where = zone or "any Availability Zone"
            return _Answer.error(
                500,
                "InsufficientInstanceCapacity",
                f"We currently do not have sufficient {instance_type} capacity in {where}."
                " Try another instance type or Availability Zone.",
            )
        answer = await self._forward(call)
        if answer.ok:
            launched_s = time.monotonic()
            for instance in items(XmlAnswer.parse(answer.body).root, "instancesSet"):
                self._started_s[text(instance, "instanceId") or ""] = launched_s
        return answer

    async def _launch_zone(self, call: _Call) -> str | None:
        zone = param(call.params, "Placement.AvailabilityZone")
        subnet_id = param(call.params, "SubnetId")
        if zone or not subnet_id:
            return zone
        found = await self._lookup(call, "DescribeSubnets", [("SubnetId.1", subnet_id)])
        subnets = items(None if found is None else found.root, "subnetSet")
        return text(subnets[0], "availabilityZone") if subnets else None

    async def _start_instances(self, call: _Call) -> _Answer:
        answer = await self._forward(call)
        if answer.ok:
            # A started instance is pending again before it runs, as after a launch.
            started_s = time.monotonic()
            for instance_id in numbered(call.params, "InstanceId"):
                self._started_s[instance_id] = started_s
        return answer

    async def _describe_instances(self, call: _Call) -> _Answer:
        # moto would filter on its own state ("running" at once): the state filters are applied here,
        # to the state AWS would show. Taken off every page alike, so moto's NextToken stays valid.
        params, filters = take_filters(call.params, _INSTANCE_STATE_FILTERS)
        answer = await self._forward(call, params if filters else None)
        if not answer.ok or not (filters or self._started_s or self._moves):
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
                state = self._visible_state(instance_id, text(instance, "instanceState/name"), now_s)
                if state == "pending":
                    set_text(instance, "instanceState/code", "0")
                    set_text(instance, "instanceState/name", "pending")
                for mapping in items(instance, "blockDeviceMapping"):
                    move = self._moves.get(text(mapping, "ebs/volumeId") or "")
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

    async def _terminate_instances(self, call: _Call) -> _Answer:
        instance_ids = numbered(call.params, "InstanceId")
        async with self._volume_lock:
            # moto frees kept volumes at once; on AWS they detach while the instance shuts down.
            found = await self._lookup(
                call, "DescribeInstances", [(f"InstanceId.{n}", i) for n, i in enumerate(instance_ids, 1)]
            )
            kept = [
                (text(instance, "instanceId") or "", mapping)
                for reservation in items(None if found is None else found.root, "reservationSet")
                for instance in items(reservation, "instancesSet")
                for mapping in items(instance, "blockDeviceMapping")
                if text(mapping, "ebs/deleteOnTermination") == "false"
            ]
            answer = await self._forward(call)
            if answer.ok:
                until_s = time.monotonic() + self.detach_s
                for instance_id, mapping in kept:
                    volume_id = text(mapping, "ebs/volumeId") or ""
                    self._moves[volume_id] = _Move(
                        "detaching",
                        instance_id,
                        text(mapping, "deviceName") or "",
                        text(mapping, "ebs/attachTime") or "",
                        until_s,
                    )
                for instance_id in instance_ids:
                    self._started_s.pop(instance_id, None)
            return answer

    # --- volumes ---------------------------------------------------------------------------------

    async def _attach_volume(self, call: _Call) -> _Answer:
        volume_id = param(call.params, "VolumeId") or ""
        instance_id = param(call.params, "InstanceId") or ""
        async with self._volume_lock:
            volume = await self._volume(call, volume_id)
            instance = await self._instance(call, instance_id)
            if volume is None or instance is None:
                return await self._forward(call)  # moto's own NotFound answer
            now_s = time.monotonic()
            move = self._moves.get(volume_id)
            state = self._visible_state(instance_id, text(instance, "instanceState/name"), now_s)
            if state not in ("running", "stopped"):
                return _Answer.error(
                    400, "IncorrectInstanceState", f"Instance '{instance_id}' is '{state}', not 'running' or 'stopped'."
                )
            if items(volume, "attachmentSet") or (move is not None and move.state == "attaching"):
                return _Answer.error(400, "VolumeInUse", f"{volume_id} is already attached to an instance")
            if move is not None:
                return _Answer.error(400, "IncorrectState", f"{volume_id} is not 'available' (it is detaching).")
            volume_zone = text(volume, "availabilityZone")
            instance_zone = text(instance, "placement/availabilityZone")
            if volume_zone != instance_zone:
                return _Answer.error(
                    400,
                    "InvalidVolume.ZoneMismatch",
                    f"The volume '{volume_id}' is not in the same availability zone as instance '{instance_id}'",
                )
            answer = await self._forward(call)
            if answer.ok:
                self._start_move(volume_id, "attaching", instance_id, answer, self.attach_s)
            return answer

    async def _detach_volume(self, call: _Call) -> _Answer:
        volume_id = param(call.params, "VolumeId") or ""
        async with self._volume_lock:
            volume = await self._volume(call, volume_id)
            if volume is None:
                return await self._forward(call)
            move = self._moves.get(volume_id)
            attachments = items(volume, "attachmentSet")
            if not attachments or (move is not None and move.state == "detaching"):
                # Also spares moto's server, which crashes on a DetachVolume of a free volume without InstanceId.
                return _Answer.error(400, "IncorrectState", f"Volume '{volume_id}' is in the 'available' state.")
            params = call.params
            instance_id = param(params, "InstanceId")
            if instance_id is None:
                # AWS finds the attachment itself; moto's server crashes (HTTP 500) without the InstanceId.
                instance_id = text(attachments[0], "instanceId") or ""
                params = with_param(params, "InstanceId", instance_id)
            answer = await self._forward(call, params if params is not call.params else None)
            if answer.ok:
                self._start_move(volume_id, "detaching", instance_id, answer, self.detach_s)
            return answer

    def _start_move(
        self,
        volume_id: str,
        state: Literal["attaching", "detaching"],
        instance_id: str,
        answer: _Answer,
        takes_s: float,
    ) -> None:
        """Remember that moto's instant attach or detach is, to callers, still in progress for takes_s."""
        attachment = XmlAnswer.parse(answer.body).root
        self._moves[volume_id] = _Move(
            state,
            instance_id,
            text(attachment, "device") or "",
            text(attachment, "attachTime") or "",
            time.monotonic() + takes_s,
        )

    async def _delete_volume(self, call: _Call) -> _Answer:
        volume_id = param(call.params, "VolumeId") or ""
        async with self._volume_lock:
            # moto already refuses an attached volume; it does not know one still attaching or detaching.
            move = self._moves.get(volume_id)
            if move is not None:
                return _Answer.error(
                    400, "VolumeInUse", f"Volume {volume_id} is currently attached to {move.instance_id}"
                )
            return await self._forward(call)

    async def _describe_volumes(self, call: _Call) -> _Answer:
        params, filters = take_filters(call.params, _VOLUME_STATE_FILTERS)
        answer = await self._forward(call, params if filters else None)
        if not answer.ok or not (filters or self._moves):
            return answer
        xml = XmlAnswer.parse(answer.body)
        volume_set = xml.root.find("volumeSet")
        dropped = []
        for volume in items(xml.root, "volumeSet"):
            volume_id = text(volume, "volumeId") or ""
            move = self._moves.get(volume_id)
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


# --- the process the sandbox runs ---------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m warmswarm_sandbox.strict_ec2", description=__doc__)
    parser.add_argument("--upstream", required=True, help="the moto server's URL, e.g. http://127.0.0.1:5000")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port; the URL is printed on stdout")
    parser.add_argument("--pending-s", type=float, default=0.0, help="how long a new instance stays pending")
    parser.add_argument("--attach-s", type=float, default=0.5, help="how long a volume stays attaching")
    parser.add_argument("--detach-s", type=float, default=0.5, help="how long a volume stays detaching")
    parser.add_argument("--no-throttle", action="store_true", help="answer every call, however fast")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    strict = StrictEc2(
        args.upstream,
        pending_s=args.pending_s,
        attach_s=args.attach_s,
        detach_s=args.detach_s,
        throttle=not args.no_throttle,
    )
    asyncio.run(_serve(strict, args.host, args.port))


async def _serve(strict: StrictEc2, host: str, port: int) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    url = await strict.start(host, port)
    # The first line of stdout is the URL: whoever started us with --port 0 learns the port from it.
    print(url, flush=True)
    try:
        await stopping.wait()
    finally:
        await strict.stop()


if __name__ == "__main__":
    main()
