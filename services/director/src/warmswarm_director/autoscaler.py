"""The autoscaler's `GET /v1/status`, read for why tasks wait; it never raises, it says what went wrong."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError
from warmswarm_models import parse_timestamp
from warmswarm_models.answers import AutoscalerStatusOut, InstanceOut
from warmswarm_models.start import MachineFacts

from warmswarm_director.status import AutoscalerView, Waiting

# Behind the stack's virtual IP each new connection may reach another replica, and only the leader
# knows why tasks wait: a follower's answer is asked again, on a new connection, a few times.
LEADER_ATTEMPTS = 4

# host, port -> the addresses a name has. `tasks.<service>` (swarm's DNS round robin) names every replica.
Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve_all(host: str, port: int) -> list[str]:
    """Every address `host` has, in the resolver's order, each once."""
    answers = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(sockaddr[0]) for *_, sockaddr in answers))


class AutoscalerClient:
    """Implements ports.AutoscalerPort over HTTP: asks one autoscaler; `url` None means there is none to ask.

    The status lists every owner, so the autoscaler shows it only to the ops token: the director presents its own.
    """

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str | None,
        *,
        timeout_s: float,
        ops_token: str,
        resolve: Resolve = resolve_all,
    ) -> None:
        self._http = http
        self._url = url
        self._timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {ops_token}", "Connection": "close"}
        self._resolve = resolve

    async def view(self) -> AutoscalerView:
        if self._url is None:
            return AutoscalerView(enabled=False)
        # A name with several addresses (`tasks.autoscaling`) is every replica: each is asked in turn, since a
        # client connects to the first address it resolves, which may be a follower's every time.
        for target in await self._targets():
            view, final = await self._ask(target)
            if final:
                return view
        return AutoscalerView(
            enabled=True,
            problem=f"{LEADER_ATTEMPTS} answers from the autoscaler at {self._url} came from replicas that follow,"
            " so why the task waits is not known; point DIRECTOR_AUTOSCALING_URL at all replicas (the stack's"
            " service name) or at the leader",
        )

    async def _targets(self) -> list[str]:
        """The base URLs to ask, LEADER_ATTEMPTS of them: each address of the URL's host, then the URL itself."""
        assert self._url is not None
        parts = urlsplit(self._url)
        addresses: list[str] = []
        # Only a plain-HTTP name is spread over its addresses: an address literal has one, and HTTPS checks names.
        if parts.scheme == "http" and parts.hostname and not _is_address(parts.hostname):
            try:
                addresses = await self._resolve(parts.hostname, parts.port or 80)
            except OSError:
                addresses = []  # asked by name below: the failure is then said as the request's
        by_address = [
            parts._replace(netloc=f"[{a}]:{parts.port or 80}" if ":" in a else f"{a}:{parts.port or 80}").geturl()
            for a in addresses
        ]
        targets = by_address if len(by_address) > 1 else []
        return (targets + [self._url] * LEADER_ATTEMPTS)[:LEADER_ATTEMPTS]

    async def _ask(self, base_url: str) -> tuple[AutoscalerView, bool]:
        """One answer, and whether it is final: the leader's, or a failure that asking again would not mend."""
        status_url = f"{base_url}/v1/status"
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
        machines = {i.instance_id: facts for i in body.instances if (facts := _facts(i)) is not None}
        return AutoscalerView(enabled=True, waiting=waiting, machines=machines), body.leader is not False


def _facts(instance: InstanceOut) -> MachineFacts | None:
    """The start-path facts of one listed machine; None from an autoscaler that does not give them."""
    launched_at = parse_timestamp(instance.launched_at or "")
    if launched_at is None:
        return None
    return MachineFacts(
        launched_at=launched_at,
        buffer_kind=instance.buffer_kind,
        claimed_at=parse_timestamp(instance.claimed_at or ""),
        started_at=parse_timestamp(instance.started_at or ""),
        volume_created_at=parse_timestamp(instance.volume_created_at or ""),
    )


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
