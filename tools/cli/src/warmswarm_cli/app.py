"""The `warmswarm` commands (typer): status, volumes, groups, reservations; errors end as one line and a non-zero
exit."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any, Final
from urllib.parse import quote

import typer
from pydantic import ValidationError
from warmswarm_models import GroupProperties
from warmswarm_models.cache import recycling_decisions

from warmswarm_cli import render
from warmswarm_cli.client import EXIT_UNREACHABLE, EXIT_USAGE, CliError
from warmswarm_cli.endpoints import Endpoints

DEFAULT_AUTOSCALING_URL: Final = "http://127.0.0.1:8000"
DEFAULT_DIRECTOR_URL: Final = "http://127.0.0.1:8001"
# Read from the environment only, never an option: a token on the command line is visible in `ps`
# and kept in the shell's history. Every command presents it: the autoscaler's status and volumes name
# every user, and the director shows group properties to ops (or the platform) only.
OPS_TOKEN_ENV: Final = "OPS_TOKEN"

app = typer.Typer(
    name="warmswarm",
    help=(
        "Operate warmswarm through its HTTP APIs: the autoscaler (status, cache volumes) and the director (groups)."
        " Every command presents the ops token from OPS_TOKEN."
    ),
    no_args_is_help=True,
    add_completion=False,
    # An unexpected error is a bug to report with its traceback, but without rich's page of locals.
    pretty_exceptions_enable=False,
)
volumes_app = typer.Typer(
    help="The EBS cache volumes the autoscaler manages (list them; `expire ID` to let one go now).",
    invoke_without_command=True,
)
groups_app = typer.Typer(
    help="Group properties kept by the director (cache on/off, TTL, size, volume type, recycling); `recycling` tells"
    " what a user in several groups gets."
)
app.add_typer(volumes_app, name="volumes")
reservations_app = typer.Typer(
    help="Reservations for a known burst: hot machines ready for N sessions of a size at a moment (add, list, delete)."
)
app.add_typer(groups_app, name="groups", no_args_is_help=True)
app.add_typer(reservations_app, name="reservations", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the service's JSON instead of tables.")]


@contextmanager
def _one_line_errors() -> Iterator[None]:
    try:
        yield
    except CliError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(error.exit_code) from None


def _print_json(body: Any) -> None:
    typer.echo(json.dumps(body, indent=2))


def _endpoints(ctx: typer.Context) -> Endpoints:
    # Set by main_options, which click runs before any command; sub-contexts inherit it.
    endpoints = ctx.find_object(Endpoints)
    assert endpoints is not None
    return endpoints


@app.callback()
def main_options(
    ctx: typer.Context,
    autoscaling_url: Annotated[
        str,
        typer.Option(
            "--autoscaling-url",
            envvar="AUTOSCALING_URL",
            help="The autoscaler's API; several, comma-separated (one per manager), to ask the one that leads.",
        ),
    ] = DEFAULT_AUTOSCALING_URL,
    director_url: Annotated[
        str, typer.Option("--director-url", envvar="DIRECTOR_URL", help="The director's API.")
    ] = DEFAULT_DIRECTOR_URL,
    timeout_s: Annotated[float, typer.Option("--timeout-s", min=0.1, help="Seconds to wait for an answer.")] = 10.0,
) -> None:
    ctx.obj = Endpoints(autoscaling_url, director_url, timeout_s, _ops_token())


@app.command()
def status(
    ctx: typer.Context,
    as_json: JsonOption = False,
    decisions: Annotated[int, typer.Option("--decisions", min=0, help="How many recent decisions to list.")] = 10,
) -> None:
    """Nodes, pending tasks and why each waits, launches in flight, and the last decisions. Needs OPS_TOKEN."""
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        body = _endpoints(ctx).autoscaler().call("GET", "/v1/status")
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.status(body, time.time(), decisions=decisions))


@volumes_app.callback()
def volumes(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's volumes.")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the cache volumes: owner, zone, state, what holds them, when they expire. Needs OPS_TOKEN."""
    if ctx.invoked_subcommand is not None:
        return
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        body = _endpoints(ctx).autoscaler().call("GET", "/v1/volumes", params={"user_id": user} if user else None)
        found = body.get("volumes") if isinstance(body, dict) else None
        if not isinstance(found, list):
            raise CliError("the autoscaler's /v1/volumes answer has no 'volumes' list", EXIT_UNREACHABLE)
    if user:
        # Filtered here as well: an autoscaler that ignores the query parameter must not show others' volumes.
        found = [v for v in found if isinstance(v, dict) and (v.get("owner") or {}).get("user_id") == user]
        body = {**body, "volumes": found}
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.volumes(body, time.time(), user=user))


