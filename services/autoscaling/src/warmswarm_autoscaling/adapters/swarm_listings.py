"""When a cycle lists the swarm's nodes and services, and how a listing's bytes become readings off the event loop.

At 10,000 machines a listing is about 20 MB of JSON. Two savings follow:

- Nodes and services change only with an event, so they are listed again only when one came, when the event stream
  (re)connected (events while it was down are lost), after our own writes, and at least every relist interval.
  Without an open event stream nothing tells us of changes: every call lists.
- A listing is read in a worker thread, element by element (never one C call over 20 MB that holds the GIL), and
  an element whose ID and version were read last time is not decoded at all (see `elements`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, contextmanager
from functools import partial
from typing import Any, Final

import aiodocker
import aiohttp

NODE: Final = "node"
SERVICE: Final = "service"
# A change whose event is lost while the stream stays open (the daemon drops events for a subscriber that falls
# far behind) is seen this late at worst. Relisting unchanged objects costs little (their elements are not decoded).
RELIST_INTERVAL_S: Final = 120.0

# One element as the Engine writes it: Go's encoder, compact, the struct's fields in order, so every swarm object
# starts with its ID and its version (both of Meta). An answer that does not look so is decoded the slow way.
_FIRST: Final = b'{"ID":"'
_OPENING: Final = b"[" + _FIRST
_SEPARATOR: Final = b'},{"ID":"'
_HEAD: Final = re.compile(rb'([^"\\]*)","Version":\{"Index":(\d+)\}')
_BLANKS: Final = re.compile(r"[ \t\n\r]*")

Entry = tuple[str, int | None, Callable[[], Mapping[str, Any]]]


class Freshness:
    """Whether the last listing of nodes (of services) still stands: no event of its kind since, an event stream
    read continuously since, and younger than the relist interval (on the monotonic clock)."""

    def __init__(self, relist_interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._relist_interval_s = relist_interval_s
        self._clock = clock
        self._watching = 0  # event streams open and being read right now
        self._dirty = {NODE: True, SERVICE: True}
        self._listed_at_s: dict[str, float] = {}

    def stands(self, kind: str) -> bool:
        listed_at_s = self._listed_at_s.get(kind)
        return (
            self._watching > 0
            and not self._dirty[kind]
            and listed_at_s is not None
            and self._clock() - listed_at_s < self._relist_interval_s
        )

    def changed(self, kind: str) -> None:
        if kind in self._dirty:
            self._dirty[kind] = True

    @contextmanager
    def listing(self, kind: str) -> Iterator[None]:
        """Around one listing. Marked clean before the request goes out: an event that comes while it runs may
        or may not be in its answer, so it makes the next call list again. A failed listing leaves it dirty."""
        self._dirty[kind] = False
        self._listed_at_s[kind] = self._clock()
        try:
            yield
        except BaseException:
            self._dirty[kind] = True
            raise

    @contextmanager
    def watching(self) -> Iterator[None]:
        """While an event stream is open: what changed before it opened was not seen, so all is dirty."""
        self._watching += 1
        for kind in self._dirty:
            self._dirty[kind] = True
        try:
            yield
        finally:
            self._watching -= 1

    @contextmanager
    def paused(self) -> Iterator[None]:
        """While the stream's consumer holds an event, nobody reads the stream: listings made meanwhile list."""
        self._watching -= 1
        try:
            yield
        finally:
            self._watching += 1


def engine_request(
    docker: aiodocker.Docker,
    path: str,
    params: Mapping[str, str],
    timeout: aiohttp.ClientTimeout | None = None,
) -> AbstractAsyncContextManager[aiohttp.ClientResponse]:
    """The Engine's answer as aiohttp's response, not decoded.

    aiodocker's public calls decode every answer on the event loop (response.json()), and have no way to get the
    bytes. Its request helper is what they all use: it negotiates the API version and turns error statuses and
    refused connections into DockerError. We call it, never change it.
    """
    if timeout is None:
        return docker._query(path, params=dict(params))
    return docker._query(path, params=dict(params), timeout=timeout)


async def engine_chunks(docker: aiodocker.Docker, path: str, params: Mapping[str, str]) -> list[bytes]:
    """The answer's bytes as they arrived, chunk by chunk: never joined. aiohttp's read() keeps every chunk until the
    end and then joins them, twice the answer at once (two 20 MB answers at 10,000 machines, listed together, were
    the service's peak of memory)."""
    async with engine_request(docker, path, params) as response:
        return [chunk async for chunk in response.content.iter_any()]


async def event_kinds(response: aiohttp.ClientResponse) -> AsyncIterator[str | None]:
    """The Type of each event on an open stream (the Engine writes one JSON object per line)."""
    async for line in response.content:
        if line.strip():
            event = json.loads(line)
            yield event.get("Type") if isinstance(event, dict) else None


class Unsplittable(ValueError):
    """The answer is not as `elements` expects it: decode it whole instead."""


