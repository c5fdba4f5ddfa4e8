"""The committed OpenAPI specs (docs/openapi/*.json) are the services' own: regenerate with `make openapi`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import aiodocker
import httpx
import redis.asyncio as redis
from warmswarm_autoscaling.api import create_app as autoscaling_app
from warmswarm_director.api import create_app as director_app
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.director import Director
from warmswarm_director.groups import GroupStore
from warmswarm_director.placement import PlacementConfig
from warmswarm_director.swarm import Swarm

from .factories import NOW
from .fakes import FakeEc2, FakeSwarm, autoscaler

SPECS = Path(__file__).resolve().parents[2] / "docs" / "openapi"


def _compare_or_write(name: str, document: dict[str, Any]) -> None:
    path = SPECS / f"{name}.json"
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if os.environ.get("WARMSWARM_WRITE_OPENAPI") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run `make openapi`"
    assert path.read_text() == text, f"{path} is out of date with the code: run `make openapi`"


def test_autoscaling_spec_is_up_to_date() -> None:
    app = autoscaling_app(
        autoscaler(FakeSwarm(), FakeEc2()), ready_within_s=60.0, clock=lambda: NOW, ops_token="x" * 16
    )
    _compare_or_write("autoscaling", app.openapi())


async def test_director_spec_is_up_to_date() -> None:
    # Building the app does no I/O: nothing below is ever called.
    docker = aiodocker.Docker(url="unix:///nonexistent/docker.sock")
    client = redis.Redis.from_url("redis://127.0.0.1:1/0")
    async with httpx.AsyncClient() as http:
        director = Director(
            Swarm(docker),
            GroupStore(client),
            AutoscalerClient(http, None, timeout_s=1.0, ops_token="x" * 32),
            PlacementConfig(cache_mount_path="/cache", node_cache_path="/var/lib/warmswarm/cache", stop_grace_s=10),
        )
        document = director_app(director, ops_token="x" * 32, api_token="y" * 32).openapi()
    await docker.close()
    await client.aclose()
    _compare_or_write("director", document)
