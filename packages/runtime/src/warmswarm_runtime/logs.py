"""Log set-up for both services: plain lines for people, or one JSON object per line with the same fields."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonFormatter

# uvicorn adds `color_message`, the message again with terminal colours: noise in JSON.
_NOT_FIELDS = (*RESERVED_ATTRS, "color_message")


class _Formatter(JsonFormatter):
    """at, level, logger, message; then every `extra=` field (an action's kind, target, outcome, ...)."""

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = record.levelname.lower()


def configure_logging(*, json_lines: bool, quiet: Iterable[str] = (), level: int = logging.INFO) -> None:
    """Root logging to stderr; `quiet` loggers (library chatter an operator never acts on) log warnings only."""
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        handler.setFormatter(
            _Formatter(
                "{asctime}{levelname}{name}{message}",
                style="{",
                datefmt="%Y-%m-%dT%H:%M:%S%z",
                rename_fields={"asctime": "at", "levelname": "level", "name": "logger", "exc_info": "exception"},
                reserved_attrs=_NOT_FIELDS,
                json_default=str,
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in quiet:
        logging.getLogger(noisy).setLevel(logging.WARNING)
