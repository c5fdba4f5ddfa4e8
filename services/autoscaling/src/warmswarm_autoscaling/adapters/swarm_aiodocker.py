"""The Swarm port on aiodocker: one manager's nodes, tasks, join info and events, Docker errors turned into ours."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import aiodocker
import aiohttp

from warmswarm_autoscaling.adapters.swarm_answers import SwarmAnswers
from warmswarm_autoscaling.adapters.swarm_listings import (
    NODE,
    RELIST_INTERVAL_S,
    SERVICE,
    Freshness,
    engine_chunks,
    engine_request,
    event_kinds,
)
from warmswarm_autoscaling.ports import JoinInfo, SwarmError
from warmswarm_autoscaling.snapshot import Node, Task

log = logging.getLogger(__name__)

T = TypeVar("T")

_AVAILABILITIES: Final = frozenset({"active", "pause", "drain"})
_EVENT_TYPES: Final = (NODE, SERVICE)
# A node update carries the version it was read at; a concurrent writer (another update, or the
# manager itself recording the node's status) makes it stale. Re-read and retry, a bounded number
# of times, with jittered backoff so concurrent writers spread out instead of colliding again.
_UPDATE_ATTEMPTS: Final = 8
_UPDATE_RETRY_BASE_S: Final = 0.02
_OUT_OF_SEQUENCE: Final = "update out of sequence"
_EVENTS_RETRY_MIN_S: Final = 0.5
_EVENTS_RETRY_MAX_S: Final = 30.0
# The stream has no end and no deadline; only its opening has one (a daemon that never answers is a broken stream).
_EVENTS_TIMEOUT: Final = aiohttp.ClientTimeout(total=None, sock_read=None, sock_connect=30.0)
# The desired states of a task that is, or may become, work (snapshot.TERMINAL_TASK_STATES are the others).
# The Engine keeps finished tasks (desired shutdown, complete, remove) as history, several per replica;
# asking only for these keeps a cycle's listing the size of the work, not of the cluster's past.
LIVE_DESIRED_STATES: Final = ("new", "pending", "assigned", "accepted", "preparing", "ready", "starting", "running")
_LIVE_TASKS: Final = {"filters": json.dumps({"desired-state": list(LIVE_DESIRED_STATES)})}
_SWARM_EVENTS: Final = {"filters": json.dumps({"type": list(_EVENT_TYPES)})}
# aiodocker's status for "the daemon could not be reached" (no HTTP answer at all).
_NO_ANSWER: Final = 900


class AiodockerSwarm:
    """Implements ports.Swarm through the Engine API of a swarm manager."""

    def __init__(self, docker: aiodocker.Docker, *, relist_interval_s: float = RELIST_INTERVAL_S) -> None:
        self._docker = docker
        self._answers = SwarmAnswers()
        # Nodes and services are listed again only when they may have changed (swarm_listings says when).
        self._fresh = Freshness(relist_interval_s)
        self._nodes: list[Node] = []
        # One listing of a kind at a time: a second caller waits for the first one's answer instead of taking
        # the readings from before it as fresh.
        self._nodes_lock = asyncio.Lock()
        self._tasks_lock = asyncio.Lock()
        self._listed: Counter[str] = Counter()

    @property
    def listed(self) -> Mapping[str, int]:
        """How many times nodes, services and tasks were listed: what the shortcuts save shows here."""
        return dict(self._listed)

    async def list_nodes(self) -> list[Node]:
        async with self._nodes_lock:
            if not self._fresh.stands(NODE):
                with self._fresh.listing(NODE):
                    body = await self._get("list nodes", "nodes", {})
                    self._nodes = await self._read("list nodes", self._answers.nodes_json, body)
            return list(self._nodes)

    async def list_tasks(self) -> list[Task]:
        """Every cycle: the Engine has no task events. An answer equal to the last one is not decoded."""
        async with self._tasks_lock:
            body = await self._get("list tasks", "tasks", _LIVE_TASKS)
            # Read after the tasks, so every task's service is in it unless it was removed in between.
            listed = await self._list_services(forced=False)
            tasks, unknown = await self._read("list tasks", self._answers.tasks_json, body)
            if unknown and not listed:
                # A service whose event has not come yet (or was lost): read its tasks with it.
                await self._list_services(forced=True)
                tasks, _ = await self._read("list tasks", self._answers.tasks_json, body)
            return tasks

    async def _list_services(self, *, forced: bool) -> bool:
        """Lists the services the tasks are read with, when they may have changed; True when it listed."""
        if not forced and self._fresh.stands(SERVICE):
            return False
        with self._fresh.listing(SERVICE):
            body = await self._get("list services", "services", {})
            await self._read("list services", self._answers.services_json, body)
        return True

    async def _get(self, what: str, path: str, params: Mapping[str, str]) -> list[bytes]:
        self._listed[path] += 1
        return await self._call(what, engine_chunks(self._docker, path, params))

    async def _read(self, what: str, read: Callable[[list[bytes]], T], body: list[bytes]) -> T:
        """Decoded and read in a worker thread: 20 MB of JSON would hold the event loop for hundreds of ms."""
        try:
            return await asyncio.to_thread(read, body)
        except ValueError as error:
            raise SwarmError(f"could not {what}: the Engine's answer is not the JSON expected ({error})") from error

    async def join_info(self) -> JoinInfo:
        swarm = await self._call("inspect the swarm", self._docker.swarm.inspect())
        managers = await self._call("list managers", self._docker.nodes.list(filters={"role": "manager"}))
        leaders = [m["ManagerStatus"] for m in managers if (m.get("ManagerStatus") or {}).get("Leader")]
        if not leaders:
            raise SwarmError(
                "the swarm has no leader right now (an election is running or quorum is lost); retry shortly"
            )
        return JoinInfo(manager_addr=str(leaders[0]["Addr"]), worker_token=str(swarm["JoinTokens"]["Worker"]))

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        if availability is not None and availability not in _AVAILABILITIES:
            raise SwarmError(
                f"cannot set node {node_id} to availability {availability!r}: use one of {sorted(_AVAILABILITIES)}"
            )
        for attempt in range(1, _UPDATE_ATTEMPTS + 1):
            raw = await self._inspect_node(node_id)
            spec = dict(raw.get("Spec") or {})
            old_labels = dict(spec.get("Labels") or {})
            # One spec, so the removals and the merge land in one update: no reader sees the node half-stripped
            # with the new labels missing, or relabelled with the old ones still on. An absent key is no error.
            new_labels = {key: value for key, value in old_labels.items() if key not in remove_labels}
            new_labels.update(labels or {})
            new_availability = availability or spec.get("Availability")
            if new_labels == old_labels and new_availability == spec.get("Availability"):
                # Nothing to write: a no-op update would still emit a node event and wake the loop again.
                return
            spec["Labels"] = new_labels
            spec["Availability"] = new_availability
            try:
                try:
                    await self._docker.nodes.update(node_id=node_id, version=raw["Version"]["Index"], spec=spec)
                finally:
                    # Whatever the answer (a timeout may follow a write that landed): the next listing lists,
                    # without waiting for the node's event.
                    self._fresh.changed(NODE)
                return
            except aiodocker.DockerError as error:
                if error.status == 404:
                    raise _node_gone(node_id) from error
                if _OUT_OF_SEQUENCE not in error.message:
                    raise self._failure(f"update node {node_id}", error) from error
                if attempt == _UPDATE_ATTEMPTS:
                    raise SwarmError(
                        f"node {node_id} kept changing while we updated it ({attempt} tries, last:"
                        f" {error.message}); the next cycle tries again"
                    ) from error
                log.debug("node %s changed while we updated it (try %d): %s", node_id, attempt, error.message)
            except (aiohttp.ClientError, TimeoutError) as error:
                raise self._failure(f"update node {node_id}", error) from error
            await asyncio.sleep(_UPDATE_RETRY_BASE_S * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))

    async def remove_node(self, node_id: str) -> None:
        try:
            try:
                await self._docker.nodes.remove(node_id=node_id, force=True)
            finally:
                self._fresh.changed(NODE)
        except aiodocker.DockerError as error:
            if error.status != 404:
                raise self._failure(f"remove node {node_id}", error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise self._failure(f"remove node {node_id}", error) from error

    async def events(self) -> AsyncGenerator[str, None]:
        """Yields "node" or "service" per event, forever; a broken stream is reopened after a backoff.

        Events lost while the stream is down are not replayed: an open stream makes the next listings list, and
        the loop's periodic resync covers the rest. Nodes and services are reused between listings only while
        a stream is open and its consumer keeps reading it.
        """
        retry_s = _EVENTS_RETRY_MIN_S
        while True:
            opened_at_s = time.monotonic()
            reason = "closed"
            try:
                async with engine_request(self._docker, "events", _SWARM_EVENTS, _EVENTS_TIMEOUT) as response:
                    with self._fresh.watching():
                        async for kind in event_kinds(response):
                            if kind not in _EVENT_TYPES:
                                continue
                            retry_s = _EVENTS_RETRY_MIN_S
                            self._fresh.changed(kind)
                            with self._fresh.paused():
                                yield kind
            except (aiodocker.DockerError, aiohttp.ClientError, TimeoutError, ValueError) as error:
                # A refused connection, a cut or garbled stream: every such end means the same, reopen after a backoff.
                reason = f"{type(error).__name__}: {error}"
            if time.monotonic() - opened_at_s > _EVENTS_RETRY_MAX_S:
                # A stream that held for a while, even a quiet one, was healthy: start the backoff afresh.
                retry_s = _EVENTS_RETRY_MIN_S
            log.warning("the Docker event stream ended (%s); reopening it in %.1f s", reason, retry_s)
            await asyncio.sleep(retry_s)
            retry_s = min(retry_s * 2, _EVENTS_RETRY_MAX_S)

    async def _inspect_node(self, node_id: str) -> Mapping[str, Any]:
        try:
            return await self._docker.nodes.inspect(node_id=node_id)
        except aiodocker.DockerError as error:
            if error.status == 404:
                raise _node_gone(node_id) from error
            raise self._failure(f"inspect node {node_id}", error) from error
        except (aiohttp.ClientError, TimeoutError) as error:
            raise self._failure(f"inspect node {node_id}", error) from error

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except (aiodocker.DockerError, aiohttp.ClientError, TimeoutError) as error:
            raise self._failure(what, error) from error

    def _failure(self, what: str, error: Exception) -> SwarmError:
        if isinstance(error, aiodocker.DockerError):
            if error.status == _NO_ANSWER:
                return SwarmError(
                    f"could not {what}: {error.message}; check DOCKER_HOST and that the Docker daemon runs"
                )
            if error.status == 503:
                hint = "point DOCKER_HOST at a swarm manager (or the swarm has lost quorum)"
            else:
                hint = "the next cycle tries again"
            return SwarmError(f"could not {what}: Docker answered [{error.status}] {error.message}; {hint}")
        return SwarmError(
            f"could not {what}: {type(error).__name__} {error}; check DOCKER_HOST and that the daemon answers"
        )


def _node_gone(node_id: str) -> SwarmError:
    return SwarmError(f"node {node_id} is not in the swarm (removed, or never joined); re-read the nodes")
