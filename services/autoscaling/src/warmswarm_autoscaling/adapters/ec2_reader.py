"""EC2 reads off the service's event loop: a thread with its own loop and client, where answers are parsed.

botocore parses each answer on the loop that awaits it, in one piece: a 1,000-instance DescribeInstances page is
0.6-1.1 s of CPU, during which the service's loop (the leader's lease renewals, the API) does nothing. An
`Ec2Reader` is a daemon thread running an asyncio loop of its own with an EC2 client of its own (the same
endpoint, region, retries and timeouts as the service's); `run(work)` runs `work(client)` there to the end
(request, parse, and whatever `work` makes of the answer) and hands back only its result. The service's loop
meanwhile only waits on a future, so it keeps running: Python hands the GIL between the threads every few ms
(sys.getswitchinterval), except inside one C call, which is why the pages the reader parses are kept small enough
(ec2_aiobotocore.READER_PAGE_SIZE).

Why a thread with a loop and not `asyncio.to_thread` around a parse: aiobotocore parses inside its own coroutine,
before the caller sees the answer; only a client that lives on another loop keeps the parse away from ours.
Why not a process: the readings would be pickled back, costing the loop much of what the thread saves.

The caller's cancellation (a lost lease cancels the cycle) cancels the work on the reader's loop too, without
waiting for it; leaving the context cancels what still runs there, closes the client and ends the thread, within
`close_timeout_s` (a daemon thread, so never holding up the process's exit either).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from botocore.loaders import Loader

from warmswarm_autoscaling.adapters.ec2_calls import Ec2Client, ec2_client

log = logging.getLogger(__name__)

T = TypeVar("T")

# Work for the reader: given its client, a coroutine to run on its loop.
ReaderWork = Callable[[Ec2Client], Coroutine[Any, Any, T]]

# How long leaving waits for the reader's loop to cancel its work and close its client: a parse in progress
# finishes first (about a second at most); after this the thread is abandoned (it is a daemon).
DEFAULT_CLOSE_TIMEOUT_S: Final = 10.0


class Ec2Reader:
    """An async context manager: on entry the thread, its loop and its client exist; on exit none of them do."""

    def __init__(
        self,
        endpoint_url: str | None,
        region: str,
        max_attempts: int,
        *,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 30.0,
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
        loader: Loader | None = None,
    ) -> None:
        """`loader`: the service's clients' botocore loader, so the reader's client shares their parsed model
        (ec2_calls.ec2_client)."""
        self._client_args: dict[str, Any] = {
            "endpoint_url": endpoint_url,
            "region": region,
            "max_attempts": max_attempts,
            "connect_timeout_s": connect_timeout_s,
            "read_timeout_s": read_timeout_s,
            "loader": loader,
        }
        self._close_timeout_s = close_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Ec2Client | None = None
        self._stop: asyncio.Event | None = None  # the reader loop's own: set only from that loop
        # Set by the thread: ready once the client is open (or failed to open), ended once the thread is done.
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._main, name="ec2-reader", daemon=True)

    async def __aenter__(self) -> Ec2Reader:
        self._thread.start()
        # Awaited, not joined: opening the client must not hold up the caller's loop either.
        await asyncio.wrap_future(self._ready)
        return self

    async def __aexit__(self, *_: object) -> None:
        loop, stop = self._loop, self._stop
        self._loop = None  # no new work from here on
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        # After the timeout the thread is abandoned: a daemon, it ends with the process.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(self._ended), self._close_timeout_s)

    @property
    def running(self) -> bool:
        """The thread's loop runs: from entry until it has closed (the thread itself returns right after)."""
        return self._thread.is_alive() and not self._ended.done()

    async def run(self, work: ReaderWork[T]) -> T:
        """`work(client)`'s result, run on the reader's loop; its exceptions are raised here as they are."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("the EC2 reader is not open")
        # Cancelling the wrapping future (our caller was cancelled) cancels the task on the reader's loop.
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work(self._client), loop))

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:
            if not self._ready.done():  # the client could not be opened: the caller's __aenter__ raises it
                self._ready.set_exception(error)
            else:  # closing failed: the reads are over anyway, but an operator should hear of it
                log.warning("the EC2 reader's loop ended with an error", exc_info=error)
        finally:
            self._ended.set_result(None)

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        async with ec2_client(**self._client_args) as client:
            self._client = client
            self._loop = asyncio.get_running_loop()
            self._ready.set_result(None)
            await self._stop.wait()
            # Work still running (abandoned by a caller that stopped waiting) ends before its client closes.
            others = asyncio.all_tasks() - {asyncio.current_task()}
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
