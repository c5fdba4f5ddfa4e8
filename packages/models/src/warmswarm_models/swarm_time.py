"""Docker's timestamps (a service's CreatedAt, a task's): read into epoch seconds by both services."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Final

# Docker writes nanoseconds ("2026-12-01T10:00:00.123456789Z"); Python reads microseconds at most.
_RFC3339: Final = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)")


def docker_time(text: str) -> float | None:
    """Epoch seconds of a timestamp as Docker writes it; None when it is not one (or empty)."""
    found = _RFC3339.fullmatch(text.strip())
    if found is None:
        return None
    whole, fraction, zone = found.groups()
    micro = (fraction or ".0")[:7]
    try:
        moment = datetime.fromisoformat(f"{whole}{micro}{'+00:00' if zone == 'Z' else zone}")
    except ValueError:
        return None
    return moment.astimezone(UTC).timestamp()
