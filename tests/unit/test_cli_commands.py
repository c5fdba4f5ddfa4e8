"""The `warmswarm` commands against a scripted HTTP service on loopback: requests sent, output, exit codes."""

from __future__ import annotations

import json

import pytest
from warmswarm_cli.client import EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE

from .cli_answers import STATUS, VOLUMES
from .cli_service import FakeService, closed_port_url, run


def test_status_prints_the_tables(service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, STATUS)
    result = run("--autoscaling-url", service.url, "status")
    assert result.exit_code == 0, result.output
    assert "PENDING TASKS (2)" in result.stdout
    assert "no allowed instance type fits" in result.stdout
    assert [s.path for s in service.seen] == ["/v1/status"]


def test_status_json_is_the_services_json(service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, STATUS)
    result = run("status", "--json", env={"AUTOSCALING_URL": service.url})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == STATUS


def test_an_unreachable_service_is_one_line_and_exit_3() -> None:
    url = closed_port_url()
    result = run("--autoscaling-url", url, "status")
    assert result.exit_code == EXIT_UNREACHABLE
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: cannot reach the autoscaler at {url}")
    assert "AUTOSCALING_URL" in lines[0]
    assert "Traceback" not in result.output


def test_a_url_without_scheme_is_a_usage_error() -> None:
    result = run("--director-url", "localhost:8001", "groups", "get", "g1")
    assert result.exit_code == EXIT_USAGE
    assert "must start with http:// or https://" in result.stderr


def test_an_answer_that_is_not_json_is_reported_as_the_wrong_service(service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, "<html>hello</html>")
    result = run("--autoscaling-url", service.url, "status")
    assert result.exit_code == EXIT_UNREACHABLE
    assert "not JSON" in result.stderr


def test_a_route_the_service_lacks_says_so(service: FakeService) -> None:
    result = run("--autoscaling-url", service.url, "volumes")
    assert result.exit_code == EXIT_REFUSED
    assert "no route /v1/volumes here" in result.stderr


def test_volumes_for_one_user_asks_the_service_and_filters_too(service: FakeService) -> None:
    # This fake ignores the query parameter, as an older autoscaler would.
    service.routes[("GET", "/v1/volumes")] = (200, VOLUMES)
    result = run("--autoscaling-url", service.url, "volumes", "--user", "u42")
    assert result.exit_code == 0, result.output
    assert service.seen[0].query == {"user_id": ["u42"]}
    assert "CACHE VOLUMES (1)" in result.stdout
    assert "vol-0aaa" in result.stdout
    assert "vol-0bbb" not in result.stdout

    as_json = run("--autoscaling-url", service.url, "volumes", "--user", "u42", "--json")
    assert [v["volume_id"] for v in json.loads(as_json.stdout)["volumes"]] == ["vol-0aaa"]


def test_volumes_when_there_are_none(service: FakeService) -> None:
    service.routes[("GET", "/v1/volumes")] = (200, {"volumes": []})
    result = run("--autoscaling-url", service.url, "volumes")
    assert result.exit_code == 0
    assert result.stdout.strip() == "CACHE VOLUMES: none"


def test_volumes_from_a_follower_prints_its_message(service: FakeService) -> None:
    message = "not the leader, which alone observes the volumes; ask the leader"
    service.routes[("GET", "/v1/volumes")] = (503, {"detail": message})
    result = run("--autoscaling-url", service.url, "volumes")
    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.strip() == f"error: {message} (HTTP 503 from the autoscaler, GET /v1/volumes)"


def test_expire_posts_and_prints_when(service: FakeService) -> None:
    answer = {"volume_id": "vol-0bbb", "expires_at": "2027-01-15T08:00:00Z"}
    service.routes[("POST", "/v1/volumes/vol-0bbb/expire")] = (202, answer)
    result = run("--autoscaling-url", service.url, "volumes", "expire", "vol-0bbb")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("volume vol-0bbb now expires at 2027-01-15 08:00:00Z")
    as_json = run("--autoscaling-url", service.url, "volumes", "expire", "vol-0bbb", "--json")
    assert json.loads(as_json.stdout) == answer


@pytest.mark.parametrize(
    ("status", "detail"),
    [(404, "volume vol-0zzz is not a cache volume of cluster prod"), (409, "volume vol-0aaa is attached to i-0abc")],
)
def test_expire_refused_prints_the_servers_message(service: FakeService, status: int, detail: str) -> None:
    volume = detail.split()[1]
    service.routes[("POST", f"/v1/volumes/{volume}/expire")] = (status, {"detail": detail})
    result = run("--autoscaling-url", service.url, "volumes", "expire", volume)
    assert result.exit_code == EXIT_REFUSED
    assert result.stdout == ""
    assert result.stderr.strip() == (
        f"error: {detail} (HTTP {status} from the autoscaler, POST /v1/volumes/{volume}/expire)"
    )


