"""How the EC2 adapter talks to AWS: the client, each call counted by outcome, AWS errors made ours, AWS's clock."""

from __future__ import annotations

import contextlib
import email.utils
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from warmswarm_autoscaling.ports import Ec2Error, InsufficientCapacity

# aiobotocore clients are generated at run time and ship no type stubs: the client is untyped.
Ec2Client = Any

# The code counted for a call that succeeded, and for one that never got an answer from AWS.
OK: Final = "ok"
CONNECTION_ERROR: Final = "ConnectionError"

# No room for this type in this AZ now, or the AZ does not offer the type: the caller tries another offering.
_CAPACITY_CODES: Final = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "Unsupported"})

# What to do next, for the codes an operator is likely to meet.
_HINTS: Final[Mapping[str, str]] = {
    "RequestLimitExceeded": "EC2 throttled the account; the next cycle retries",
    "UnauthorizedOperation": "grant the autoscaler's IAM role this EC2 action",
    "AuthFailure": "check the AWS credentials the autoscaler runs with",
    "InvalidAMIID.NotFound": "check the worker image id for this region",
    "InvalidParameterValue": "check the launch settings (availability zone, type, image)",
    "InvalidVolume.ZoneMismatch": "a volume attaches only to an instance in its own availability zone",
    "IncorrectInstanceState": "the instance is not running yet (or is stopping); the next cycle tries again",
    "VolumeInUse": "the volume is attached (or still attaching or detaching); detach it first",
    "VolumeLimitExceeded": "the account's EBS storage quota is reached; raise it or delete expired caches",
}


# RunInstances is not retried inside the call. EC2 answers "no capacity" with HTTP 500, which
# botocore's standard mode retries with backoff (seconds per offering, on every zone tried),
# while the planner's answer to it is to try the next offering at once. A throttled or failed
# launch is retried by the next cycle instead, safely: the ClientToken makes it the same launch.
LAUNCH_CLIENT_ATTEMPTS: Final = 1


@asynccontextmanager
async def ec2_client(
    endpoint_url: str | None,
    region: str,
    max_attempts: int,
    *,
    connect_timeout_s: float = 5.0,
    read_timeout_s: float = 30.0,
) -> AsyncIterator[Ec2Client]:
    """An EC2 client with botocore's standard retries; `max_attempts` counts every attempt, the first too."""
    config = AioConfig(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
    )
    session = AioSession()
    async with session.create_client("ec2", region_name=region, endpoint_url=endpoint_url, config=config) as client:
        yield client


class Ec2Calls:
    """Calls through one client (RunInstances through a second, non-retrying one); `call_counts[(operation,
    code)]` counts them by outcome ("ok" on success); `aws_clock()` is the Date of AWS's last answer."""

    def __init__(self, client: Ec2Client, *, launch_client: Ec2Client | None = None) -> None:
        self._client = client
        # RunInstances goes through a client that does not retry (see LAUNCH_CLIENT_ATTEMPTS), if given.
        self._launch_client = launch_client or client
        self.call_counts: Counter[tuple[str, str]] = Counter()
        self._aws_clock: float | None = None  # AWS's Date at its last answer, epoch s

    def aws_clock(self) -> float | None:
        return self._aws_clock

    async def _call(
        self, operation: str, method: str, *, client: Ec2Client | None = None, **params: Any
    ) -> dict[str, Any]:
        try:
            response: dict[str, Any] = await getattr(client or self._client, method)(**params)
        except (ClientError, BotoCoreError) as error:
            raise self._failure(operation, error) from error
        self.call_counts[(operation, OK)] += 1
        self._note_clock(response)
        return response

    def _note_clock(self, response: Mapping[str, Any]) -> None:
        date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if date:
            with contextlib.suppress(TypeError, ValueError):
                self._aws_clock = email.utils.parsedate_to_datetime(date).timestamp()

    async def _pages(self, operation: str, method: str, **params: Any) -> list[dict[str, Any]]:
        """Every page of a paginated call, each page counted as the call it is."""
        pages: list[dict[str, Any]] = []
        iterator = aiter(self._client.get_paginator(method).paginate(**params))
        while True:
            try:
                page: dict[str, Any] = await anext(iterator)
            except StopAsyncIteration:
                return pages
            except (ClientError, BotoCoreError) as error:
                raise self._failure(operation, error) from error
            self.call_counts[(operation, OK)] += 1
            self._note_clock(page)
            pages.append(page)

    def _failure(self, operation: str, error: ClientError | BotoCoreError) -> Ec2Error:
        failure = ec2_error(operation, error, self._client.meta.endpoint_url)
        self.call_counts[(operation, failure.code)] += 1
        return failure


def ec2_error(operation: str, error: ClientError | BotoCoreError, endpoint_url: str) -> Ec2Error:
    """Our error for an AWS error: its code, its message and, for the codes operators meet, what to do next."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = str(details.get("Code") or "Unknown")
        message = str(details.get("Message") or error)
    elif isinstance(error, BotoConnectionError | HTTPClientError):
        code = CONNECTION_ERROR
        message = f"{error}; check that the EC2 endpoint {endpoint_url} is reachable (network, proxy, region)"
    else:
        # Credentials missing, a bad parameter caught before sending, ...: no AWS code exists.
        code = type(error).__name__
        message = str(error)
    if code in _HINTS:
        message = f"{message} ({_HINTS[code]})"
    # Only a launch: the caller takes InsufficientCapacity for "this instance offering is full",
    # which a volume call's "Unsupported" (e.g. a volume type an AZ lacks) is not.
    if operation == "RunInstances" and code in _CAPACITY_CODES:
        return InsufficientCapacity(operation, code, f"{message} (try another type or availability zone)")
    return Ec2Error(operation, code, message)
