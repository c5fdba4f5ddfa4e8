"""The autoscaler's /metrics as a scraper reads it after one cycle of a small world (an idle node, a pending task)."""

from __future__ import annotations

import httpx
from warmswarm_autoscaling.api import create_app
from warmswarm_models import Owner

from .factories import ALICE, NOW, foreign_node, instance, node_of, pending_task, volume
from .fakes import FakeEc2, FakeSwarm, autoscaler


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
