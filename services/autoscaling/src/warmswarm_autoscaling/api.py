"""The autoscaler's HTTP API: health, readiness, metrics, status, the cache volumes and their expiry, reservations.

Everything but the expiry only reads the loop's state. The expiry deletes a user's data before its
time-to-live, so it is an operator's act: it needs the ops token, and is off when none is set. The status
and the volumes list every owner's ids (which are what a caller of the director names a user by), so
reading them needs the ops token too, as do ops' reservations for a known burst (they buy running machines);
/health, /ready and /metrics stay open for probes and scrapers.
The handlers are `async def` on purpose: they run on the event loop between the loop's awaits,
never in a thread while a cycle changes what they read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, Protocol

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import WithJsonSchema
from starlette.exceptions import HTTPException as StarletteHTTPException
from warmswarm_models.answers import (
    AutoscalerStatusOut,
    ExpiredOut,
    FollowerReadyOut,
    HealthOut,
    Problem,
    ReadyOut,
    VolumesOut,
)
from warmswarm_models.reservation import (
    MAX_RESERVED_SESSIONS,
    RESERVATION_ID_PATTERN,
    ReservationIn,
    ReservationOut,
    ReservationsOut,
)
from warmswarm_runtime.auth import bearer_guard
from warmswarm_runtime.http import methods_of

from warmswarm_autoscaling.bookings import NoReservationStore, ReservationNotFound, ReservationRefused
from warmswarm_autoscaling.metrics import CONTENT_TYPE
from warmswarm_autoscaling.policy import Policy
from warmswarm_autoscaling.ports import PortError
from warmswarm_autoscaling.reconciler import ExpireRefused, Reconciler, VolumeNotFound

# The answers of a route that takes the ops token, for the OpenAPI document.
_NEEDS_OPS_TOKEN: Final[dict[int | str, dict[str, Any]]] = {
    401: {"model": Problem, "description": "No 'Authorization: Bearer <ops token>', or another token"},
    403: {"model": Problem, "description": "The autoscaler has no ops token set, so the route is off"},
}
# The ids in paths and queries, with their patterns in the OpenAPI document. A user id is checked (a malformed one
# would match nothing, and the caller should hear so); a volume id is only documented: one of another form is
# simply not this cluster's (404).
OWNER_ID_PATTERN: Final = r"^[a-z0-9][a-z0-9._-]{0,127}$"
VolumeIdPath = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": r"^vol-[0-9a-f]+$"}), Path(description="An EBS volume id.")
]
ReservationIdPath = Annotated[
    str,
    WithJsonSchema({"type": "string", "pattern": RESERVATION_ID_PATTERN}),
    Path(description="A reservation's id, as POST /v1/reservations answered it."),
]
UserIdQuery = Annotated[
    str | None, Query(pattern=OWNER_ID_PATTERN, description="Only this user's volumes (an owner id: lower case).")
]
_NEEDS_OPS_TOKEN_TO_READ: Final = (
    "Lists owners' ids, so it needs 'Authorization: Bearer <ops token>' (401 without it; 403 when the"
    " autoscaler has no ops token)."
)


def state_policy_bounds(document: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The document as this autoscaler serves it: a reservation's zone among its zones, its sessions at most its
    max_instances. What a generator reads off the document is then what the autoscaler takes, but for the bounds
    that move with the clock (`at`) or with what EC2 offers (a size some allowed type fits), which stay 422."""
    request = document["components"]["schemas"]["ReservationIn"]["properties"]
    if policy.availability_zones:
        for branch in request["zone"]["anyOf"]:
            if branch.get("type") == "string":
                branch["enum"] = list(policy.availability_zones)
    if policy.max_instances >= 1:  # with none, every reservation is refused: no schema is right, the 422 says why
        request["sessions"]["maximum"] = min(MAX_RESERVED_SESSIONS, policy.max_instances)
    return document