def elements(body: bytes) -> Iterator[Entry]:
    """Each element of a listing as its ID, its version and a function that decodes it, found in the bytes.

    Splitting at `},{"ID":"` is right when every piece is one whole object: the separator cannot be inside a
    string (its quotes would end it), and between two elements it always is; inside one it would need a list of
    objects that start with an ID and a version, which no node, service or task holds. A piece is checked as it
    is decoded (one object, that ID, that version); one that is not decoded was read whole at this version before.
    Raises Unsplittable (now or as the entries are taken) for an answer that is not so; nothing was read then.
    Nothing is copied: the pieces are found, and only those decoded are cut out of the answer.
    """
    return elements_in((body,))


def elements_in(chunks: Iterable[bytes]) -> Iterator[Entry]:
    """`elements` of an answer given as the chunks it arrived in, never joined into one: only the unfinished element
    is carried from one chunk to the next. The answer's end is checked last, so Unsplittable may come after entries
    were taken: a caller keeps nothing read from entries that raised (ByVersion does not)."""
    # One at a time: an entry dies as soon as it is read (10,000 of them alive at once would live long enough
    # for the garbage collector to count them as long-lived, and run its full pass).
    seen: set[str] = set()
    pending, start, opened = b"", 0, False
    for chunk in chunks:
        # What is left of the last chunk (the unfinished element, or an opening too short to tell) and this one.
        pending = pending[start:] + chunk if pending else chunk
        start = 0
        if not opened:
            first = _skip_blank_bytes(pending, 0, 1)
            if len(pending) - first < len(_OPENING):
                continue  # too short to tell yet: "[]", or an opening split between chunks
            if not pending.startswith(_OPENING, first):
                raise Unsplittable("the answer is not a list of swarm objects starting with their ID")
            start, opened = first + len(_OPENING), True
        while (separator := pending.find(_SEPARATOR, start)) != -1:
            yield _entry(pending, start, separator, seen)
            start = separator + len(_SEPARATOR)
    end = _skip_blank_bytes(pending, len(pending), -1)
    if not opened:
        if pending[_skip_blank_bytes(pending, 0, 1) : end] == b"[]":
            return
        raise Unsplittable("the answer is not a list of swarm objects starting with their ID")
    # The last element runs to the `}` that closes it, before the `]` that closes the answer.
    if end - start < 2 or not pending.endswith(b"}]", start, end):
        raise Unsplittable("the answer does not end as a list of objects")
    yield _entry(pending, start, end - 2, seen)


def _entry(body: bytes, start: int, stop: int, seen: set[str]) -> Entry:
    head = _HEAD.match(body, start, stop)
    if head is None:
        raise Unsplittable("an element does not start with its ID and version")
    object_id, version = head[1].decode(), int(head[2])
    if object_id in seen:
        raise Unsplittable(f"the ID {object_id} comes twice")
    seen.add(object_id)
    return object_id, version, partial(_decode_piece, body, start, stop, object_id, version)


def _decode_piece(body: bytes, start: int, stop: int, object_id: str, version: int) -> Mapping[str, Any]:
    try:
        raw = json.loads(_FIRST + body[start:stop] + b"}")
    except ValueError as error:
        raise Unsplittable(f"element {object_id} is not one JSON object: {error}") from error
    if not isinstance(raw, dict) or raw.get("ID") != object_id or version_of(raw) != version:
        raise Unsplittable(f"element {object_id} decodes to another object")
    return raw


def _skip_blank_bytes(body: bytes, index: int, step: int) -> int:
    """From index (forward, step 1; or backward from an end, step -1), past the JSON blanks."""
    if step > 0:
        while index < len(body) and body[index] in b" \t\n\r":
            index += 1
        return index
    while index > 0 and body[index - 1] in b" \t\n\r":
        index -= 1
    return index


def decoded(body: bytes) -> Iterator[Entry]:
    """Each element of a JSON array decoded one at a time, as entries. One element at a time keeps the decoded
    objects out of memory together, and lets other threads (the event loop) have the GIL between two."""
    text = body.decode()
    decoder = json.JSONDecoder()
    index = _skip_blanks(text, 0)
    if text[index : index + 1] != "[":
        raise ValueError("the answer is not a JSON array")
    index = _skip_blanks(text, index + 1)
    if text[index : index + 1] == "]":
        return
    while True:
        raw, index = decoder.raw_decode(text, index)
        if not isinstance(raw, dict):
            raise ValueError("an element of the answer is not an object")
        yield str(raw["ID"]), version_of(raw), partial(_itself, raw)
        index = _skip_blanks(text, index)
        if text[index : index + 1] == "]":
            return
        if text[index : index + 1] != ",":
            raise ValueError(f"the answer's array is broken at character {index}")
        index = _skip_blanks(text, index + 1)


def version_of(raw: Mapping[str, Any]) -> int | None:
    """The swarm object's version: the store bumps it on every change, its status included."""
    index = (raw.get("Version") or {}).get("Index")
    return index if isinstance(index, int) else None


def _itself(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    return raw


def _skip_blanks(text: str, index: int) -> int:
    blanks = _BLANKS.match(text, index)
    return blanks.end() if blanks is not None else index
