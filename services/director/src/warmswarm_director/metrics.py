"""The director's Prometheus metrics (request → running by start path, cache hits and misses) and the sessions told.

The director sees both ends of a session's start: the service's creation (the request) and its task's running.
Each session is observed once, when the director first answers "running" for it, with the swarm's own moments
(the service's CreatedAt, the task's Status.Timestamp), so the value does not depend on when the platform asks.

| metric | type | labels | meaning |
|---|---|---|---|
| `warmswarm_session_start_seconds` | histogram | `path` | Request (service created) → running (its task), a session. |
| `warmswarm_cache_hits_total` | counter | | Cache sessions that found their owner's volume (older than the request). |
| `warmswarm_cache_misses_total` | counter | | Cache sessions whose volume was made for them. |

`path`: a warmswarm_models.start.StartPath (`hot_claim`, `buffer_claim`, `warm_resume`, `cache_return`,
`cold_launch`, `running_return`) or `unknown` (the autoscaler did not say). A session that was running before this
process started is not observed (an earlier process may have); counters restart with the process.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from warmswarm_models.start import START_PATHS, StartPath

CONTENT_TYPE: Final = prometheus_client.exposition.CONTENT_TYPE_PLAIN_0_0_4
UNKNOWN_PATH: Final = "unknown"
# From a hot claim's seconds to a cold launch's minutes (boot, images, volume), up to 15 minutes.
START_BUCKETS_S: Final = (1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 450.0, 600.0, 900.0)
# Sessions remembered (their path) per process: more than any swarm runs at once.
MAX_SESSIONS: Final = 10_000


class SessionMetrics:
    """The director's registry: the start histogram and the cache counters, every label value from the start at 0."""

    def __init__(self) -> None:
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self._start = Histogram(
            "warmswarm_session_start_seconds",
            "Request (service created) to running (its task), per session, by start path.",
            ["path"],
            buckets=START_BUCKETS_S,
            registry=self.registry,
        )
        self._hits = Counter(
            "warmswarm_cache_hits", "Cache sessions that found their owner's volume.", registry=self.registry
        )
        self._misses = Counter(
            "warmswarm_cache_misses", "Cache sessions whose volume was made for them.", registry=self.registry
        )
        for path in (*START_PATHS, UNKNOWN_PATH):
            self._start.labels(path)

    def started(self, path: StartPath | None, wait_s: float, cache_hit: bool | None) -> None:
        """One session ran after `wait_s`; `cache_hit` None: it has no cache (or whether it hit is not known)."""
        self._start.labels(path or UNKNOWN_PATH).observe(max(wait_s, 0.0))
        if cache_hit is not None:
            (self._hits if cache_hit else self._misses).inc()

    def exposition(self) -> bytes:
        """The text format 0.0.4 body of GET /metrics."""
        return prometheus_client.generate_latest(self.registry)


@dataclass(frozen=True, slots=True)
class Told:
    """What one session's start came to: its path, None when the autoscaler could not tell it."""

    path: StartPath | None


class Sessions:
    """Each session's start path by service id, decided and observed once (the first "running" answer); bounded.

    Once only, even when the autoscaler failed to tell it: a running session's status asks the autoscaler at most
    once, so an autoscaler that is down slows one answer per session, never every poll of it."""

    def __init__(self, metrics: SessionMetrics, *, since: float) -> None:
        self.metrics = metrics
        self._since = since  # epoch s: this process's start; sessions running before are not observed
        self._told: OrderedDict[str, Told] = OrderedDict()

    def get(self, service_id: str) -> Told | None:
        return self._told.get(service_id)

    def decide(
        self,
        service_id: str,
        path: StartPath | None,
        *,
        requested_at: float | None,
        running_at: float | None,
        cache_hit: bool | None,
    ) -> StartPath | None:
        """Remember the session's path and observe its start (unless it ran before this process started)."""
        self._told[service_id] = Told(path)
        while len(self._told) > MAX_SESSIONS:
            self._told.popitem(last=False)
        if requested_at is not None and running_at is not None and running_at >= self._since:
            self.metrics.started(path, running_at - requested_at, cache_hit if path is not None else None)
        return path
