"""The autoscaler's `GET /v1/status`, read for why tasks wait; it never raises, it says what went wrong."""

from __future__ import annotations

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from warmswarm_director.status import AutoscalerView, Waiting


class _Pending(BaseModel):
    model_config = ConfigDict(extra="ignore")

    task_id: str
    service: str = ""
    reason: str = ""
    # Added to the autoscaler's answer later than the rest: an older autoscaler leaves it out.
    starting: bool = False


class _StatusBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pending: list[_Pending] = []


class AutoscalerClient:
    """Asks one autoscaler; `url` None means there is none to ask."""

    def __init__(self, http: httpx.AsyncClient, url: str | None, timeout_s: float) -> None:
        self._http = http
        self._url = url
        self._timeout_s = timeout_s

    async def view(self) -> AutoscalerView:
        if self._url is None:
            return AutoscalerView(enabled=False)
        status_url = f"{self._url}/v1/status"
        try:
            response = await self._http.get(status_url, timeout=self._timeout_s)
        except httpx.HTTPError as error:
            return AutoscalerView(
                enabled=True,
                problem=f"the autoscaler at {self._url} is unreachable ({type(error).__name__}), so why the task"
                " waits is not known",
            )
        if response.status_code != 200:
            return AutoscalerView(
                enabled=True, problem=f"the autoscaler at {self._url} answered HTTP {response.status_code}"
            )
        try:
            body = _StatusBody.model_validate_json(response.content)
        except ValidationError:
            return AutoscalerView(
                enabled=True, problem=f"the autoscaler at {self._url} answered with a status this director cannot read"
            )
        waiting = [Waiting(p.task_id, p.service, p.reason, p.starting) for p in body.pending]
        return AutoscalerView(enabled=True, waiting=waiting)
