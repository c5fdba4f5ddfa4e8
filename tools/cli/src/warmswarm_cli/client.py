"""HTTP calls to the autoscaler and the director; every failure becomes one CliError line with an exit code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import httpx

# Exit codes a script can tell apart (2 is click's own, for a bad command line).
EXIT_REFUSED: Final = 1  # the service answered, with an error (404, 409, 401, 422, 500, ...)
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3  # no answer, or an answer that is not the service's JSON

_MESSAGE_MAX_CHARS: Final = 300


class CliError(Exception):
    """What went wrong, in one line for the operator; `exit_code` says which kind of failure it was."""

    def __init__(self, message: str, exit_code: int, status_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.status_code = status_code


class Api:
    """One service's API. `name` and `setting` only serve the error lines ("set --autoscaling-url ...").

    `token`, when not empty, goes with every call as 'Authorization: Bearer <token>'.
    """

    def __init__(self, name: str, base_url: str, *, setting: str, timeout_s: float, token: str = "") -> None:
        if not base_url.startswith(("http://", "https://")):
            raise CliError(f"{setting} {base_url!r} must start with http:// or https://", EXIT_USAGE)
        self.name = name
        self.base_url = base_url.rstrip("/")
        self._setting = setting
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> Any:
        """The JSON of a 2xx answer (None for a 204); a CliError otherwise."""
        return self.call_versioned(method, path, params=params, body=body)[0]

    def call_versioned(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        if_match: str | None = None,
    ) -> tuple[Any, str | None]:
        """As `call`, sending `If-Match` when given; also the answer's ETag (None when it has none)."""
        what = f"{method} {path}"
        headers = dict(self._headers)
        if if_match is not None:
            headers["If-Match"] = if_match
        try:
            # trust_env=False: the services are reached directly (on the swarm's network or through a
            # tunnel); a proxy from HTTP(S)_PROXY would at best be in the way, at worst see the token.
            with httpx.Client(base_url=self.base_url, timeout=self._timeout_s, trust_env=False) as http:
                response = http.request(method, path, params=params, json=body, headers=headers)
        except httpx.TimeoutException:
            raise CliError(
                f"the {self.name} at {self.base_url} did not answer {what} within {self._timeout_s:g} s",
                EXIT_UNREACHABLE,
            ) from None
        except httpx.HTTPError as error:
            cause = str(error) or type(error).__name__
            raise CliError(
                f"cannot reach the {self.name} at {self.base_url} ({cause});"
                f" is it running, and is {self._setting} right?",
                EXIT_UNREACHABLE,
            ) from None
        if not response.is_success:
            raise CliError(
                f"{server_message(response, path)} (HTTP {response.status_code} from the {self.name}, {what})",
                EXIT_REFUSED,
                response.status_code,
            )
        etag = response.headers.get("ETag")
        if response.status_code == 204:
            return None, etag  # a DELETE's answer: nothing to read
        try:
            return response.json(), etag
        except ValueError:
            raise CliError(
                f"the {self.name} at {self.base_url} answered {what} with something that is not JSON;"
                f" is {self._setting} the {self.name}'s URL?",
                EXIT_UNREACHABLE,
            ) from None


def server_message(response: httpx.Response, path: str) -> str:
    """The message the service put in its error body, on one line."""
    try:
        body = response.json()
    except ValueError:
        body = None
    message = ""
    if isinstance(body, dict):
        # The director's 422 carries a readable "message" next to pydantic's "detail" list.
        for key in ("message", "detail", "error"):
            if isinstance(body.get(key), str) and body[key]:
                message = body[key]
                break
        else:
            if isinstance(body.get("detail"), list):
                message = "; ".join(_problem(p) for p in body["detail"])
    if response.status_code == 404 and message == "Not Found":
        # FastAPI's answer for a route it does not have: a wrong URL or an older service, not a missing object.
        message = f"no route {path} here: the wrong service, or a version without it"
    if not message:
        message = response.text.strip() or response.reason_phrase
    one_line = " ".join(message.split())
    return one_line if len(one_line) <= _MESSAGE_MAX_CHARS else one_line[: _MESSAGE_MAX_CHARS - 1] + "…"


def _problem(problem: object) -> str:
    if not isinstance(problem, dict):
        return str(problem)
    loc = [str(part) for part in problem.get("loc", ())]
    # The first element says where (body, path, query); the field is the rest.
    field = ".".join(loc[1:]) or ".".join(loc) or "request"
    return f"{field}: {problem.get('msg', 'invalid')}"
