"""The director's client of the autoscaler's status: it presents the ops token, and says what a refusal means."""

from __future__ import annotations

import httpx
import pytest
from warmswarm_director.autoscaler import AutoscalerClient
from warmswarm_director.status import AutoscalerView, Waiting

OPS_TOKEN = "ops-token-both-services-share"
URL = "http://autoscaler.test"
STATUS = {"cluster": "test", "leader": True, "pending": [{"task_id": "t1", "service": "ws-n1", "reason": "launching"}]}


def autoscaler_with_ops_token(token: str | None, seen: list[httpx.Request]) -> httpx.MockTransport:
    """The autoscaler's GET /v1/status as its API answers it: 401 without `token`, 403 when it has none."""

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if token is None:
            return httpx.Response(403, json={"detail": "reading the status is off"})
        if request.headers.get("Authorization") != f"Bearer {token}":
            return httpx.Response(401, json={"detail": "needs the ops token"}, headers={"WWW-Authenticate": "Bearer"})
        return httpx.Response(200, json=STATUS)

    return httpx.MockTransport(answer)


async def one_address(host: str, port: int) -> list[str]:
    """The resolver of a name with one address (no DNS is asked in a unit test)."""
    return ["192.0.2.10"]


async def view_from(transport: httpx.MockTransport) -> AutoscalerView:
    async with httpx.AsyncClient(transport=transport) as http:
        return await AutoscalerClient(http, URL, timeout_s=1.0, ops_token=OPS_TOKEN, resolve=one_address).view()


async def test_the_director_presents_its_ops_token_and_gets_the_reasons() -> None:
    seen: list[httpx.Request] = []

    view = await view_from(autoscaler_with_ops_token(OPS_TOKEN, seen))

    assert view == AutoscalerView(enabled=True, waiting=[Waiting("t1", "ws-n1", "launching", False)])
    assert [(r.url.path, r.headers["Authorization"]) for r in seen] == [("/v1/status", f"Bearer {OPS_TOKEN}")]


@pytest.mark.parametrize(
    ("autoscalers_token", "says"),
    [
        ("another-ops-token-0123456789", "refused the director's ops token (HTTP 401): give both services the same"),
        (None, "has no ops token (HTTP 403): give it the director's"),
    ],
)
async def test_a_refusal_says_which_token_to_set_and_is_not_asked_again(
    autoscalers_token: str | None, says: str
) -> None:
    seen: list[httpx.Request] = []

    view = await view_from(autoscaler_with_ops_token(autoscalers_token, seen))

    assert view.enabled
    assert not view.waiting
    assert view.problem is not None
    assert URL in view.problem
    assert says in view.problem
    assert OPS_TOKEN not in view.problem
    assert len(seen) == 1, "another replica would answer the same"


async def test_every_replica_a_name_stands_for_is_asked_until_the_leader_answers() -> None:
    """`tasks.autoscaling` names each replica; a client connects to the first address every time, which may be a
    follower's: the director asks each address in turn."""
    leader_address = "10.0.9.12"
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.host)
        return httpx.Response(200, json={**STATUS, "leader": request.url.host == leader_address})

    async def replicas(host: str, port: int) -> list[str]:
        assert (host, port) == ("tasks.autoscaling", 8000)
        return ["10.0.9.11", leader_address]

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as http:
        client = AutoscalerClient(
            http, "http://tasks.autoscaling:8000", timeout_s=1.0, ops_token=OPS_TOKEN, resolve=replicas
        )
        view = await client.view()

    assert asked == ["10.0.9.11", leader_address]
    assert view == AutoscalerView(enabled=True, waiting=[Waiting("t1", "ws-n1", "launching", False)])
