"""The autoscaler's HTTP API: health, readiness, metrics, status, the cache volumes and their expiry.

Everything but the expiry only reads the loop's state. The expiry deletes a user's data before its
time-to-live, so it is an operator's act: it needs the ops token, and is off when none is set.
The handlers are `async def` on purpose: they run on the event loop between the loop's awaits,
never in a thread while a cycle changes what they read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Header, HTTPException, Query, Response
from pydantic import BaseModel
from warmswarm_models import OpsToken

from warmswarm_autoscaling.loop import Autoscaler, ExpireRefused, VolumeNotFound
from warmswarm_autoscaling.metrics import CONTENT_TYPE
from warmswarm_autoscaling.ports import PortError


class Problem(BaseModel):
    detail: str


class VolumeOwner(BaseModel):
    user_id: str | None
    project_id: str | None
    node_id: str | None


class VolumeOut(BaseModel):
    volume_id: str
    owner: VolumeOwner
    availability_zone: str
    state: str  # EC2's: creating, available, in-use, deleting, deleted, error
    size_gib: int
    volume_type: str
    attached_to: str | None  # instance id
    released_at: str | None  # ISO 8601 UTC (tag warmswarm:released-at)
    expires_at: str | None  # ISO 8601 UTC (tag warmswarm:expires-at); the janitor deletes it after


class VolumesOut(BaseModel):
    volumes: list[VolumeOut]


class ExpiredOut(BaseModel):
    volume_id: str
    expires_at: str


def create_app(
    autoscaler: Autoscaler, *, ready_within_s: float, clock: Callable[[], float], ops_token: str | None
) -> FastAPI:
    app = FastAPI(title="warmswarm autoscaling", version="0.1.0")
    ops = None if ops_token is None else OpsToken(ops_token)

    def require_ops(authorization: str | None) -> None:
        if ops is None:
            raise HTTPException(
                403,
                "expiring a volume through the API is off: set AUTOSCALING_OPS_TOKEN (or OPS_TOKEN) on the autoscaler",
            )
        if not ops.admits(authorization):
            raise HTTPException(
                401, "expiring a volume needs 'Authorization: Bearer <ops token>'", {"WWW-Authenticate": "Bearer"}
            )

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "alive"}

    @app.get("/ready")
    async def ready(response: Response) -> dict[str, Any]:
        last = autoscaler.status.last_success_at
        age_s = None if last is None else clock() - last
        ok = age_s is not None and age_s <= ready_within_s
        response.status_code = 200 if ok else 503
        return {"ready": ok, "last_success_age_s": age_s}

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format 0.0.4"}},
    )
    async def metrics() -> Response:
        body = autoscaler.metrics.exposition(autoscaler.status.snapshot, autoscaler.status.plan)
        return Response(body, media_type=CONTENT_TYPE)

    @app.get("/v1/status")
    async def status() -> dict[str, Any]:
        return autoscaler.status_json()

    @app.get("/v1/volumes", response_model=VolumesOut, responses={503: {"model": Problem}})
    async def volumes(user_id: str | None = Query(default=None, description="Only this user's volumes.")) -> Any:
        found = autoscaler.volumes_json(user_id)
        if found is None and not autoscaler.is_leader:
            raise HTTPException(503, "not the leader, which alone observes the volumes; ask the leader")
        if found is None:
            raise HTTPException(503, "no cycle has observed the volumes yet; ask again in a few seconds")
        return {"volumes": found}

    @app.post(
        "/v1/volumes/{volume_id}/expire",
        status_code=202,
        response_model=ExpiredOut,
        responses={
            401: {"model": Problem},
            403: {"model": Problem},
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
    async def expire(volume_id: str, authorization: Annotated[str | None, Header()] = None) -> Any:
        require_ops(authorization)
        try:
            expired = await autoscaler.expire_volume(volume_id)
        except VolumeNotFound as error:
            raise HTTPException(404, str(error)) from None
        except ExpireRefused as error:
            raise HTTPException(409, str(error)) from None
        except PortError as error:
            raise HTTPException(503, f"{error}; nothing was changed, try again") from None
        return {"volume_id": expired.volume_id, "expires_at": expired.expires_at}

    return app
