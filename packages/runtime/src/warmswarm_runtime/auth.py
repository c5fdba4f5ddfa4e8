"""Bearer tokens: the check both services make before an operator's (or the platform's) request, in one place."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Header, HTTPException


def _digest(text: str) -> bytes:
    # Comparing fixed-length digests keeps even the token's length out of the timing.
    return hashlib.sha256(text.encode()).digest()


class BearerToken:
    """Checks an `Authorization` header against the configured token, in constant time."""

    def __init__(self, token: str) -> None:
        self._expected = _digest(token)

    def admits(self, authorization: str | None) -> bool:
        """True for exactly 'Bearer <token>' (the scheme in any case, spaces around the token ignored)."""
        scheme, _, presented = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(presented.strip()), self._expected)


def bearer_guard(token: str | None, *, refused: str, off: str = "") -> Callable[[str | None], None]:
    """A FastAPI dependency: 401 (with `refused`) without the token; 403 (with `off`) when no token is set."""
    expected = None if token is None else BearerToken(token)

    def guard(authorization: Annotated[str | None, Header()] = None) -> None:
        if expected is None:
            raise HTTPException(403, off)
        if not expected.admits(authorization):
            raise HTTPException(401, refused, {"WWW-Authenticate": "Bearer"})

    return guard
