"""Fixtures several unit test modules share, gathered here so that no test module imports another."""

from __future__ import annotations

from .cli_service import other_service, service

__all__ = ["other_service", "service"]
