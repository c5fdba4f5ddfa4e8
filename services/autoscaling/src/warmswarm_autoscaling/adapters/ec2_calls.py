"""How the EC2 adapter talks to AWS: the client, each call counted by outcome, AWS errors made ours, AWS's clock."""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.exceptions import BotoCoreError, ClientError
from botocore.loaders import Loader

from warmswarm_autoscaling.adapters.ec2_refusals import ec2_error
from warmswarm_autoscaling.ports import Ec2Error

if TYPE_CHECKING:
    from warmswarm_autoscaling.adapters.ec2_reader import Ec2Reader

T = TypeVar("T")

# aiobotocore clients are generated at run time and ship no type stubs: the client is untyped.
Ec2Client = Any

# The code counted for a call that succeeded.
OK: Final = "ok"
# Operations that only read (DescribeInstances, DescribeVolumes, ...): with a reader, they run on its thread.
_READ_PREFIX: Final = "Describe"


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
    loader: Loader | None = None,
) -> AsyncIterator[Ec2Client]:
    """An EC2 client with botocore's standard retries; `max_attempts` counts every attempt, the first too.

    Clients given one `loader` (botocore.loaders.create_loader()) share EC2's parsed service model, which each
    session otherwise loads for itself: 25-35 MiB a client. The model is only read once loaded, so a client on the
    reader's thread may share it too. Each client keeps a session of its own: credentials (and aiobotocore's lock
    around their refresh, which belongs to one event loop) are never shared.
    """
    config = AioConfig(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
    )
    session = AioSession()
    if loader is not None:
        session.register_component("data_loader", loader)
    async with session.create_client("ec2", region_name=region, endpoint_url=endpoint_url, config=config) as client:
        yield client


@dataclass
class _Walked(Generic[T]):
    """What a paginated read has done so far: the readings, and each answered page's ResponseMetadata."""

    readings: list[T] = field(default_factory=list)
    pages: list[Mapping[str, Any]] = field(default_factory=list)


async def _walk(
    client: Ec2Client, method: str, read: Callable[[dict[str, Any]], list[T]], params: dict[str, Any], into: _Walked[T]
) -> None:
    """Every page of `method` read into `into`, page by page, on whichever loop runs it (the reader's, if any)."""
    async for page in client.get_paginator(method).paginate(**params):
        into.pages.append({"ResponseMetadata": page.get("ResponseMetadata", {})})
        into.readings += read(page)
        del page  # not held while the next page is read


class Ec2Calls:
    """Calls through one client (RunInstances through a second, non-retrying one); `call_counts[(operation,
    code)]` counts them by outcome ("ok" on success); `aws_clock()` is AWS's clock now: the Date of its last answer
    plus the time since.

    With a `reader` (ec2_reader.py), every read (the Describe* calls and all paginated ones) runs on the reader's
    thread and client, so that botocore parses its answer there, not on this loop; the counts and the clock are
    still kept here, on the caller's loop, so they need no lock. Calls that change the world (small answers) go
    through `client` on the caller's loop, as every call does without a reader.
    """

    def __init__(
        self, client: Ec2Client, *, launch_client: Ec2Client | None = None, reader: Ec2Reader | None = None
    ) -> None:
        self._client = client
        # RunInstances goes through a client that does not retry (see LAUNCH_CLIENT_ATTEMPTS), if given.
        self._launch_client = launch_client or client
        self._reader = reader
        self.call_counts: Counter[tuple[str, str]] = Counter()
        self._aws_clock: float | None = None  # AWS's Date at its last answer, epoch s
        self._aws_clock_noted_at = 0.0  # time.monotonic() when that answer arrived

    def aws_clock(self) -> float | None:
        # Run on from the last answer: a cycle that read nothing from EC2 (the book had nothing that can move) must
        # not plan by a Date minutes old. The Date has whole seconds, so this is AWS's clock to about a second.
        if self._aws_clock is None:
            return None
        return self._aws_clock + (time.monotonic() - self._aws_clock_noted_at)

    async def _call(
        self, operation: str, method: str, *, client: Ec2Client | None = None, **params: Any
    ) -> dict[str, Any]:
        try:
            if self._reader is not None and client is None and operation.startswith(_READ_PREFIX):
                response: dict[str, Any] = await self._reader.run(lambda reader: getattr(reader, method)(**params))
            else:
                response = await getattr(client or self._client, method)(**params)
        except (ClientError, BotoCoreError) as error:
            raise self._failure(operation, error, params.get("ClientToken")) from error
        self.call_counts[(operation, OK)] += 1
        self._note_clock(response)
        return response

    def _note_clock(self, response: Mapping[str, Any]) -> None:
        date = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        if date:
            with contextlib.suppress(TypeError, ValueError):
                self._aws_clock = email.utils.parsedate_to_datetime(date).timestamp()
                self._aws_clock_noted_at = time.monotonic()

    async def _pages(
        self, operation: str, method: str, read: Callable[[dict[str, Any]], list[T]], **params: Any
    ) -> list[T]:
        """What `read` makes of every page of a paginated call, each page counted as the call it is. Each page is
        read as it arrives and then dropped: a listing of 10,000 instances never holds its ten pages' answers at
        once, only the readings. With a reader, `read` runs on the reader's thread: it must only read its page."""
        walked: _Walked[T] = _Walked()
        try:
            if self._reader is None:
                await _walk(self._client, method, read, params, walked)
            else:
                await self._reader.run(lambda reader: _walk(reader, method, read, params, walked))
        except (ClientError, BotoCoreError) as error:
            raise self._failure(operation, error) from error
        finally:
            # Every page answered counts, also those before a failure or a cancellation (a cancelled reader may
            # still be finishing one page as these are counted: that page goes uncounted).
            for page in list(walked.pages):
                self.call_counts[(operation, OK)] += 1
                self._note_clock(page)
        return walked.readings

    def _failure(self, operation: str, error: ClientError | BotoCoreError, client_token: str | None = None) -> Ec2Error:
        failure = ec2_error(operation, error, self._client.meta.endpoint_url, client_token=client_token)
        self.call_counts[(operation, failure.code)] += 1
        return failure