@volumes_app.command("expire")
def volumes_expire(
    ctx: typer.Context,
    volume_id: Annotated[str, typer.Argument(help="The EBS volume id, e.g. vol-0123456789abcdef0.")],
    as_json: JsonOption = False,
) -> None:
    """Make a released cache volume expire now; the autoscaler deletes it at its next cycle.

    Needs the ops token in OPS_TOKEN.
    """
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        body = _endpoints(ctx).autoscaler().call("POST", f"/v1/volumes/{quote(volume_id, safe='')}/expire")
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.expired(body, time.time()))


def _group_path(group_id: str) -> str:
    return f"/v1/groups/{quote(group_id, safe='')}/properties"


@groups_app.command("get")
def groups_get(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="The group's id.")],
    as_json: JsonOption = False,
) -> None:
    """Show a group's properties and their ETag (for `groups set --if-match`). Needs the ops token in OPS_TOKEN."""
    with _one_line_errors(), _ops_token_hint(ctx, "the director"):
        body, etag = _endpoints(ctx).director().call_versioned("GET", _group_path(group_id))
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.group(group_id, body, etag))


@groups_app.command("set")
def groups_set(
    ctx: typer.Context,
    group_id: Annotated[str, typer.Argument(help="The group's id.")],
    cache: Annotated[
        bool | None, typer.Option("--cache/--no-cache", help="Keep the group's users' data on an EBS cache.")
    ] = None,
    ttl_s: Annotated[
        int | None, typer.Option("--ttl-s", min=0, help="Seconds a released cache volume is kept.")
    ] = None,
    size_gib: Annotated[int | None, typer.Option("--size-gib", min=1, help="Size of a new cache volume.")] = None,
    max_size_gib: Annotated[
        int | None,
        typer.Option(
            "--max-size-gib",
            min=1,
            max=16_384,
            help="The largest a cache volume may grow to as its data fills it (at or below --size-gib: no growth).",
        ),
    ] = None,
    volume_type: Annotated[
        str | None, typer.Option("--volume-type", help="EBS type of a new cache volume (gp3, gp2, io1, ...).")
    ] = None,
    warm_ttl_s: Annotated[
        int | None,
        typer.Option("--warm-ttl-s", min=0, max=604_800, help="Seconds an idle user's machine is kept stopped (warm)."),
    ] = None,
    recycle_machines: Annotated[
        bool | None,
        typer.Option(
            "--recycle-machines/--no-recycle-machines",
            help="Let the group's users' idle machines be scrubbed and serve other users (docs/operations.md).",
        ),
    ] = None,
    accept_recycled: Annotated[
        bool | None,
        typer.Option(
            "--accept-recycled/--no-accept-recycled",
            help="Let the group's users be given a machine that served another user, once scrubbed.",
        ),
    ] = None,
    unset: Annotated[
        list[str] | None,
        typer.Option(
            "--unset",
            help="Send this property as null, back to its default (repeatable): for recycle_machines and"
            " accept_recycled, no opinion (neither grants nor refuses); for cache_max_size_gib, no growth.",
        ),
    ] = None,
    if_match: Annotated[
        str | None,
        typer.Option(
            "--if-match",
            help="Change them only if they are still the version `groups get` showed (its ETag); else refused, to be"
            " read again.",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Change a group's properties; those not given keep their stored values (the director's defaults for a new group).

    --no-recycle-machines and --no-accept-recycled are refusals, which win over any other group's grant for a user
    in both; --unset NAME makes the group have no opinion again. The director merges the change into what is stored
    when it writes it (PATCH), so two operators changing one group at once both keep their change. Needs the
    director's ops token in OPS_TOKEN.
    """
    changes: dict[str, Any] = {
        key: value
        for key, value in {
            "ebs_cache_enabled": cache,
            "cache_ttl_s": ttl_s,
            "cache_size_gib": size_gib,
            "cache_max_size_gib": max_size_gib,
            "volume_type": volume_type,
            "warm_ttl_s": warm_ttl_s,
            "recycle_machines": recycle_machines,
            "accept_recycled": accept_recycled,
        }.items()
        if value is not None
    }
    with _one_line_errors():
        changes.update(_unset(unset or [], changes))
    with _one_line_errors(), _ops_token_hint(ctx, "the director"):
        # Only the options given are sent: a field this CLI did not name is never written back as it was read.
        body, etag = (
            _endpoints(ctx)
            .director()
            .call_versioned("PATCH", _group_path(group_id), body=changes, if_match=_quoted(if_match))
        )
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.group(group_id, body, etag))


# The properties PATCH takes back to their default when sent as null.
_UNSETTABLE: Final = (
    "ebs_cache_enabled",
    "cache_ttl_s",
    "cache_size_gib",
    "cache_max_size_gib",
    "volume_type",
    "warm_ttl_s",
    "recycle_machines",
    "accept_recycled",
)


def _unset(names: list[str], changes: dict[str, Any]) -> dict[str, None]:
    """--unset's names as the nulls PATCH takes; a name PATCH does not know, or one also given a value, is refused."""
    for name in names:
        if name not in _UNSETTABLE:
            raise CliError(f"--unset {name!r}: not a group property; one of {', '.join(_UNSETTABLE)}", EXIT_USAGE)
        if name in changes:
            raise CliError(f"--unset {name} and a value for it: give one or the other", EXIT_USAGE)
    return dict.fromkeys(names)


@groups_app.command("recycling")
def groups_recycling(
    ctx: typer.Context,
    group_ids: Annotated[list[str], typer.Argument(help="The groups of one user, as the platform sends them.")],
    as_json: JsonOption = False,
) -> None:
    """What a user in these groups gets for recycling, and which groups decide it (a refusal wins over any grant; a
    group without properties has no opinion). Needs the ops token in OPS_TOKEN."""
    found: dict[str, GroupProperties] = {}
    without_properties: list[str] = []
    with _one_line_errors(), _ops_token_hint(ctx, "the director"):
        director = _endpoints(ctx).director()
        for group_id in dict.fromkeys(group_ids):
            try:
                body = director.call("GET", _group_path(group_id))
            except CliError as error:
                if error.status_code != 404:
                    raise
                without_properties.append(group_id)
                continue
            found[group_id] = _recycling_opinions(group_id, body)
    decisions = recycling_decisions(found)
    if as_json:
        _print_json(
            {
                key: {"value": decision.value, "decided_by": list(decision.decided_by)}
                for key, decision in (
                    ("recycle_machines", decisions.recycle_machines),
                    ("accept_recycled", decisions.accept_recycled),
                )
            }
            | {"without_properties": without_properties}
        )
    else:
        typer.echo(render.recycling(list(dict.fromkeys(group_ids)), decisions, without_properties))


def _recycling_opinions(group_id: str, body: Any) -> GroupProperties:
    """The group's two recycling properties from the director's answer; the rest of a newer director's answer is not
    this command's to judge."""
    try:
        return GroupProperties.model_validate({key: body.get(key) for key in ("recycle_machines", "accept_recycled")})
    except (AttributeError, ValidationError):
        raise CliError(
            f"the director's answer for group {group_id!r} has no readable recycle_machines and accept_recycled",
            EXIT_UNREACHABLE,
        ) from None


def _quoted(etag: str | None) -> str | None:
    """An ETag as If-Match wants it: quoted (ops may paste it with or without the quotes), or * as is."""
    if etag is None or etag == "*" or etag.startswith(('"', 'W/"')):
        return etag
    return f'"{etag}"'


@reservations_app.command("add")
def reservations_add(
    ctx: typer.Context,
    group: Annotated[str, typer.Option("--group", help="The group the sessions are of.")],
    sessions: Annotated[int, typer.Option("--sessions", min=1, help="How many sessions start at --at.")],
    cpus: Annotated[float, typer.Option("--cpus", help="CPUs one session reserves.")],
    memory_mib: Annotated[int, typer.Option("--memory-mib", min=4, help="Memory one session reserves, in MiB.")],
    at: Annotated[
        str,
        typer.Option(
            "--at",
            help="When they start: ISO 8601 (without an offset: this machine's local time), epoch seconds, or"
            " +90s / +15m / +2h from now.",
        ),
    ],
    zone: Annotated[str | None, typer.Option("--zone", help="An availability zone; default: any.")] = None,
    gpus: Annotated[int, typer.Option("--gpus", min=0, help="GPUs one session reserves.")] = 0,
    release_after_s: Annotated[
        int, typer.Option("--release-after-s", min=0, help="Unclaimed machines go this long after --at.")
    ] = 900,
    as_json: JsonOption = False,
) -> None:
    """Reserve hot machines for a burst; they are launched the lead time before --at. Needs OPS_TOKEN."""
    now = time.time()
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        request = {
            "group": group,
            "sessions": sessions,
            "resources": {"cpus": cpus, "memory_bytes": memory_mib * 2**20, "gpus": gpus},
            "at": moment_of(at, now),
            "zone": zone,
            "release_after_s": release_after_s,
        }
        body = _endpoints(ctx).autoscaler().call("POST", "/v1/reservations", body=request)
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.reservation(body, time.time()))


@reservations_app.command("list")
def reservations_list(ctx: typer.Context, as_json: JsonOption = False) -> None:
    """Every reservation: status (pending, filling, ready, released), machines held, why. Needs OPS_TOKEN."""
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        body = _endpoints(ctx).autoscaler().call("GET", "/v1/reservations")
    if as_json:
        _print_json(body)
    else:
        typer.echo(render.reservations(body, time.time()))


@reservations_app.command("delete")
def reservations_delete(
    ctx: typer.Context, reservation_id: Annotated[str, typer.Argument(help="The reservation's id (resv-...).")]
) -> None:
    """Forget a reservation; the machines it left unclaimed are terminated at the next cycle. Needs OPS_TOKEN."""
    with _one_line_errors(), _ops_token_hint(ctx, "the autoscaler"):
        _endpoints(ctx).autoscaler().call("DELETE", f"/v1/reservations/{quote(reservation_id, safe='')}")
    typer.echo(f"reservation {reservation_id} deleted; what it left unclaimed goes at the next cycle")


_RELATIVE_UNITS_S: Final = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def moment_of(value: str, now: float) -> float | str:
    """--at as the API takes it: epoch s, ISO 8601 with an offset (local time added when none is given), or now plus
    '+90s', '+15m', '+2h', '+1d'."""
    text = value.strip()
    if text.startswith("+") and text[-1:] in _RELATIVE_UNITS_S:
        try:
            return now + float(text[1:-1]) * _RELATIVE_UNITS_S[text[-1]]
        except ValueError:
            pass
    else:
        try:
            return float(text)
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            pass
        else:
            return (parsed if parsed.tzinfo else parsed.astimezone()).isoformat()
    raise CliError(f"--at {value!r}: give ISO 8601, epoch seconds, or +90s / +15m / +2h / +1d", EXIT_USAGE)


def _ops_token() -> str:
    return os.environ.get(OPS_TOKEN_ENV, "").strip()


@contextmanager
def _ops_token_hint(ctx: typer.Context, service: str) -> Iterator[None]:
    """A 401 from `service` gets what to do about OPS_TOKEN added to its message."""
    try:
        yield
    except CliError as error:
        if error.status_code != 401:
            raise
        token = _endpoints(ctx).ops_token
        hint = f"{OPS_TOKEN_ENV} is not set" if not token else f"{service} refused {OPS_TOKEN_ENV}"
        raise CliError(f"{error}; {hint}: set it to the ops token", error.exit_code, 401) from None


def main() -> None:
    """The console script's entry point."""
    app()
