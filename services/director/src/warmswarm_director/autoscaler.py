"""The autoscaler's `GET /v1/status`, read for why tasks wait; it never raises, it says what went wrong."""

from __future__ import annotations

import httpx
from pydantic import ValidationError
from warmswarm_models.answers import AutoscalerStatusOut

from warmswarm_director.status import AutoscalerView, Waiting

# Behind the stack's virtual IP each new connection may reach another replica, and only the leader
# knows why tasks wait: a follower's answer is asked again, on a new connection, a few times.
LEADER_ATTEMPTS = 4


class AutoscalerClient:
    """Implements ports.AutoscalerPort over HTTP: asks one autoscaler; `url` None means there is none to ask.

    The status lists every owner, so the autoscaler shows it only to the ops token: the director presents its own.
    """

    def __init__(self, http: httpx.AsyncClient, url: str | None, *, timeout_s: float, ops_token: str) -> None:
        self._http = http
        self._url = url
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {ops_token}", "Connection": "close"}

    async def view(self) -> AutoscalerView:
        if self._url is None:
            return AutoscalerView(enabled=False)
        for _ in range(LEADER_ATTEMPTS):
            view, final = await self._ask()
            if final:
                return view
        return AutoscalerView(
            enabled=True,
            problem=f"{LEADER_ATTEMPTS} answers from the autoscaler at {self._url} came from replicas that follow,"
            " so why the task waits is not known; point DIRECTOR_AUTOSCALING_URL at all replicas (the stack's"
            " service name) or at the leader",
        )

    async def _ask(self) -> tuple[AutoscalerView, bool]:
        """One answer, and whether it is final: the leader's, or a failure that asking again would not mend."""
        status_url = f"{self._url}/v1/status"
        try:
            # A new connection each time ("Connection: close"): one kept alive would reach the same replica again.
            response = await self._http.get(status_url, timeout=self._timeout_s, headers=self._headers)
        except httpx.HTTPError as error:
            problem = (
                f"the autoscaler at {self._url} is unreachable ({type(error).__name__}), so why the task waits"
                " is not known"
            )
            return AutoscalerView(enabled=True, problem=problem), True
        # Every replica has the same token (or none): asking again would be refused again.
        if response.status_code == 401:
            problem = (
                f"the autoscaler at {self._url} refused the director's ops token (HTTP 401): give both services the"
                " same OPS_TOKEN"
            )
            return AutoscalerView(enabled=True, problem=problem), True
        if response.status_code == 403:
            problem = (
                f"the autoscaler at {self._url} has no ops token (HTTP 403): give it the director's OPS_TOKEN"
                " (AUTOSCALING_OPS_TOKEN or OPS_TOKEN)"
            )
            return AutoscalerView(enabled=True, problem=problem), True
        if response.status_code != 200:
            problem = f"the autoscaler at {self._url} answered HTTP {response.status_code}"
            return AutoscalerView(enabled=True, problem=problem), True
        try:
            body = AutoscalerStatusOut.model_validate_json(response.content)
        except ValidationError:
            problem = f"the autoscaler at {self._url} answered with a status this director cannot read"
            return AutoscalerView(enabled=True, problem=problem), True
        waiting = [Waiting(p.task_id, p.service, p.reason, p.starting) for p in body.pending]
        return AutoscalerView(enabled=True, waiting=waiting), body.leader is not False
