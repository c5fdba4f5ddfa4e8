"""The director's HTTP API: services (create, status, delete) for the platform, group properties for ops.

Who may call: every route but /health, /ready and /metrics takes a bearer token, checked before the request's values
are (only a body that is not JSON at all is refused as such first: FastAPI parses it before any dependency).
The services take the platform's (DIRECTOR_API_TOKEN): whoever could call them could delete a user's
service and create it again under that user's ids with their own image, which would see the user's cache.
Changing group properties takes the ops token; reading them takes either (the platform may show a
group's terms). A read answers the version it read as an `ETag`; a PUT or PATCH with `If-Match: "<etag>"` is
applied only to that version (412 otherwise), and a PATCH without it merges its fields into whatever is stored.

Every error becomes its answer here, in one place: a DirectorError carries its HTTP status, a request
pydantic refuses is a 422 naming each bad field. Every status a route can answer is in its OpenAPI document
(schemathesis holds the two together in the unit tests); a method a path does not take is a 405 whose `Allow`
names every method the path takes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Final

from fastapi import Depends, FastAPI, Header, Path, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from warmswarm_models import GroupProperties
from warmswarm_models.answers import DirectorReadyOut, HealthOut, InvalidRequestOut, Problem, ServiceOut, StatusOut
from warmswarm_runtime.auth import bearer_guard
from warmswarm_runtime.http import methods_of

from warmswarm_director.director import Director
from warmswarm_director.errors import DirectorError
from warmswarm_director.metrics import CONTENT_TYPE
from warmswarm_director.ports import StoredGroup
from warmswarm_director.schemas import (
    GroupIdPathText,
    GroupPropertiesIn,
    GroupPropertiesPatch,
    NodeIdPathText,
    ServiceRequest,
)

GroupIdPath = Annotated[GroupIdPathText, Path(description="1-64 characters of letters, digits, '.', '_' or '-'")]
NodeIdPath = Annotated[
    NodeIdPathText,
    Path(description="1-128 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit"),
]

IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description='The ETag a read answered ("<etag>", quotes included), or *: apply only if the stored'
        " properties are still that version (any version, for *); 412 when they are not.",
    ),
]

Responses = dict[int | str, dict[str, Any]]

# Each status a route may answer, for the OpenAPI document; a route lists those it can reach.
_REFUSED: Final[Responses] = {
    401: {"model": Problem, "description": "No 'Authorization: Bearer <token>', or not a token this route takes"},
}
_INVALID: Final[Responses] = {
    422: {
        "model": InvalidRequestOut,
        "description": "A value breaks a rule: pydantic's list of problems and one line naming each field,"
        " or one sentence (a group without properties in strict mode, a malformed node id)",
    },
}
_UNREADABLE_BODY: Final[Responses] = {
    400: {"model": Problem, "description": "The body could not be read as JSON (e.g. it is not UTF-8)"},
}
_BACKEND: Final[Responses] = {
    503: {"model": Problem, "description": "Docker or Redis did not answer; nothing was changed, send it again"},
}
_NOT_FOUND: Final[Responses] = {404: {"model": Problem, "description": "No such service, or no properties stored"}}
_STORED_UNREADABLE: Final[Responses] = {
    500: {"model": Problem, "description": "The stored service carries labels this director cannot read"},
}
_CONFLICT: Final[Responses] = {
    409: {"model": Problem, "description": "The node id is another owner's, or its name is taken by another service"},
}
_STALE: Final[Responses] = {
    412: {
        "model": Problem,
        "description": "If-Match names a version that is no longer stored (someone changed them, or none are stored);"
        " read them again and resend",
    },
}
_ETAG_HEADER: Final = {
    "ETag": {
        "description": "The version of the properties answered, for If-Match (a strong tag, quoted)",
        "schema": {"type": "string"},
    }
}
_CONFLICT_MERGE: Final[Responses] = {
    409: {"model": Problem, "description": "The group kept changing while this change was merged in; send it again"},
}
_PLATFORM: Final = "Needs 'Authorization: Bearer <DIRECTOR_API_TOKEN>' (401 without it)."


def create_app(director: Director, *, ops_token: str, api_token: str) -> FastAPI:
    app = FastAPI(title="warmswarm director", version="0.1.0")
    require_platform = bearer_guard(
        api_token, refused="users' services need 'Authorization: Bearer <DIRECTOR_API_TOKEN>', the platform's token"
    )
    require_ops = bearer_guard(ops_token, refused="changing group properties needs 'Authorization: Bearer <ops token>'")
    require_ops_or_platform = bearer_guard(
        ops_token,
        api_token,
        refused="reading group properties needs 'Authorization: Bearer <ops token or DIRECTOR_API_TOKEN>'",
    )

    @app.exception_handler(DirectorError)
    async def director_error(_request: Request, error: DirectorError) -> JSONResponse:
        return JSONResponse({"detail": error.message}, status_code=error.status_code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        headers = dict(error.headers or {})
        if error.status_code == 405:
            # Starlette names the methods of the first route whose path matched; a path served by several
            # routes (GET and DELETE of a service) takes them all.
            headers["Allow"] = ", ".join(methods_of(app, request))
        return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=headers)

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

    # Open, like /health and /ready: the labels are start paths, never an owner, service or instance id.
    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus text format 0.0.4"}},
    )
    async def metrics() -> Response:
        return Response(director.sessions.metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get("/ready", responses={503: {"model": DirectorReadyOut}})
    async def ready(response: Response) -> DirectorReadyOut:
        try:
            await director.ready()
        except DirectorError as error:
            response.status_code = 503
            return DirectorReadyOut(ready=False, problem=error.message)
        return DirectorReadyOut(ready=True, problem=None)

    @app.post(
        "/v1/services",
        dependencies=[Depends(require_platform)],
        responses={
            200: {"model": ServiceOut, "description": "Found: an earlier request created it"},
            201: {"model": ServiceOut, "description": "Created"},
            **_UNREADABLE_BODY,
            **_REFUSED,
            **_CONFLICT,
            **_INVALID,
            **_STORED_UNREADABLE,
            **_BACKEND,
        },
        description=_PLATFORM,
    )
    async def create_service(request: ServiceRequest, response: Response) -> ServiceOut:
        service, created = await director.create_service(request)
        response.status_code = 201 if created else 200
        return service

    @app.get(
        "/v1/services/{node_id}",
        dependencies=[Depends(require_platform)],
        responses={**_REFUSED, **_NOT_FOUND, **_INVALID, **_STORED_UNREADABLE, **_BACKEND},
        description=_PLATFORM,
    )
    async def service_status(node_id: NodeIdPath) -> StatusOut:
        status = await director.status(node_id)
        return StatusOut(
            status=status.state,
            reason=status.reason,
            node=status.node,
            instance_id=status.instance_id,
            volume_id=status.volume_id,
            start_path=status.start_path,
        )

    @app.delete(
        "/v1/services/{node_id}",
        status_code=204,
        dependencies=[Depends(require_platform)],
        responses={**_REFUSED, **_NOT_FOUND, **_INVALID, **_BACKEND},
        description=_PLATFORM,
    )
    async def delete_service(node_id: NodeIdPath) -> Response:
        await director.delete_service(node_id)
        return Response(status_code=204)

    @app.get(
        "/v1/groups/{group_id}/properties",
        dependencies=[Depends(require_ops_or_platform)],
        responses={200: {"headers": _ETAG_HEADER}, **_REFUSED, **_NOT_FOUND, **_INVALID, **_BACKEND},
        description="Needs 'Authorization: Bearer <ops token>' or '... <DIRECTOR_API_TOKEN>' (401 without either).",
    )
    async def get_group_properties(group_id: GroupIdPath, response: Response) -> GroupProperties:
        return _versioned(await director.group_properties(group_id), response)

    @app.put(
        "/v1/groups/{group_id}/properties",
        dependencies=[Depends(require_ops)],
        responses={200: {"headers": _ETAG_HEADER}, **_UNREADABLE_BODY, **_REFUSED, **_STALE, **_INVALID, **_BACKEND},
        description="Replaces them whole: a field left out takes its default, and for recycle_machines and"
        " accept_recycled that is no opinion, so a group that refuses sends its false again. Needs 'Authorization:"
        " Bearer <ops token>' (401 without it, and with DIRECTOR_API_TOKEN).",
    )
    async def put_group_properties(
        group_id: GroupIdPath, properties: GroupPropertiesIn, response: Response, if_match: IfMatch = None
    ) -> GroupProperties:
        stored = await director.set_group_properties(group_id, properties, if_match=_entity_tag(if_match))
        return _versioned(stored, response)

    @app.patch(
        "/v1/groups/{group_id}/properties",
        dependencies=[Depends(require_ops)],
        responses={
            200: {"headers": _ETAG_HEADER},
            **_UNREADABLE_BODY,
            **_REFUSED,
            **_CONFLICT_MERGE,
            **_STALE,
            **_INVALID,
            **_BACKEND,
        },
        description="Changes the fields sent (a JSON merge patch: a field sent as null goes back to its default;"
        " for recycle_machines and accept_recycled, no opinion),"
        " the defaults for a group without properties. Without If-Match the change is merged into whatever is"
        " stored when it is written, so two operators changing different fields both keep their change. Needs"
        " 'Authorization: Bearer <ops token>' (401 without it, and with DIRECTOR_API_TOKEN).",
    )
    async def patch_group_properties(
        group_id: GroupIdPath, patch: GroupPropertiesPatch, response: Response, if_match: IfMatch = None
    ) -> GroupProperties:
        stored = await director.patch_group_properties(group_id, patch, if_match=_entity_tag(if_match))
        return _versioned(stored, response)

    return app


def _versioned(stored: StoredGroup, response: Response) -> GroupProperties:
    response.headers["ETag"] = f'"{stored.etag}"'
    return stored.properties


def _entity_tag(if_match: str | None) -> str | None:
    """If-Match's tag without its quotes, or *; a weak tag (W/"...") is kept as is, and so never matches (RFC 9110:
    If-Match compares strongly)."""
    if if_match is None:
        return None
    tag = if_match.strip()
    if len(tag) >= 2 and tag[0] == tag[-1] == '"':
        return tag[1:-1]
    return tag


def _describe(problems: Sequence[Any]) -> str:
    """One line naming each bad field, e.g. 'resources.cpus: Input should be greater than or equal to 0.001'."""
    parts = []
    for problem in problems:
        # The first element says where (body, path, query); the field is the rest.
        loc = [str(part) for part in problem.get("loc", ())]
        field = ".".join(loc[1:]) if len(loc) > 1 else ".".join(loc) or "request"
        parts.append(f"{field}: {problem.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)
