"""Fixtures for the integration tests that need moto alone, without the whole sandbox."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from warmswarm_autoscaling.adapters.ec2_aiobotocore import AiobotocoreEc2
from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    """A moto server in this process, one per test module (its state is that module's alone)."""
    with pytest.MonkeyPatch.context() as env:
        # No default AMIs: a fresh moto answers its first EC2 call in ms instead of seconds.
        env.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        # Credentials from the environment, so botocore never asks an instance metadata service.
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        env.setenv("AWS_EC2_METADATA_DISABLED", "true")
        from moto.server import ThreadedMotoServer

        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


@pytest.fixture
def cluster() -> str:
    # A fresh name per test: what the EC2 adapter lists by is the cluster tag, so a test can also
    # show that other clusters' resources (made on purpose) stay out of its listing.
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def ec2_adapter(client: Ec2Client) -> AiobotocoreEc2:
    """The adapter over the module's own `client` fixture (moto alone, or moto behind the strict layer)."""
    return AiobotocoreEc2(client)
