"""Fixtures for the integration tests that need moto alone, without the whole sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


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
