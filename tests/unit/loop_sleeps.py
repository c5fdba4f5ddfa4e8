"""The reconcile loop's sleeps without the wall clock: each sleep the loop asks for is recorded and returns at once,
and the loop is stopped after a given number of them. A test then reads how long the loop chose to sleep, and
knows how many cycles ran, instead of sleeping itself and hoping the loop did (or did not) cycle meanwhile."""

from __future__ import annotations

import asyncio

from warmswarm_autoscaling.reconciler import Alarm, Reconciler


class RecordedSleeps(Alarm):
    def __init__(self, stop: asyncio.Event, *, sleeps: int, rung: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.stop = stop
        self.sleeps = sleeps
        self.rung = rung  # the sleeps (counted from 1) that end by an event rather than by their delay
        self.delays: list[float] = []

    async def sleep(self, delay_s: float, stop: asyncio.Event) -> bool:
        self.delays.append(delay_s)
        if len(self.delays) >= self.sleeps:
            self.stop.set()
        await asyncio.sleep(0)
        return len(self.delays) in self.rung and not stop.is_set()


async def run_loop(scaler: Reconciler, *, sleeps: int, rung: tuple[int, ...] = ()) -> list[float]:
    """Run the loop until it has gone to sleep `sleeps` times; the delays it asked for, in order."""
    stop = asyncio.Event()
    recorded = RecordedSleeps(stop, sleeps=sleeps, rung=rung)
    scaler._alarm = recorded  # the loop's one way to wait: replaced, so that no test waits on the clock
    async with asyncio.timeout(30):  # generous: the loop never waits here, so this only catches a hang
        await scaler.run(stop)
    return recorded.delays
