"""`warmswarm reservations add|list|delete` against a scripted service: the request sent, the output, the errors."""

from __future__ import annotations

import json
from typing import Any, Final

import pytest
from warmswarm_cli import render
from warmswarm_cli.app import moment_of
from warmswarm_cli.client import EXIT_REFUSED, EXIT_USAGE

from .cli_service import FakeService, run

NOW: Final = 1_800_000_000.0
MADE: Final[dict[str, Any]] = {
    "id": "resv-0123456789ab",
    "group": "class-7b",
    "sessions": 5,
    "resources": {"cpus": 0.5, "memory_bytes": 268435456, "gpus": 0},
    "at": "2027-01-15T09:00:00Z",
    "zone": None,
    "release_after_s": 900,
    "created_at": "2027-01-15T08:00:00Z",
    "status": "filling",
    "machines_held": 2,
    "sessions_arrived": 0,
    "instance_type": "t3.medium",
    "zones": ["eu-west-1a"],
    "fill_from": "2027-01-15T08:52:00Z",
    "release_at": "2027-01-15T09:15:00Z",
    "lead_s": 480.0,
    "reason": "the hot buffer keeps 5 running t3.medium in eu-west-1a for it; 2 ready, 0 claimed",
}
TOKEN: Final = {"OPS_TOKEN": "ops-token-of-the-cli-tests"}


def test_add_posts_the_request_with_the_token_and_prints_what_it_holds(service: FakeService) -> None:
    service.routes[("POST", "/v1/reservations")] = (201, MADE)
    result = run(
        "--autoscaling-url",
        service.url,
        "reservations",
        "add",
        *("--group", "class-7b", "--sessions", "5", "--cpus", "0.5", "--memory-mib", "256"),
        *("--at", "2027-01-15T09:00:00Z"),
        env=TOKEN,
    )
    assert result.exit_code == 0, result.output
    (seen,) = service.seen
    assert seen.headers["authorization"] == f"Bearer {TOKEN['OPS_TOKEN']}"
    assert seen.body == {
        "group": "class-7b",
        "sessions": 5,
        "resources": {"cpus": 0.5, "memory_bytes": 256 * 2**20, "gpus": 0},
        "at": "2027-01-15T09:00:00+00:00",
        "zone": None,
        "release_after_s": 900,
    }
    assert result.stdout.startswith("reservation resv-0123456789ab for group class-7b: 5 sessions of 0.5cpu,256MiB")
    assert "now filling" in result.stdout


def test_add_refused_prints_each_problem_on_one_line(service: FakeService) -> None:
    detail = [{"loc": ["body", "zone"], "msg": "'mars-1a' is not one of the autoscaler's zones", "type": "value_error"}]
    service.routes[("POST", "/v1/reservations")] = (422, {"detail": detail})
    args = ("--group", "g", "--sessions", "1", "--cpus", "1", "--memory-mib", "512", "--at", "+1h", "--zone", "mars-1a")
    result = run("--autoscaling-url", service.url, "reservations", "add", *args, env=TOKEN)
    assert result.exit_code == EXIT_REFUSED
    assert "zone: 'mars-1a' is not one of the autoscaler's zones (HTTP 422" in result.stderr


def test_list_prints_the_table_and_the_notes(service: FakeService) -> None:
    body = {"reservations": [MADE], "notices": ["no cycle of this replica has observed the machines yet"]}
    service.routes[("GET", "/v1/reservations")] = (200, body)
    result = run("--autoscaling-url", service.url, "reservations", "list", env=TOKEN)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "RESERVATIONS (1)"
    assert lines[1].split()[:3] == ["RESERVATION", "GROUP", "SESSIONS"]
    assert "resv-0123456789ab" in lines[2]
    assert "filling" in lines[2]
    assert "2/5" in lines[2]
    assert lines[-1] == "note: no cycle of this replica has observed the machines yet"
    as_json = run("--autoscaling-url", service.url, "reservations", "list", "--json", env=TOKEN)
    assert json.loads(as_json.stdout) == body


def test_delete_sends_delete_and_reads_the_204(service: FakeService) -> None:
    service.routes[("DELETE", "/v1/reservations/resv-0123456789ab")] = (204, None)
    result = run("--autoscaling-url", service.url, "reservations", "delete", "resv-0123456789ab", env=TOKEN)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("reservation resv-0123456789ab deleted")
    missing = run("--autoscaling-url", service.url, "reservations", "delete", "resv-000000000000", env=TOKEN)
    assert missing.exit_code == EXIT_REFUSED


def test_without_the_token_it_says_to_set_it(service: FakeService) -> None:
    service.routes[("GET", "/v1/reservations")] = (401, {"detail": "reservations are ops' to make"})
    result = run("--autoscaling-url", service.url, "reservations", "list")
    assert result.exit_code == EXIT_REFUSED
    assert "OPS_TOKEN is not set" in result.stderr


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("1800000090", 1_800_000_090.0),
        ("+90s", NOW + 90),
        ("+15m", NOW + 900),
        ("+2h", NOW + 7200),
        ("2027-01-15T09:00:00+02:00", "2027-01-15T09:00:00+02:00"),
    ],
)
def test_at_takes_iso_epoch_or_a_delay(given: str, sent: float | str) -> None:
    assert moment_of(given, NOW) == sent


def test_at_without_an_offset_is_local_time_and_nonsense_is_a_usage_error(service: FakeService) -> None:
    local = moment_of("2027-01-15T09:00:00", NOW)
    assert isinstance(local, str)
    assert local.startswith("2027-01-15T09:00:00")
    assert local[19:] != ""  # an offset was added
    args = ("--group", "g", "--sessions", "1", "--cpus", "1", "--memory-mib", "512", "--at", "tomorrow")
    result = run("--autoscaling-url", service.url, "reservations", "add", *args, env=TOKEN)
    assert result.exit_code == EXIT_USAGE
    assert service.seen == []


def test_status_shows_the_reservations_only_when_there_are_some() -> None:
    from .cli_answers import STATUS

    assert "RESERVATIONS" not in render.status(STATUS, NOW)
    assert "RESERVATIONS (1)" in render.status({**STATUS, "reservations": [MADE]}, NOW)
