"""Stand-in EC2 (Query API) and Docker Engine (HTTP) servers on loopback, replaying a fleet's answers.

Run alone (`python benchmarks/cycle_servers.py --machines 1000 --shape reference`) it prints the two URLs as one
JSON line and serves until killed, so a benchmark's CPU figures are the autoscaler's alone, not the servers'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import cycle_docker_answers as docker_answers
from aiohttp import web
from cycle_ec2_answers import (
    INSTANCES_PAGE,
    SHAPES,
    Shape,
    error_answer,
    instance_reservation,
    instance_types_answer,
    instances_page,
    volume_items,
    volumes_answer,
)
from cycle_world import Fleet, fleet

_XML = "text/xml;charset=UTF-8"
_JSON = "application/json"
# The path a benchmark posts to for a busy cycle: one task changes (Docker only; not an Engine API path).
TOUCH_PATH = "/_bench/touch-task"


class Ec2Answers:
    """What the EC2 stand-in answers: DescribeInstances by pages, DescribeVolumes, DescribeInstanceTypes."""

    def __init__(self, made: Fleet, shape: Shape) -> None:
        self._reservations = [instance_reservation(m, made.cluster, shape) for m in made.machines]
        self._reservation_by_id = {m.instance_id: r for m, r in zip(made.machines, self._reservations, strict=True)}
        self._volume_items = volume_items(made, shape)
        self._volumes = volumes_answer(self._volume_items)
        self.calls: dict[str, int] = {}

    async def handle(self, request: web.Request) -> web.Response:
        form = await request.post()
        action = str(form.get("Action", ""))
        self.calls[action] = self.calls.get(action, 0) + 1
        if action == "DescribeInstances" and (instance_ids := filter_values(form, "instance-id")) is not None:
            # By id, as the autoscaler asks for the instances that can move: one page, the ids EC2 has.
            found = [self._reservation_by_id[i] for i in instance_ids if i in self._reservation_by_id]
            body = instances_page(found, None)
        elif action == "DescribeInstances":
            body = self._instances(int(str(form.get("MaxResults", INSTANCES_PAGE))), str(form.get("NextToken", "")))
        elif action == "DescribeVolumes" and (volume_ids := filter_values(form, "volume-id")) is not None:
            body = volumes_answer(self._volume_items, volume_ids)
        elif action == "DescribeVolumes":
            body = self._volumes
        elif action == "DescribeInstanceTypes":
            body = instance_types_answer([str(v) for k, v in form.items() if k.startswith("InstanceType.")])
        else:
            # The benchmark's cycles plan nothing: a call that changes the world is a defect of the world.
            message = f"the stand-in answers reads only, not {action}"
            return web.Response(status=400, body=error_answer("InvalidAction", message), headers={"Content-Type": _XML})
        return web.Response(body=body, headers={"Content-Type": _XML, "x-amzn-RequestId": "bench"})

    def _instances(self, page_size: int, token: str) -> bytes:
        start = int(token) if token else 0
        end = start + min(page_size, INSTANCES_PAGE)
        next_token = str(end) if end < len(self._reservations) else None
        return instances_page(self._reservations[start:end], next_token)


def filter_values(form: Mapping[str, object], name: str) -> list[str] | None:
    """The values of the query's filter called `name` (Filter.N.Name / Filter.N.Value.M), None when it has none."""
    for key, value in form.items():
        if key.startswith("Filter.") and key.endswith(".Name") and value == name:
            prefix = key.removesuffix("Name") + "Value."
            return [str(v) for k, v in form.items() if k.startswith(prefix)]
    return None


class DockerAnswers:
    """What the Engine API stand-in answers: version, nodes, services, tasks; a touch changes one task."""

    def __init__(self, made: Fleet) -> None:
        self._machines = made.machines
        self._nodes = [docker_answers.node(m) for m in made.machines]
        self._services = [docker_answers.service(m) for m in made.machines]
        self._tasks = [docker_answers.task(m) for m in made.machines]
        self.touches = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        # aiodocker asks /version unversioned, then everything under /v1.47/.
        resource = request.path.rstrip("/").rsplit("/", 1)[-1]
        if request.method == "POST" and request.path == TOUCH_PATH:
            self.touch()
            return web.Response(body=b"{}", content_type=_JSON)
        listing = {"nodes": self._nodes, "services": self._services, "tasks": self._tasks}.get(resource)
        if resource == "version":
            return web.Response(body=docker_answers.version(), content_type=_JSON)
        if resource == "events":
            return await self._quiet_events(request)
        if request.method != "GET" or listing is None:
            body = json.dumps({"message": f"the stand-in answers listings only, not {request.method} {request.path}"})
            return web.Response(status=501, text=body, content_type=_JSON)
        return web.Response(body=b"[" + b",".join(listing) + b"]", content_type=_JSON)

    async def _quiet_events(self, request: web.Request) -> web.StreamResponse:
        """The event stream, open and quiet (nothing changes nodes or services here) until the client leaves: the
        autoscaler reuses its node and service readings only while its stream is open."""
        stream = web.StreamResponse(headers={"Content-Type": _JSON})
        await stream.prepare(request)
        await asyncio.Event().wait()  # cancelled when the client disconnects or the server stops
        return stream

    def touch(self) -> None:
        """The next machine's task gets a new version and status, as when its container restarts in place."""
        self.touches += 1
        index = self.touches % len(self._machines)
        self._tasks[index] = docker_answers.task(self._machines[index], touches=self.touches)


def ec2_app(answers: Ec2Answers) -> web.Application:
    app = web.Application(client_max_size=2**20)
    app.router.add_post("/", answers.handle)
    return app


def docker_app(answers: DockerAnswers) -> web.Application:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answers.handle)
    return app


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port while the block runs; yields its http:// URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def _serve(machines: int, shape: Shape, seed: int, now_s: float) -> None:
    made = fleet(machines, seed=seed, now_s=now_s)
    async with (
        serving(ec2_app(Ec2Answers(made, shape))) as ec2_url,
        serving(docker_app(DockerAnswers(made))) as docker_url,
    ):
        print(json.dumps({"ec2_url": ec2_url, "docker_url": docker_url}), flush=True)
        await asyncio.Event().wait()  # until the benchmark kills this process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--machines", type=int, required=True)
    parser.add_argument("--shape", choices=SHAPES, default="reference")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--now-s", type=float, default=None, help="epoch s the answers are made for (default: now)")
    args = parser.parse_args()
    asyncio.run(_serve(args.machines, args.shape, args.seed, args.now_s if args.now_s is not None else time.time()))


if __name__ == "__main__":
    main()
