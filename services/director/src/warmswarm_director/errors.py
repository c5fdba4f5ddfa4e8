"""The director's own errors; each message says what happened and what to do next, and maps to one HTTP status."""

from __future__ import annotations


class DirectorError(Exception):
    """Base of the errors the API turns into an answer; `status_code` is that answer's HTTP status."""

    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(DirectorError):
    """The request is well formed but cannot be served as asked (e.g. a group with no properties)."""

    status_code = 422


class NotFound(DirectorError):
    status_code = 404


class Conflict(DirectorError):
    """What the request names already exists and belongs to someone, or something, else."""

    status_code = 409


class PreconditionFailed(DirectorError):
    """The caller's If-Match names a version of the record that is no longer the stored one (or none is stored)."""

    status_code = 412


class BackendUnavailable(DirectorError):
    """Docker or Redis did not answer; the request may be retried as is."""

    status_code = 503


class StoredDataUnreadable(DirectorError):
    status_code = 500
