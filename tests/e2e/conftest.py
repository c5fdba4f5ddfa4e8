"""End-to-end fixtures: no owner's service outlives the module that made it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from warmswarm_director.placement import MANAGED_BY_DIRECTOR, MANAGED_BY_LABEL
from warmswarm_sandbox.cloud import Endpoints
from warmswarm_sandbox.engine import Engine

LOG = logging.getLogger(__name__)


@pytest.fixture(scope="module", autouse=True)
def owners_services_removed_after_module(endpoints: Endpoints) -> Iterator[None]:
    """Every module shares its worker's swarm, and an autoscaler launches for any pending task on it: a service left
    by a failed test would take the next module's machines (a max_instances of 1 used up by another module's
    owner). After the module, the director's services still on the swarm are removed, and named in the log."""
    yield
    manager = Engine(endpoints.docker_host)
    query = {"filters": json.dumps({"label": [f"{MANAGED_BY_LABEL}={MANAGED_BY_DIRECTOR}"]})}
    for service in manager.get("/services", query=query):
        LOG.warning("removing service %s, left on the swarm by this module", service["Spec"]["Name"])
        manager.call("DELETE", f"/services/{service['ID']}")
