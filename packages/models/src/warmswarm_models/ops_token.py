"""The ops bearer token both services check before an operator's act (group properties, early expiry)."""

from __future__ import annotations

import hashlib
import hmac

# A shorter token can be guessed; both services refuse to start with one.
MIN_OPS_TOKEN_CHARS = 16


def _digest(text: str) -> bytes:
    # Comparing fixed-length digests keeps even the token's length out of the timing.
    return hashlib.sha256(text.encode()).digest()


class OpsToken:
    """Checks an `Authorization` header against the configured token, in constant time."""

    def __init__(self, token: str) -> None:
        if len(token) < MIN_OPS_TOKEN_CHARS:
            raise ValueError(f"an ops token must be at least {MIN_OPS_TOKEN_CHARS} characters long")
        self._expected = _digest(token)

    def admits(self, authorization: str | None) -> bool:
        """True for exactly 'Bearer <token>' (the scheme in any case, spaces around the token ignored)."""
        scheme, _, presented = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(presented.strip()), self._expected)
