"""The strict EC2 layer's admin API: JSON under /strict/, so tests and the demo steer the layer from another process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web
from warmswarm_ec2rules.throttling import BucketSize

from warmswarm_sandbox.kill_switch import kill_routes, text_field
from warmswarm_sandbox.strict_ec2_upstream import CallMatch

if TYPE_CHECKING:
    from warmswarm_sandbox.strict_ec2 import StrictEc2

_T = TypeVar("_T")


def admin_routes(layer: StrictEc2) -> list[web.RouteDef]:
    """
    GET/POST /strict/capacity  {"instance_type", "availability_zone" (absent: every AZ), "available"}
    GET/POST/DELETE /strict/fail  {"action", "code", "status" (500), "times" (1), "message"}
    GET /strict/calls          counts by action: received, forwarded to moto, the layer's own lookups, answer codes
    GET/POST /strict/throttle  {"bucket", "burst", "refill_per_s"}: the size of the buckets a name stands for,
                               each API having its own (warmswarm_ec2rules.throttling): "describe" | "mutating" (the
                               categories), "run_instances" (RunInstances' own request bucket),
                               "run_instances_instances" | "terminate_instances_instances" | "start_instances_instances"
                               | "stop_instances_instances" (resource buckets, one token per instance); GET also
                               shows the tokens each API's buckets held at its last call
    GET/POST /strict/config    {"pending_s", "attach_s", "detach_s", "modifying_s", "optimizing_s",
                               "modify_cooldown_s" (AWS's 6 h between two ModifyVolume of a volume), "throttle"},
                               each optional
    GET/POST/DELETE /strict/kill  {"action", "params" ({key glob: value glob}, optional), "pid", "after" (1),
                               "signal" ("SIGKILL"), "ok_only" (true)}: after the `after`-th answered call of `action`
                               from now on (whose Query parameters match), the answer is sent, then the signal to
                               `pid`; GET lists armed and fired kills (kill_switch.kill_routes)
    POST /strict/reset         faults, armed kills, capacity holes and counters cleared; buckets full again
    GET /strict/addresses[?instance_id=ID]  each instance's private address (its sandbox machine's); asking for
                               one instance gives it its address now if it has none yet
    The fault body may say "after_effect": true: the call takes effect and then answers with the error.
    """

    async def get_capacity(_: web.Request) -> web.Response:
        return web.json_response({"unavailable": layer.capacity()})

    async def post_capacity(request: web.Request) -> web.Response:
        body = await _json(request)
        layer.set_capacity(
            _required(_text(body, "instance_type"), "instance_type"),
            _text(body, "availability_zone"),
            available=_required(_flag(body, "available"), "available"),
        )
        return await get_capacity(request)

    async def get_faults(_: web.Request) -> web.Response:
        return web.json_response({"faults": layer.faults()})

    async def post_fault(request: web.Request) -> web.Response:
        body = await _json(request)
        layer.inject_fault(
            _required(_text(body, "action"), "action"),
            _required(_text(body, "code"), "code"),
            status=_count(body, "status") or 500,
            times=_count(body, "times") or 1,
            message=_text(body, "message") or "",
            after_effect=bool(_flag(body, "after_effect")),
        )
        return await get_faults(request)

    async def delete_faults(request: web.Request) -> web.Response:
        layer.clear_faults()
        return await get_faults(request)

    async def get_calls(_: web.Request) -> web.Response:
        return web.json_response(layer.calls())

    async def get_throttle(_: web.Request) -> web.Response:
        return web.json_response({"enabled": layer.throttle, "buckets": layer.buckets(), "tokens": layer.tokens()})

    async def post_throttle(request: web.Request) -> web.Response:
        body = await _json(request)
        size = BucketSize(
            _required(_number(body, "burst"), "burst"), _required(_number(body, "refill_per_s"), "refill_per_s")
        )
        try:
            layer.set_bucket(_required(_text(body, "bucket"), "bucket"), size)
        except ValueError as error:
            raise web.HTTPBadRequest(text=str(error)) from error
        return await get_throttle(request)

    async def get_config(_: web.Request) -> web.Response:
        return web.json_response(layer.config())

    async def post_config(request: web.Request) -> web.Response:
        body = await _json(request)
        for name in ("pending_s", "attach_s", "detach_s", "modifying_s", "optimizing_s", "modify_cooldown_s"):
            value = _number(body, name)
            if value is not None:
                setattr(layer, name, value)
        throttle = _flag(body, "throttle")
        if throttle is not None:
            layer.throttle = throttle
        return await get_config(request)

    async def post_reset(_: web.Request) -> web.Response:
        layer.reset()
        return web.json_response({"reset": True})

    async def unknown(request: web.Request) -> web.Response:
        # A mistyped admin path is an error here, not a call to pass on to moto.
        raise web.HTTPNotFound(text=f"no admin route {request.method} {request.path}")

    async def get_addresses(request: web.Request) -> web.Response:
        instance_id = request.query.get("instance_id")
        if instance_id:
            return web.json_response({instance_id: layer.address_of(instance_id)})
        return web.json_response(layer.addresses())

    return [
        web.get("/strict/capacity", get_capacity),
        web.post("/strict/capacity", post_capacity),
        web.get("/strict/fail", get_faults),
        web.post("/strict/fail", post_fault),
        web.delete("/strict/fail", delete_faults),
        web.get("/strict/calls", get_calls),
        web.get("/strict/throttle", get_throttle),
        web.post("/strict/throttle", post_throttle),
        web.get("/strict/config", get_config),
        web.post("/strict/config", post_config),
        web.post("/strict/reset", post_reset),
        web.get("/strict/addresses", get_addresses),
        *kill_routes("/strict/kill", layer.kills, _call_match),
        web.route("*", "/strict/{tail:.*}", unknown),
    ]


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as error:
        raise web.HTTPBadRequest(text=f"the body must be a JSON object: {error}") from error
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="the body must be a JSON object")
    return body


def _call_match(body: Mapping[str, Any]) -> CallMatch:
    params = body.get("params") or {}
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise ValueError(f"'params' must map Query parameter name globs to value globs, not {params!r}")
    return CallMatch(text_field(body, "action"), tuple(params.items()))


def _required(value: _T | None, name: str) -> _T:
    if value is None:
        raise web.HTTPBadRequest(text=f"{name!r} is required")
    return value


def _text(body: Mapping[str, Any], name: str) -> str | None:
    return _typed(body, name, str)


def _flag(body: Mapping[str, Any], name: str) -> bool | None:
    return _typed(body, name, bool)


def _count(body: Mapping[str, Any], name: str) -> int | None:
    return _typed(body, name, int)


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return _typed(body, name, float)


def _typed(body: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    value = body.get(name)
    if value is None:
        return None
    # bool is an int in Python: a flag must not pass as a number, nor a number as a flag.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise web.HTTPBadRequest(text=f"{name!r} has the wrong type: {value!r}")
    return value
