"""The director's HTTP API: services (create, status, delete), group properties (write needs the ops token).

Every error becomes its answer here, in one place: a DirectorError carries its HTTP status, a request
pydantic refuses is a 422 naming each bad field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from warmswarm_models import GroupProperties
from warmswarm_models.answers import DirectorReadyOut, HealthOut, ServiceOut, StatusOut
from warmswarm_runtime.auth import bearer_guard

from warmswarm_director.director import Director
from warmswarm_director.errors import DirectorError
from warmswarm_director.schemas import GroupId, ServiceRequest

GroupIdPath = Annotated[GroupId, Path(description="1-64 characters of letters, digits, '.', '_' or '-'")]


def create_app(director: Director, *, ops_token: str) -> FastAPI:
    app = FastAPI(title="warmswarm director", version="0.1.0")
    require_ops = bearer_guard(ops_token, refused="changing group properties needs 'Authorization: Bearer <ops token>'")

    @app.exception_handler(DirectorError)
    async def director_error(_request: Request, error: DirectorError) -> JSONResponse:
        return JSONResponse({"detail": error.message}, status_code=error.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        return JSONResponse(
            {"detail": jsonable_encoder(problems), "message": _describe(problems)},
            status_code=422,
        )

    @app.get("/health")
    async def health() -> HealthOut:
        return HealthOut()

    @app.get("/ready", responses={503: {"model": DirectorReadyOut}})
    async def ready(response: Response) -> DirectorReadyOut:
        try:
            await director.ready()
        except DirectorError as error:
            response.status_code = 503
            return DirectorReadyOut(ready=False, problem=error.message)
        return DirectorReadyOut(ready=True, problem=None)

    @app.post("/v1/services", responses={200: {"model": ServiceOut}, 201: {"model": ServiceOut}})
    async def create_service(request: ServiceRequest, response: Response) -> ServiceOut:
        service, created = await director.create_service(request)
        response.status_code = 201 if created else 200
        return service

    @app.get("/v1/services/{node_id}")
    async def service_status(node_id: str) -> StatusOut:
        status = await director.status(node_id)
        return StatusOut(
            status=status.state,
            reason=status.reason,
            node=status.node,
            instance_id=status.instance_id,
            volume_id=status.volume_id,
        )

    @app.delete("/v1/services/{node_id}", status_code=204)
    async def delete_service(node_id: str) -> Response:
        await director.delete_service(node_id)
        return Response(status_code=204)

    @app.get("/v1/groups/{group_id}/properties")
    async def get_group_properties(group_id: GroupIdPath) -> GroupProperties:
        return await director.group_properties(group_id)

    @app.put("/v1/groups/{group_id}/properties", dependencies=[Depends(require_ops)])
    async def put_group_properties(group_id: GroupIdPath, properties: GroupProperties) -> GroupProperties:
        return await director.set_group_properties(group_id, properties)

    return app


def _describe(problems: Sequence[Any]) -> str:
    """One line naming each bad field, e.g. 'resources.cpus: Input should be greater than or equal to 0.001'."""
    parts = []
    for problem in problems:
        # The first element says where (body, path, query); the field is the rest.
        loc = [str(part) for part in problem.get("loc", ())]
        field = ".".join(loc[1:]) if len(loc) > 1 else ".".join(loc) or "request"
        parts.append(f"{field}: {problem.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)
