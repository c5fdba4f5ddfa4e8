"""The ClientToken rule: a call repeated with its token answers what the first success made; other arguments are
refused; a failure is not remembered.

AWS, EC2 Developer Guide, "Ensuring idempotency in Amazon EC2 API requests"
https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html : a retried request with the same client
token and the same arguments succeeds without doing anything more and answers as the first did ("the result might
contain updated information, such as the current creation status"); the same token with other arguments is
IdempotentParameterMismatch; a token is free again after its request failed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from warmswarm_ec2rules.refusals import Refusal, client_error

A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class Replay(Generic[A]):
    """The first success of a token, to be answered again (its caller shows it as things are now)."""

    answer: A


@dataclass(frozen=True, slots=True)
class _First(Generic[A]):
    arguments: Hashable
    answer: A


class ClientTokens(Generic[A]):
    """The first success of each (action, token); `arguments` are whatever the caller compares calls by, every
    argument but the token. An empty token asks for no idempotency."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], _First[A]] = {}

    def recall(self, action: str, token: str, arguments: Hashable) -> Replay[A] | Refusal | None:
        """The replay of an earlier success with this token, AWS's refusal if its arguments differ, or None: a
        token not seen yet (the call is made)."""
        first = self._first.get((action, token)) if token else None
        if first is None:
            return None
        if first.arguments != arguments:
            return client_error(
                "IdempotentParameterMismatch",
                "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).",
            )
        return Replay(first.answer)

    def remember(self, action: str, token: str, arguments: Hashable, answer: A, *, succeeded: bool) -> None:
        """Keeps a call's answer for its token, if it succeeded: after a failure the token may try again."""
        if token and succeeded:
            self._first.setdefault((action, token), _First(arguments, answer))

    def clear(self) -> None:
        self._first.clear()
