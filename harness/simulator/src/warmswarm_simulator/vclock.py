"""Virtual time for asyncio: an event loop whose clock jumps to the next timer instead of sleeping.

Everything on the loop (the real reconciler, the baseline, the modelled cloud and swarm) sees the same clock, so a
day runs in seconds and the same inputs always give the same schedule. Work sent to an executor runs inline: the
reconciler plans in a worker thread in production, and a thread would let wall time leak into the schedule.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any, TypeVar, TypeVarTuple, Unpack

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class Stalled(RuntimeError):
    """Nothing is scheduled and nothing is ready: in a closed world that means every actor waits forever."""


class _Clock:
    def __init__(self) -> None:
        self.now_s = 0.0


class _AdvancingSelector(selectors.BaseSelector):
    """Keeps the loop's own registrations (its self-pipe) and, instead of waiting for I/O, advances the clock."""

    def __init__(self, clock: _Clock) -> None:
        self._clock = clock
        self._inner = selectors.DefaultSelector()

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Stalled("no timer is scheduled and nothing is ready: the simulated world would wait forever")
        if timeout > 0:
            self._clock.now_s += timeout
        return []

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()


class VirtualLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on virtual seconds (0.0 at creation); `time()` is what every timer and sleep uses."""

    def __init__(self) -> None:
        self._virtual = _Clock()
        super().__init__(selector=_AdvancingSelector(self._virtual))
        # How long the work handed to a thread stalls before it answers (a CPU-starved or paused process), asked at
        # each hand-off in the caller's task: the fault campaign's stale replica stalls in its plan.
        self.stall_s: Callable[[], float] = lambda: 0.0

    def time(self) -> float:
        return self._virtual.now_s

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[Ts]], T], *args: *Ts
    ) -> asyncio.Future[T]:
        # Inline, so no wall time passes between the call and its answer (asyncio.to_thread lands here).
        future: asyncio.Future[T] = self.create_future()
        stall_s = self.stall_s()
        try:
            result = func(*args)
        except Exception as error:
            future.set_exception(error)
            return future
        if stall_s > 0:
            self.call_later(stall_s, future.set_result, result)
        else:
            future.set_result(result)
        return future