def test_groups_get(service: FakeService) -> None:
    stored = {"ebs_cache_enabled": True, "cache_ttl_s": 3600, "cache_size_gib": 10, "volume_type": "gp3"}
    service.routes[("GET", "/v1/groups/lab/properties")] = (200, stored)
    service.etags[("GET", "/v1/groups/lab/properties")] = '"0a1b"'
    result = run("--director-url", service.url, "groups", "get", "lab")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:3] == [
        'group lab  (etag "0a1b")',
        "  ebs_cache_enabled  true",
        "  cache_ttl_s        3600 (1h)",
    ]
    as_json = run("groups", "get", "lab", "--json", env={"DIRECTOR_URL": service.url})
    assert json.loads(as_json.stdout) == stored


def test_groups_get_of_an_unknown_group(service: FakeService) -> None:
    service.routes[("GET", "/v1/groups/nope/properties")] = (404, {"detail": "group 'nope' has no properties"})
    result = run("--director-url", service.url, "groups", "get", "nope")
    assert result.exit_code == EXIT_REFUSED
    assert "group 'nope' has no properties (HTTP 404 from the director" in result.stderr


def test_groups_set_sends_only_the_given_properties_as_a_patch_with_the_token(service: FakeService) -> None:
    changed = {"ebs_cache_enabled": True, "cache_ttl_s": 600, "cache_size_gib": 10, "volume_type": "gp3"}
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (200, changed)
    service.etags[("PATCH", "/v1/groups/lab/properties")] = '"9f"'
    result = run(
        "--director-url", service.url, "groups", "set", "lab", "--cache", "--ttl-s", "600",
        env={"OPS_TOKEN": "secret-token-0123456789"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    # One request: the merge is the director's, so nothing read here can be written back over another's change.
    assert [(seen.method, seen.body) for seen in service.seen] == [
        ("PATCH", {"ebs_cache_enabled": True, "cache_ttl_s": 600})
    ]
    assert service.seen[0].headers["authorization"] == "Bearer secret-token-0123456789"
    assert "if-match" not in service.seen[0].headers
    assert 'group lab  (etag "9f")' in result.stdout
    assert "ebs_cache_enabled  true" in result.stdout
    # Never on the command line, never printed.
    assert "secret-token" not in result.output


@pytest.mark.parametrize(("given", "sent"), [("9f", '"9f"'), ('"9f"', '"9f"'), ("*", "*")])
def test_groups_set_if_match_sends_the_etag_quoted(service: FakeService, given: str, sent: str) -> None:
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (200, {"ebs_cache_enabled": True})
    result = run("--director-url", service.url, "groups", "set", "lab", "--cache", "--if-match", given)
    assert result.exit_code == 0, result.output
    assert service.seen[-1].headers["if-match"] == sent


def test_groups_set_with_a_stale_etag_says_to_read_again(service: FakeService) -> None:
    detail = "group 'lab''s properties changed since ETag \"9f\" was read; read them again (GET ...) and send it again"
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (412, {"detail": detail})
    result = run("--director-url", service.url, "groups", "set", "lab", "--cache", "--if-match", "9f")
    assert result.exit_code == EXIT_REFUSED
    assert "changed since ETag" in result.stderr
    assert "(HTTP 412 from the director, PATCH /v1/groups/lab/properties)" in result.stderr


def test_groups_set_of_a_new_group_sends_only_the_given_properties(service: FakeService) -> None:
    service.routes[("PATCH", "/v1/groups/new/properties")] = (200, {"ebs_cache_enabled": False})
    result = run(
        "--director-url", service.url, "groups", "set", "new", "--no-cache", "--size-gib", "5",
        "--volume-type", "gp2", "--json", env={"OPS_TOKEN": "secret-token-0123456789"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert service.seen[-1].body == {"ebs_cache_enabled": False, "cache_size_gib": 5, "volume_type": "gp2"}
    assert json.loads(result.stdout) == {"ebs_cache_enabled": False}


def test_groups_set_sends_the_largest_size_a_volume_may_grow_to(service: FakeService) -> None:
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (200, {"cache_max_size_gib": 200})
    result = run(
        "--director-url", service.url, "groups", "set", "lab", "--max-size-gib", "200",
        env={"OPS_TOKEN": "secret-token-0123456789"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert service.seen[-1].body == {"cache_max_size_gib": 200}


def test_groups_set_sends_the_recycling_properties_as_given(service: FakeService) -> None:
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (200, {"recycle_machines": True})
    result = run(
        "--director-url", service.url, "groups", "set", "lab", "--recycle-machines", "--no-accept-recycled",
        env={"OPS_TOKEN": "secret-token-0123456789"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert service.seen[-1].body == {"recycle_machines": True, "accept_recycled": False}


def test_groups_set_unset_sends_null_for_no_opinion(service: FakeService) -> None:
    service.routes[("PATCH", "/v1/groups/vault/properties")] = (
        200,
        {"recycle_machines": None, "accept_recycled": None},
    )
    result = run(
        "--director-url", service.url, "groups", "set", "vault", "--unset", "accept_recycled",
        "--unset", "recycle_machines", "--ttl-s", "60",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert service.seen[-1].body == {"cache_ttl_s": 60, "accept_recycled": None, "recycle_machines": None}
    assert "accept_recycled   - (no opinion)" in result.stdout


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--unset", "accept_recycled", "--no-accept-recycled"], "--unset accept_recycled and a value for it"),
        (["--unset", "recycle"], "--unset 'recycle': not a group property"),
    ],
)
def test_groups_set_unset_that_cannot_be_meant_is_refused_before_any_request(
    service: FakeService, options: list[str], said: str
) -> None:
    result = run("--director-url", service.url, "groups", "set", "vault", *options)
    assert result.exit_code == EXIT_USAGE
    assert service.seen == []
    assert said in result.stderr


def test_groups_recycling_says_a_refusing_group_wins_and_names_it(service: FakeService) -> None:
    service.routes[("GET", "/v1/groups/lab/properties")] = (200, {"recycle_machines": True, "accept_recycled": True})
    service.routes[("GET", "/v1/groups/vault/properties")] = (
        200,
        {"ebs_cache_enabled": True, "recycle_machines": False, "accept_recycled": False},
    )
    result = run("--director-url", service.url, "groups", "recycling", "lab", "everyone", "vault")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "a user in lab, everyone, vault",
        "  PROPERTY          VALUE  WHY",
        "  recycle_machines  false  refused by vault",
        "  accept_recycled   false  refused by vault",
        "  no properties stored (no opinion): everyone",
    ]
    as_json = run("--director-url", service.url, "groups", "recycling", "lab", "everyone", "vault", "--json")
    assert json.loads(as_json.stdout) == {
        "recycle_machines": {"value": False, "decided_by": ["vault"]},
        "accept_recycled": {"value": False, "decided_by": ["vault"]},
        "without_properties": ["everyone"],
    }


def test_groups_recycling_names_the_granting_groups_and_says_when_nobody_decided(service: FakeService) -> None:
    service.routes[("GET", "/v1/groups/lab/properties")] = (200, {"recycle_machines": None, "accept_recycled": True})
    result = run("--director-url", service.url, "groups", "recycling", "lab")
    assert result.exit_code == 0, result.output
    assert "recycle_machines  false  no group has an opinion: off" in result.stdout
    assert "accept_recycled   true   granted by lab" in result.stdout


def test_groups_set_without_the_token_says_what_to_do(service: FakeService) -> None:
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (
        401,
        {"detail": "changing group properties needs 'Authorization: Bearer <ops token>'"},
    )
    result = run("--director-url", service.url, "groups", "set", "lab", "--cache")
    assert result.exit_code == EXIT_REFUSED
    assert "authorization" not in service.seen[-1].headers
    line = result.stderr.strip()
    assert line.startswith("error: changing group properties needs")
    assert line.endswith("OPS_TOKEN is not set: set it to the ops token")


def test_groups_set_rejected_by_validation_prints_the_readable_message(service: FakeService) -> None:
    body = {"detail": [{"loc": ["body", "volume_type"], "msg": "bad"}], "message": "invalid request: volume_type: bad"}
    service.routes[("PATCH", "/v1/groups/lab/properties")] = (422, body)
    result = run("--director-url", service.url, "groups", "set", "lab", "--volume-type", "floppy")
    assert result.exit_code == EXIT_REFUSED
    assert "invalid request: volume_type: bad (HTTP 422" in result.stderr


def test_bad_option_values_are_refused_before_any_request(service: FakeService) -> None:
    result = run("--director-url", service.url, "groups", "set", "lab", "--size-gib", "0")
    assert result.exit_code == EXIT_USAGE
    assert service.seen == []


def test_of_several_autoscaler_urls_the_leaders_is_asked(service: FakeService, other_service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, {**STATUS, "leader": False})
    other_service.routes[("GET", "/v1/status")] = (200, {**STATUS, "leader": True})
    other_service.routes[("GET", "/v1/volumes")] = (200, VOLUMES)

    result = run("volumes", env={"AUTOSCALING_URL": f"{service.url}, {other_service.url}"})

    assert result.exit_code == 0, result.output
    assert [s.path for s in service.seen] == ["/v1/status"], "the follower is only asked whether it leads"
    assert [s.path for s in other_service.seen] == ["/v1/status", "/v1/volumes"]


def test_when_no_autoscaler_url_leads_it_says_what_each_answered(service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, {**STATUS, "leader": False})
    nobody = closed_port_url()

    result = run("--autoscaling-url", f"{service.url},{nobody}", "status")

    assert result.exit_code == EXIT_UNREACHABLE
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: none of the autoscalers in --autoscaling-url/AUTOSCALING_URL leads: ")
    assert f"{service.url} follows" in line
    assert f"{nobody} did not answer (cannot reach the autoscaler" in line


# -- the ops token: every command presents OPS_TOKEN, and a 401 says to set it -------------------------------

TOKEN = "secret-token-0123456789"


def test_status_volumes_and_groups_get_present_the_ops_token(service: FakeService) -> None:
    service.routes[("GET", "/v1/status")] = (200, STATUS)
    service.routes[("GET", "/v1/volumes")] = (200, VOLUMES)
    service.routes[("GET", "/v1/groups/lab/properties")] = (200, {"ebs_cache_enabled": True})
    env = {"AUTOSCALING_URL": service.url, "DIRECTOR_URL": service.url, "OPS_TOKEN": TOKEN}

    results = [run(*command, env=env) for command in (["status"], ["volumes"], ["groups", "get", "lab"])]

    assert [r.exit_code for r in results] == [0, 0, 0], [r.output for r in results]
    assert [(s.path, s.headers.get("authorization")) for s in service.seen] == [
        ("/v1/status", f"Bearer {TOKEN}"),
        ("/v1/volumes", f"Bearer {TOKEN}"),
        ("/v1/groups/lab/properties", f"Bearer {TOKEN}"),
    ]
    assert all(TOKEN not in r.output for r in results)


def test_every_replica_asked_whether_it_leads_is_shown_the_ops_token(
    service: FakeService, other_service: FakeService
) -> None:
    service.routes[("GET", "/v1/status")] = (200, {**STATUS, "leader": False})
    other_service.routes[("GET", "/v1/status")] = (200, {**STATUS, "leader": True})

    result = run("status", env={"AUTOSCALING_URL": f"{service.url},{other_service.url}", "OPS_TOKEN": TOKEN})

    assert result.exit_code == 0, result.output
    assert {s.headers.get("authorization") for s in service.seen + other_service.seen} == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize(
    ("command", "path", "env", "hint"),
    [
        (["status"], "/v1/status", {}, "OPS_TOKEN is not set: set it to the ops token"),
        (["volumes"], "/v1/volumes", {"OPS_TOKEN": TOKEN}, "the autoscaler refused OPS_TOKEN: set it to the ops token"),
        (["groups", "get", "lab"], "/v1/groups/lab/properties", {}, "OPS_TOKEN is not set: set it to the ops token"),
    ],
)
def test_a_401_says_to_set_the_ops_token(
    service: FakeService, command: list[str], path: str, env: dict[str, str], hint: str
) -> None:
    service.routes[("GET", path)] = (401, {"detail": "reading this needs 'Authorization: Bearer <ops token>'"})

    result = run(*command, env={"AUTOSCALING_URL": service.url, "DIRECTOR_URL": service.url, **env})

    assert result.exit_code == EXIT_REFUSED
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: reading this needs 'Authorization: Bearer <ops token>' (HTTP 401")
    assert line.endswith(hint)


def test_a_refusal_by_a_replica_asked_whether_it_leads_is_said_as_a_refusal(
    service: FakeService, other_service: FakeService
) -> None:
    for replica in (service, other_service):
        replica.routes[("GET", "/v1/status")] = (401, {"detail": "needs the ops token"})

    result = run("status", env={"AUTOSCALING_URL": f"{service.url},{other_service.url}"})

    assert result.exit_code == EXIT_REFUSED
    assert result.stderr.strip().endswith("OPS_TOKEN is not set: set it to the ops token")
