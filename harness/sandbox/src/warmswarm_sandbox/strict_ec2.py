"""A strict EC2 proxy in front of moto, adding back AWS rules moto skips: routing, faults, throttling, controls.

The rules themselves are warmswarm_ec2rules'; this layer reads moto's world, mirrors AWS's timing and answers HTTP."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from aiohttp import web
from warmswarm_ec2rules.throttling import BucketSize

from warmswarm_sandbox.kill_switch import KillSwitch
from warmswarm_sandbox.strict_ec2_admin import admin_routes
from warmswarm_sandbox.strict_ec2_dispatch import Dispatch, Fault
from warmswarm_sandbox.strict_ec2_instances import InstanceRules
from warmswarm_sandbox.strict_ec2_state import IdempotentCalls, Mirror, NodeAddresses
from warmswarm_sandbox.strict_ec2_upstream import FORM, HOP_HEADERS, OK, Call, CallMatch, Upstream
from warmswarm_sandbox.strict_ec2_volumes import VolumeRules
from warmswarm_sandbox.strict_ec2_wire import EC2_API_VERSION, param, parse_form

# BucketSize lives with AWS's throttling rules; callers import it from here too, with the layer it sizes.
__all__ = ["BucketSize", "StrictEc2", "main"]

log = logging.getLogger(__name__)


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
        node_addresses: NodeAddresses | None = None,
    ) -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.throttle = throttle
        self.url: str | None = None
        # Crash tests: a process killed right after a call's answer left (the admin API's /strict/kill).
        self.kills: KillSwitch[Call] = KillSwitch()
        self._received: Counter[str] = Counter()
        self._answers: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._upstream = Upstream(self.upstream_url)
        # Mirrors of what moto does not model: when an instance (re)started, volumes on the move,
        # and the first answer to each ClientToken.
        self._mirror = Mirror(pending_s=pending_s, attach_s=attach_s, detach_s=detach_s)
        self._tokens = IdempotentCalls()
        self._instances = InstanceRules(self._upstream, self._mirror, self._tokens, node_addresses)
        volumes = VolumeRules(self._upstream, self._mirror, self._tokens)
        # Injected faults and throttling first, then each action's rule (or moto).
        self._dispatch = Dispatch(self._upstream, self._mirror, self._instances, volumes, buckets)
        self._runner: web.AppRunner | None = None

    # How long AWS would take; the admin API sets these while the layer runs.

    @property
    def pending_s(self) -> float:
        return self._mirror.pending_s

    @pending_s.setter
    def pending_s(self, value: float) -> None:
        self._mirror.pending_s = value

    @property
    def attach_s(self) -> float:
        return self._mirror.attach_s

    @attach_s.setter
    def attach_s(self, value: float) -> None:
        self._mirror.attach_s = value

    @property
    def detach_s(self) -> float:
        return self._mirror.detach_s

    @detach_s.setter
    def detach_s(self, value: float) -> None:
        self._mirror.detach_s = value

    @property
    def modifying_s(self) -> float:
        return self._mirror.modifying_s

    @modifying_s.setter
    def modifying_s(self, value: float) -> None:
        self._mirror.modifying_s = value

    @property
    def optimizing_s(self) -> float:
        return self._mirror.optimizing_s

    @optimizing_s.setter
    def optimizing_s(self, value: float) -> None:
        self._mirror.optimizing_s = value

    @property
    def modify_cooldown_s(self) -> float:
        """AWS's six hours between two modifications of a volume; a test shortens it to see the next one taken."""
        return self._mirror.modify_cooldown_s

    @modify_cooldown_s.setter
    def modify_cooldown_s(self, value: float) -> None:
        self._mirror.modify_cooldown_s = value

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._upstream.open()
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
        await self._upstream.close()

    # --- controls (the admin API calls these; in-process tests may too) -------------------------

    def set_capacity(self, instance_type: str, availability_zone: str | None, *, available: bool) -> None:
        """`availability_zone` None: the type in every AZ (also a launch that names no AZ)."""
        offering = (instance_type, availability_zone)
        if available:
            self._instances.no_capacity.discard(offering)
        else:
            self._instances.no_capacity.add(offering)

    def capacity(self) -> list[dict[str, str | None]]:
        """The offerings without capacity."""
        offerings = sorted(self._instances.no_capacity, key=str)
        return [{"instance_type": kind, "availability_zone": zone} for kind, zone in offerings]

    def inject_fault(
        self,
        action: str,
        code: str,
        *,
        status: int = 500,
        times: int = 1,
        message: str = "",
        after_effect: bool = False,
    ) -> None:
        """The next `times` calls of `action` fail with `code` and HTTP `status`: before any other rule, or,
        `after_effect`, once the call took effect (its answer lost on the way back)."""
        text = message or f"{code} (injected by the strict EC2 layer)"
        self._dispatch.faults.append(Fault(action, code, status, text, times, after_effect))

    def addresses(self) -> dict[str, str]:
        """Each instance's private address (its sandbox machine's address on the bridge); {} outside the sandbox."""
        found = self._instances.addresses
        return {} if found is None else found.all()

    def address_of(self, instance_id: str) -> str | None:
        found = self._instances.addresses
        return None if found is None else found.of(instance_id)

    def faults(self) -> list[dict[str, Any]]:
        return [asdict(fault) for fault in self._dispatch.faults]

    def clear_faults(self) -> None:
        self._dispatch.faults.clear()

    def kill_after(
        self, action: str, pid: int, *, params: Mapping[str, str] | None = None, after: int = 1, **terms: Any
    ) -> str:
        """Once the `after`-th `action` call from now (with Query `params` matching these globs) is answered,
        signal `pid` (KillSwitch.arm's `signum`, SIGKILL, and `ok_only` terms); the kill's id."""
        return self.kills.arm(CallMatch(action, tuple((params or {}).items())), pid, after=after, **terms).id

    def set_bucket(self, name: str, size: BucketSize) -> None:
        self._dispatch.set_bucket(name, size)

    def buckets(self) -> dict[str, dict[str, float]]:
        return self._dispatch.buckets()

    def tokens(self) -> dict[str, dict[str, float]]:
        return self._dispatch.tokens()

    def config(self) -> dict[str, float | bool]:
        return {
            "pending_s": self.pending_s,
            "attach_s": self.attach_s,
            "detach_s": self.detach_s,
            "modifying_s": self.modifying_s,
            "optimizing_s": self.optimizing_s,
            "modify_cooldown_s": self.modify_cooldown_s,
            "throttle": self.throttle,
        }

    def calls(self) -> dict[str, Any]:
        return {
            "received": dict(self._received),
            "forwarded": dict(self._upstream.forwarded),
            "lookups": dict(self._upstream.lookups),
            "answers": {action: dict(codes) for action, codes in self._answers.items()},
        }

    def reset(self) -> None:
        """Clears injected faults, armed kills, capacity holes and counters, refills the buckets; the world stays."""
        self._dispatch.reset()
        self.kills.clear()
        self._instances.no_capacity.clear()
        for counter in (self._received, self._upstream.forwarded, self._upstream.lookups):
            counter.clear()
        self._answers.clear()

    # --- the proxy -------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = tuple((key, value) for key, value in request.headers.items() if key.lower() not in HOP_HEADERS)
        params = parse_form(body) if request.method == "POST" and request.content_type == FORM else None
        if params is None or param(params, "Version") != EC2_API_VERSION:
            answer = await self._upstream.send(request.method, request.raw_path, headers, body)
            if request.path == "/moto-api/reset" and answer.ok:
                # moto was reset: the instances, volumes and launches the layer mirrors are gone.
                self._mirror.clear()
                self._tokens.clear()
            return answer.response()
        call = Call(param(params, "Action") or "", params, body, headers, request.raw_path)
        self._received[call.action] += 1
        answer = await self._dispatch.answer(call, throttle=self.throttle)
        self._answers[call.action][answer.code] += 1
        if answer.code != OK:
            log.info("%s answered %s (HTTP %d)", call.action, answer.code, answer.status)
        response, due = answer.response(), self.kills.take(call, ok=answer.ok)
        if due:
            await self.kills.deliver_then_fire(request, response, due, {"action": call.action, "answer": answer.code})
        return response


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
    parser.add_argument(
        "--node-subnet",
        type=int,
        default=None,
        help="K of the sandbox's 10.K.0.0/16: instances' private addresses are their machines' addresses there",
    )
    parser.add_argument("--first-host-index", type=int, default=3, help="the first machine's host index in it")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    strict = StrictEc2(
        args.upstream,
        pending_s=args.pending_s,
        attach_s=args.attach_s,
        detach_s=args.detach_s,
        throttle=not args.no_throttle,
        node_addresses=None if args.node_subnet is None else NodeAddresses(args.node_subnet, args.first_host_index),
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
