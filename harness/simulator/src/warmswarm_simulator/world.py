"""One simulated run's shared context: the virtual clock (seconds since the day's midnight), epoch time, timers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVarTuple, Unpack

from warmswarm_simulator.vclock import VirtualLoop

Ts = TypeVarTuple("Ts")


class World:
    """The clock every model, the autoscaler and the baseline share; `now_s` is 0.0 at the day's midnight."""

    def __init__(self, loop: VirtualLoop, day_epoch_s: float) -> None:
        self.loop = loop
        self.day_epoch_s = day_epoch_s
        self._timers = 0

    @property
    def now_s(self) -> float:
        return self.loop.time()

    def epoch(self) -> float:
        """Epoch seconds now: what the autoscaler's clock and AWS's timestamps read."""
        return self.day_epoch_s + self.loop.time()

    def to_day_s(self, epoch_s: float) -> float:
        return epoch_s - self.day_epoch_s

    def after(self, delay_s: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts) -> asyncio.TimerHandle:
        self._timers += 1
        return self.loop.call_later(max(0.0, delay_s), callback, *args)

    def at(self, day_s: float, callback: Callable[[Unpack[Ts]], object], *args: *Ts) -> asyncio.TimerHandle:
        self._timers += 1
        return self.loop.call_at(max(day_s, self.loop.time()), callback, *args)

    @property
    def timers_set(self) -> int:
        return self._timers
