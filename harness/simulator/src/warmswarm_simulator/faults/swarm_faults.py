"""The swarm port with faults: SimSwarmPort behind Docker API errors, lost answers, and a replica that freezes.

A read or an update may fail (SwarmError, as the aiodocker adapter raises for a 500 or a timeout), an update may take
effect and lose its answer, and the stale replica's task list may come back only after a freeze (a pause of that
process: its snapshot is old when it plans, and its lease ends meanwhile).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from warmswarm_autoscaling.ports import JoinInfo, SwarmError
from warmswarm_autoscaling.snapshot import Node, Task

from warmswarm_simulator.faults.dice import Dice
from warmswarm_simulator.faults.ec2_faults import Watch
from warmswarm_simulator.faults.history import Call
from warmswarm_simulator.simports import SimSwarmPort
from warmswarm_simulator.world import World

T = TypeVar("T")


class FaultySwarm:
    """Implements ports.Swarm over `inner` for one replica."""

    def __init__(
        self, inner: SimSwarmPort, world: World, dice: Dice, *, replica: str, watch: Watch | None = None
    ) -> None:
        self._inner = inner
        self._world = world
        self._dice = dice
        self._replica = replica
        self._watch = watch
        self._counts: Counter[str] = Counter()
        self._counted_cycle = -1
        self.freeze_s = 0.0  # the next task list answers this much later (then 0 again)

    def _site(self, operation: str) -> str:
        if self._counted_cycle != self._dice.cycle:
            self._counts.clear()
            self._counted_cycle = self._dice.cycle
        self._counts[operation] += 1
        return f"{self._replica} docker {operation}#{self._counts[operation]}"

    def _refused(self, operation: str, target: str) -> SwarmError | None:
        site = self._site(operation)
        if self._dice.fires("docker", site, f"{self._replica} docker {operation} {target}: 500 from the manager"):
            return SwarmError(f"docker {operation}: 500 Internal Server Error (injected by the fault campaign)")
        return None

    async def _read(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        refused = self._refused(operation, "")
        if refused is not None:
            await asyncio.sleep(0.01)
            raise refused
        return await call()

    async def _update(self, operation: str, target: str, call: Callable[[], Awaitable[None]]) -> None:
        site_refused = self._refused(operation, target)
        history = self._dice.history
        if site_refused is not None:
            await asyncio.sleep(0.01)
            history.calls.append(
                Call(self._dice.cycle, self._replica, self._world.now_s, operation, target, "refused 500")
            )
            raise site_refused
        if self._watch is not None:
            self._watch(self._replica, operation, (target.split()[0],))
        try:
            await call()
        except SwarmError as error:
            history.calls.append(
                Call(self._dice.cycle, self._replica, self._world.now_s, operation, target, f"error {error}")
            )
            raise
        site = f"{self._replica} docker {operation}#{self._counts[operation]}"
        lost = self._dice.fires("lost", site, f"{self._replica} docker {operation} {target}: took effect, answer lost")
        outcome = "lost timeout" if lost else "ok"
        history.calls.append(Call(self._dice.cycle, self._replica, self._world.now_s, operation, target, outcome))
        if lost:
            raise SwarmError(f"docker {operation}: timed out reading the answer (injected by the fault campaign)")

    async def list_nodes(self) -> list[Node]:
        return await self._read("list nodes", self._inner.list_nodes)

    async def list_tasks(self) -> list[Task]:
        freeze_s, self.freeze_s = self.freeze_s, 0.0
        if freeze_s > 0:
            await asyncio.sleep(freeze_s)
        return await self._read("list tasks", self._inner.list_tasks)

    async def join_info(self) -> JoinInfo:
        return await self._read("inspect the swarm", self._inner.join_info)

    async def update_node(
        self,
        node_id: str,
        *,
        labels: Mapping[str, str] | None = None,
        availability: str | None = None,
        remove_labels: Sequence[str] = (),
    ) -> None:
        # One update, so one fault site: a strip's removals and merge are refused, or lost, together.
        removed = f"-labels {sorted(remove_labels)}" if remove_labels else ""
        what = " ".join(filter(None, [f"labels {sorted(labels)}" if labels else "", removed, availability or ""]))
        operation = "drain node" if availability == "drain" else "update node"
        await self._update(
            operation,
            f"{node_id} {what}",
            lambda: self._inner.update_node(
                node_id, labels=labels, availability=availability, remove_labels=remove_labels
            ),
        )

    async def remove_node(self, node_id: str) -> None:
        await self._update("remove node", node_id, lambda: self._inner.remove_node(node_id))

    def events(self) -> AsyncIterator[str]:
        return self._inner.events()
