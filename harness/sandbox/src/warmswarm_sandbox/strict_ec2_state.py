"""What the strict EC2 layer remembers that moto does not model: pending instances, moving volumes, ClientTokens."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from warmswarm_ec2rules.modifications import MODIFICATION_COOLDOWN_S, Modification, Timing
from warmswarm_ec2rules.refusals import Refusal
from warmswarm_ec2rules.tokens import ClientTokens

from warmswarm_sandbox.strict_ec2_upstream import Answer, Call
from warmswarm_sandbox.strict_ec2_wire import param


@dataclass(frozen=True)
class Move:
    """A volume attaching or detaching: moto does either at once, AWS takes a while."""

    state: Literal["attaching", "detaching"]
    instance_id: str
    device: str
    attach_time: str
    until_s: float


class NodeAddresses:
    """The private address of each instance: in the sandbox, the address its machine really uses on the
    sandbox's own bridge (10.K.H.L), given at launch and kept for the instance's life, never reused."""

    def __init__(self, subnet: int, first_host_index: int) -> None:
        self._subnet = subnet
        self._next_index = first_host_index
        self._by_instance: dict[str, str] = {}

    def of(self, instance_id: str) -> str:
        """The instance's address, given now if it has none yet."""
        if instance_id not in self._by_instance:
            while self._next_index % 256 in (0, 255):
                self._next_index += 1
            index, self._next_index = self._next_index, self._next_index + 1
            self._by_instance[instance_id] = f"10.{self._subnet}.{index // 256}.{index % 256}"
        return self._by_instance[instance_id]

    def all(self) -> dict[str, str]:
        return dict(self._by_instance)


class Mirror:
    """When each instance (re)started and which volumes are on the move, with how long AWS would take for each."""

    def __init__(
        self,
        *,
        pending_s: float,
        attach_s: float,
        detach_s: float,
        modifying_s: float = 1.0,
        optimizing_s: float = 2.0,
        modify_cooldown_s: float = MODIFICATION_COOLDOWN_S,
    ) -> None:
        # The layer's admin API changes these while it runs; the rules read them at each call.
        self.pending_s = pending_s
        self.attach_s = attach_s
        self.detach_s = detach_s
        self.modifying_s = modifying_s
        self.optimizing_s = optimizing_s
        self.modify_cooldown_s = modify_cooldown_s
        self.started_s: dict[str, float] = {}
        self.moves: dict[str, Move] = {}
        # Each volume's last ModifyVolume (moto completes one at once and allows the next at once): kept, not pruned,
        # for the cooldown; the monotonic clock's seconds.
        self.modifications: dict[str, Modification] = {}
        # One volume change at a time: a check ("not attached") and the change it allows must not interleave.
        self.volume_lock = asyncio.Lock()

    def prune(self, now_s: float) -> None:
        self.started_s = {key: at_s for key, at_s in self.started_s.items() if now_s < at_s + self.pending_s}
        self.moves = {key: move for key, move in self.moves.items() if now_s < move.until_s}

    def clear(self) -> None:
        self.started_s.clear()
        self.moves.clear()
        self.modifications.clear()

    @property
    def modification_timing(self) -> Timing:
        return Timing(self.modifying_s, self.optimizing_s, self.modify_cooldown_s)

    def visible_state(self, instance_id: str, moto_state: str | None, now_s: float) -> str | None:
        started_s = self.started_s.get(instance_id)
        if moto_state == "running" and started_s is not None and now_s < started_s + self.pending_s:
            return "pending"
        return moto_state


class IdempotentCalls:
    """AWS's ClientToken rule (warmswarm_ec2rules.tokens) over the layer's calls, arguments compared as Query
    parameters: a replay answers the first success again, as it is now (`refresh`)."""

    def __init__(self) -> None:
        self._tokens: ClientTokens[Answer] = ClientTokens()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def clear(self) -> None:
        self._tokens.clear()

    async def idempotent(
        self,
        call: Call,
        act: Callable[[Call], Awaitable[Answer]],
        refresh: Callable[[Call, Answer], Awaitable[Answer]] | None = None,
    ) -> Answer:
        token = param(call.params, "ClientToken")
        if not token:
            return await act(call)
        # One answer per token even when retries of one call race each other.
        async with self._locks[f"{call.action}:{token}"]:
            arguments = tuple(sorted((key, value) for key, value in call.params if key != "ClientToken"))
            replay = self._tokens.recall(call.action, token, arguments)
            if isinstance(replay, Refusal):
                return Answer.refused(replay)
            if replay is not None:
                return replay.answer if refresh is None else await refresh(call, replay.answer)
            answer = await act(call)
            self._tokens.remember(call.action, token, arguments, answer, succeeded=answer.ok)
            return answer