class Follower(Protocol):
    """The lease, as /ready of a replica that is not the leader sees it."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def leader_seen(self) -> str | None: ...


def create_app(
    reconciler: Reconciler,
    *,
    ready_within_s: float,
    clock: Callable[[], float],
    ops_token: str | None,
    lease: Follower | None = None,
) -> FastAPI:
    app = FastAPI(title="warmswarm autoscaling", version="0.1.0")
    generic_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = state_policy_bounds(generic_openapi(), reconciler.policy)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to change the document
    require_ops = bearer_guard(
        ops_token,
        refused="expiring a volume needs 'Authorization: Bearer <ops token>'",
        off="expiring a volume through the API is off: set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN) on the autoscaler",
    )
    require_ops_to_read = bearer_guard(
        ops_token,
        refused="the status and the volumes name every user: reading them needs 'Authorization: Bearer <ops token>'",
        off="the status and the volumes name every user, so reading them needs the ops token:"
        " set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN) on the autoscaler",
    )
    require_ops_to_reserve = bearer_guard(
        ops_token,
        refused="reservations are ops' to make, list and delete: they need 'Authorization: Bearer <ops token>'",
        off="reservations through the API are off: set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN) on the autoscaler",
    )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        headers = dict(error.headers or {})
        if error.status_code == 405:
            # Starlette names the methods of the first route whose path matched; /v1/reservations takes two.
            headers["Allow"] = ", ".join(methods_of(app, request))
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=headers)

    @app.get("/health")
    async def health() -> HealthOut:
        return HealthOut()

    @app.get("/ready", responses={503: {"model": ReadyOut | FollowerReadyOut}})
    async def ready(response: Response) -> ReadyOut | FollowerReadyOut:
        if lease is not None and not lease.is_leader:
            # A follower runs no cycles: what it needs to be useful is to reach the lock store, so that
            # it takes over within the ttl once the leader goes. Unready followers would be restarted by
            # an orchestrator, the very replicas meant to take over.
            ok = lease.healthy
            response.status_code = 200 if ok else 503
            return FollowerReadyOut(ready=ok, lock_store_answers=ok, leader_seen=lease.leader_seen)
        last = reconciler.last.last_success_at
        age_s = None if last is None else clock() - last
        ok = age_s is not None and age_s <= ready_within_s
        response.status_code = 200 if ok else 503
        unknown = list(reconciler.unknown_instance_types())
        return ReadyOut(ready=ok, last_success_age_s=age_s, unknown_instance_types=unknown)

    # Open, like /health and /ready: the metrics' labels come from closed sets (states, actions, outcomes)
    # and carry no owner, volume or instance id, and a scraper should not need the ops token.
    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format 0.0.4"}},
    )
    async def metrics() -> Response:
        return Response(reconciler.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get(
        "/v1/status",
        dependencies=[Depends(require_ops_to_read)],
        responses=_NEEDS_OPS_TOKEN,
        description=_NEEDS_OPS_TOKEN_TO_READ,
    )
    async def status() -> AutoscalerStatusOut:
        return reconciler.status(clock())

    @app.get(
        "/v1/volumes",
        dependencies=[Depends(require_ops_to_read)],
        responses={**_NEEDS_OPS_TOKEN, 503: {"model": Problem}},
        description=_NEEDS_OPS_TOKEN_TO_READ,
    )
    async def volumes(user_id: UserIdQuery = None) -> VolumesOut:
        found = reconciler.volumes(user_id)
        if found is None and not reconciler.is_leader:
            raise HTTPException(503, "not the leader, which alone observes the volumes; ask the leader")
        if found is None:
            raise HTTPException(503, "no cycle has observed the volumes yet; ask again in a few seconds")
        return found

    @app.post(
        "/v1/volumes/{volume_id}/expire",
        status_code=202,
        dependencies=[Depends(require_ops)],
        responses={
            **_NEEDS_OPS_TOKEN,
            404: {"model": Problem},
            409: {"model": Problem},
            503: {"model": Problem},
        },
        description=(
            "Make an available cache volume of this cluster expire now: the janitor deletes it in its next cycle"
            " (unless its owner comes back first). Needs 'Authorization: Bearer <ops token>' (401 without it;"
            " 403 when the autoscaler has no ops token). 409 when it is attached or about to be, in a dry run,"
            " or when this replica is not the leader."
        ),
    )
    async def expire(volume_id: VolumeIdPath) -> ExpiredOut:
        try:
            return await reconciler.expire_volume(volume_id)
        except VolumeNotFound as error:
            raise HTTPException(404, str(error)) from None
        except ExpireRefused as error:
            raise HTTPException(409, str(error)) from None
        except PortError as error:
            raise HTTPException(503, f"{error}; nothing was changed, try again") from None

    @app.post(
        "/v1/reservations",
        status_code=201,
        dependencies=[Depends(require_ops_to_reserve)],
        responses={
            **_NEEDS_OPS_TOKEN,
            400: {"model": Problem, "description": "The body is not JSON"},
            503: {"model": Problem},
        },
        description=(
            "Reserve hot machines for a known burst: `sessions` sessions of `resources` each, of group `group`, at"
            " `at` (epoch s or ISO 8601 with an offset), in `zone` (null: spread over the autoscaler's zones). The"
            " hot buffer fills from `at` - lead_s and lets what is unclaimed go `release_after_s` after `at`."
            " Needs the ops token. 422 when it cannot be held as asked (`at` not ahead or more than a year ahead,"
            " a size no allowed type fits, or, where the document does not list the autoscaler's zones and"
            " max_instances, an unknown zone or more sessions than max_instances); nothing is stored then."
            " 503 when the store does not answer."
        ),
    )
    async def reserve(request: ReservationIn) -> ReservationOut:
        try:
            return await reconciler.reserve(request, clock())
        except ReservationRefused as error:
            # The shape of every other 422 (pydantic's): one problem per field, which the CLI prints as one line.
            detail = [{"loc": ["body", name], "msg": why, "type": "value_error"} for name, why in error.problems]
            raise HTTPException(422, detail) from None
        except (NoReservationStore, PortError) as error:
            raise HTTPException(503, f"{error}; nothing was stored, try again") from None

    @app.get(
        "/v1/reservations",
        dependencies=[Depends(require_ops_to_reserve)],
        responses={**_NEEDS_OPS_TOKEN, 503: {"model": Problem}},
        description=(
            "Every reservation with its status (pending, filling, ready, released), the machines held for it and"
            " why; a stored record that cannot be read is skipped and named in `unreadable` with why (DELETE"
            " removes it by its id). Needs the ops token."
        ),
    )
    async def reservations() -> ReservationsOut:
        try:
            return await reconciler.reservations(clock())
        except (NoReservationStore, PortError) as error:
            raise HTTPException(503, str(error)) from None

    @app.delete(
        "/v1/reservations/{reservation_id}",
        status_code=204,
        response_class=Response,
        dependencies=[Depends(require_ops_to_reserve)],
        responses={**_NEEDS_OPS_TOKEN, 404: {"model": Problem}, 503: {"model": Problem}},
        description=(
            "Forget a reservation: its extra target goes at the next cycle, which terminates the hot machines it"
            " left unclaimed (never one a session claimed). Needs the ops token."
        ),
    )
    async def unreserve(reservation_id: ReservationIdPath) -> Response:
        try:
            await reconciler.unreserve(reservation_id)
        except ReservationNotFound as error:
            raise HTTPException(404, str(error)) from None
        except (NoReservationStore, PortError) as error:
            raise HTTPException(503, f"{error}; nothing was deleted, try again") from None
        return Response(status_code=204)

    return app
