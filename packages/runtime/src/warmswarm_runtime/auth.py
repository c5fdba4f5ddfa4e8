"""Bearer tokens: the check both services make before an operator's (or the platform's) request, in one place."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer


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


# Read through FastAPI's HTTPBearer so that the OpenAPI documents say which routes take a token (a security
# scheme, not a header parameter); auto_error=False leaves every refusal, and its words, to the guard.
_BEARER = HTTPBearer(auto_error=False, description="'Authorization: Bearer <token>'")


def _presented(credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)]) -> str | None:
    """The Authorization header as the guard reads it; None when there is none, or it is not a bearer token."""
    return None if credentials is None else f"{credentials.scheme} {credentials.credentials}"


def bearer_guard(*tokens: str | None, refused: str, off: str = "") -> Callable[[str | None], None]:
    """A FastAPI dependency admitting any of `tokens`: 401 (`refused`) without one; 403 (`off`) when none is set.

    Several tokens: a route open to more than one kind of caller (the platform and ops), each with its own.
    """
    expected = [BearerToken(token) for token in tokens if token is not None]

    def guard(authorization: Annotated[str | None, Depends(_presented)]) -> None:
        if not expected:
            raise HTTPException(403, off)
        # Every token is compared, so the time taken does not tell which one matched.
        if not any([token.admits(authorization) for token in expected]):
            raise HTTPException(401, refused, {"WWW-Authenticate": "Bearer"})

    return guard
