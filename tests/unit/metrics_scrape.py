"""The autoscaler's /metrics as a scraper reads it: a strict reader of the text format (parse), and the body after
one cycle of a small world (an idle node, a pending task)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import httpx
from warmswarm_autoscaling.api import create_app
from warmswarm_models import Owner

from .director_fakes import FakeSwarm as FakeSwarm_
from .factories import ALICE, NOW, foreign_node, instance, node_of, pending_task, volume
from .fakes import FakeEc2, FakeSwarm, autoscaler

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_SAMPLE = re.compile(rf"^(?P<name>{_NAME})(?:\{{(?P<labels>{_LABEL}(?:,{_LABEL})*)?\}})? (?P<value>\S+)$")
_HELP = re.compile(rf"^# HELP (?P<name>{_NAME}) .*$")
_TYPE = re.compile(rf"^# TYPE (?P<name>{_NAME}) (?P<type>counter|gauge|histogram|summary|untyped)$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')

Series = tuple[str, frozenset[tuple[str, str]]]


@dataclass
class Exposition:
    types: dict[str, str] = field(default_factory=dict)
    samples: dict[Series, float] = field(default_factory=dict)

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def family(self, name: str) -> dict[frozenset[tuple[str, str]], float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}


def parse(text: str) -> Exposition:
    """A strict reader of the text format 0.0.4: fails on any line Prometheus would reject or misread, or untyped."""
    assert text.endswith("\n"), "the body ends with a line feed"
    parsed = Exposition()
    helped: set[str] = set()
    current: str | None = None
    for number, line in enumerate(text.removesuffix("\n").split("\n"), start=1):
        where = f"line {number}: {line!r}"
        if match := _HELP.match(line):
            assert match["name"] not in helped, f"{where}: a second HELP"
            helped.add(match["name"])
            continue
        if match := _TYPE.match(line):
            name = match["name"]
            assert name not in parsed.types, f"{where}: a second TYPE"
            assert not any(n == name for n, _ in parsed.samples), f"{where}: TYPE after its samples"
            parsed.types[name] = match["type"]
            current = name
            continue
        match = _SAMPLE.match(line)
        assert match is not None, f"{where}: not a HELP, TYPE or sample line"
        name = match["name"]
        family = _family_of(name, parsed.types)
        # Untyped samples are legal in 0.0.4, but every metric of ours declares its type.
        assert family is not None, f"{where}: a sample without a TYPE"
        assert family == current, f"{where}: a sample outside its family's block ({current})"
        labels = frozenset(_LABEL_PAIR.findall(match["labels"] or ""))
        assert len(labels) == len(_LABEL_PAIR.findall(match["labels"] or "")), f"{where}: a label twice"
        assert (name, labels) not in parsed.samples, f"{where}: the same series twice"
        parsed.samples[(name, labels)] = _float(match["value"], where)
    assert set(parsed.types) <= helped, "every family has its HELP"
    return parsed


def _family_of(name: str, types: dict[str, str]) -> str | None:
    if name in types:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and types.get(base) in ("histogram", "summary"):
            return base
    return None


def _float(text: str, where: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    assert re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", text), f"{where}: {text!r} is not a number"
    return float(text)


async def metrics_after_a_cycle() -> str:
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    swarm = FakeSwarm(
        nodes=[foreign_node("mgr", role="manager"), node_of(idle)],
        tasks=[pending_task("t-carol", Owner(user_id="carol"))],
    )
    scaler = autoscaler(swarm, FakeEc2(instances=[idle], volumes=[volume("vol-1")]))
    await scaler.cycle()
    app = create_app(scaler, ready_within_s=60.0, clock=lambda: NOW, ops_token=None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://autoscaler") as http:
        return (await http.get("/metrics")).text


# A session of alice's asked for at 10:00:00 and running 42.5 s later on i-0abc, which was launched for it and
# mounts the volume an earlier session left: a cache return, and a cache hit.
SESSION_ASKED = "2026-12-01T10:00:00.000000000Z"
SESSION_RUNNING = "2026-12-01T10:00:42.500000001Z"


async def director_metrics_after_a_session(polls: int = 1) -> tuple[str, list[dict[str, object]]]:
    """The director's /metrics after `polls` status answers for one running session, and those answers."""
    from dataclasses import replace

    from warmswarm_director.api import create_app as director_app
    from warmswarm_director.director import Director
    from warmswarm_director.metrics import SessionMetrics, Sessions
    from warmswarm_director.ports import NodeView
    from warmswarm_director.status import AutoscalerView, TaskView
    from warmswarm_models import NODE_LABEL_INSTANCE_ID, NODE_LABEL_VOLUME_ID, GroupProperties
    from warmswarm_models.start import MachineFacts
    from warmswarm_models.swarm_time import docker_time

    from .director_fakes import PLACEMENT, FakeAutoscaler, FakeGroups

    asked, running = docker_time(SESSION_ASKED), docker_time(SESSION_RUNNING)
    assert asked is not None
    assert running is not None
    swarm, groups = FakeSwarm_(), FakeGroups()
    groups.stored["lab"] = GroupProperties(ebs_cache_enabled=True, cache_ttl_s=600)
    machine = MachineFacts(launched_at=asked + 3, volume_created_at=asked - 86_400)
    scaler = FakeAutoscaler(AutoscalerView(enabled=True, machines={"i-0abc": machine}))
    director = Director(swarm, groups, scaler, PLACEMENT, Sessions(SessionMetrics(), since=0.0))
    app = director_app(director, ops_token="o" * 32, api_token="a" * 32)
    body = {
        "user_id": "alice",
        "project_id": "p1",
        "node_id": "n1",
        "image": "nginx:1",
        "resources": {"cpus": 0.5, "memory_bytes": 2**28},
        "groups": ["lab"],
    }
    answers: list[dict[str, object]] = []
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://director",
        headers={"Authorization": "Bearer " + "a" * 32},
    ) as http:
        created = (await http.post("/v1/services", json=body)).json()
        name = created["service_name"]
        swarm.services[name] = replace(swarm.services[name], created_at_s=asked)
        task = TaskView("t1", "running", "node-1", None, None, SESSION_ASKED, status_at_s=running)
        swarm.tasks_of[created["service_id"]] = [task]
        swarm.nodes["node-1"] = NodeView("node-1", {NODE_LABEL_INSTANCE_ID: "i-0abc", NODE_LABEL_VOLUME_ID: "v"}, {})
        for _ in range(polls):
            answers.append((await http.get("/v1/services/n1")).json())
        return (await http.get("/metrics")).text, answers
