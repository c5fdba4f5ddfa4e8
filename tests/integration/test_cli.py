"""`warmswarm` as a process against the real autoscaler and director in the sandbox (real swarm, Redis, moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiodocker
import pytest
from warmswarm_demos.workload import create_service
from warmswarm_sandbox.cloud import Endpoints, Sandbox
from warmswarm_sandbox.services import new_ops_token, start_autoscaler, start_director

CLUSTER = "cli-test"
PREFIX = "cli-"
WAIT_S = 45.0

Result = subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def ops_token() -> str:
    """One token for both services, as `make up` and a stack deploy give them."""
    return new_ops_token()


@pytest.fixture(scope="module")
def autoscaling_url(sandbox: Sandbox, ops_token: str) -> Iterator[str]:
    # Its own cluster name, so its leader lock and its instances are apart from other tests' autoscalers.
    url = start_autoscaler(
        sandbox, name="autoscaling-cli", settings={"WARMSWARM_CLUSTER": CLUSTER}, ops_token=ops_token
    )
    yield url
    sandbox.kill("autoscaling-cli")


@pytest.fixture(scope="module")
def director(sandbox: Sandbox, autoscaling_url: str, ops_token: str) -> Iterator[tuple[str, str]]:
    started = start_director(sandbox, name="director-cli", autoscaling_url=autoscaling_url, ops_token=ops_token)
    yield started.url, ops_token
    sandbox.kill("director-cli")


@pytest.fixture
async def docker(endpoints: Endpoints) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=endpoints.docker_host)
    yield client
    for service in await client.services.list():
        if service["Spec"]["Name"].startswith(PREFIX):
            await client.services.delete(service["ID"])
    await client.close()


def warmswarm(*args: str, env: dict[str, str] | None = None) -> Result:
    """The CLI as an operator runs it: its own process, configured by the environment."""
    clean = {k: v for k, v in os.environ.items() if k not in ("AUTOSCALING_URL", "DIRECTOR_URL", "OPS_TOKEN")}
    return subprocess.run(
        [sys.executable, "-m", "warmswarm_cli", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def eventually(what: str, run: Callable[[], Result], ok: Callable[[Result], bool]) -> Result:
    """Run until `ok` holds: the autoscaler answers from its last cycle, and the leader is elected first."""
    deadline = time.monotonic() + WAIT_S
    while True:
        result = run()
        if ok(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {WAIT_S:g} s; last output:\n{result.stdout}\n{result.stderr}")
        time.sleep(0.5)


async def test_status_says_why_an_impossible_service_waits(
    autoscaling_url: str, ops_token: str, docker: aiodocker.Docker, endpoints: Endpoints
) -> None:
    name = f"{PREFIX}big-{uuid.uuid4().hex[:6]}"
    await create_service(docker, name, endpoints.sandbox_image, owner={"user_id": f"u{uuid.uuid4().hex[:6]}"}, cpus=512)
    env = {"AUTOSCALING_URL": autoscaling_url, "OPS_TOKEN": ops_token}

    def shows_it(result: Result) -> bool:
        return result.returncode == 0 and any(name in line for line in result.stdout.splitlines())

    result = eventually("the pending service in `warmswarm status`", lambda: warmswarm("status", env=env), shows_it)
    line = next(line for line in result.stdout.splitlines() if name in line)
    assert "unschedulable" in line
    assert "no allowed instance type fits" in line
    assert "512 CPU" in line
    assert result.stdout.startswith(f"cluster {CLUSTER}")
    assert "PENDING TASKS" in result.stdout

    raw = warmswarm("status", "--json", env=env)
    assert raw.returncode == 0, raw.stderr
    pending = {p["service"]: p for p in json.loads(raw.stdout)["pending"]}
    assert pending[name]["unschedulable"] is True


def test_groups_set_and_get_round_trip_with_the_token(director: tuple[str, str]) -> None:
    url, token = director
    group = f"g-{uuid.uuid4().hex[:8]}"
    env = {"DIRECTOR_URL": url, "OPS_TOKEN": token}

    missing = warmswarm("groups", "get", group, env=env)
    assert missing.returncode == 1
    assert "HTTP 404 from the director" in missing.stderr

    stored = warmswarm(
        "groups", "set", group, "--cache", "--ttl-s", "600", "--size-gib", "20", "--max-size-gib", "200",
        "--warm-ttl-s", "1800", env=env,
    )  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    changed = warmswarm("groups", "set", group, "--volume-type", "gp2", "--json", env=env)
    assert changed.returncode == 0, changed.stderr
    # The second set changed only the type: the rest stayed as the first one stored it.
    expected = {
        "ebs_cache_enabled": True,
        "cache_ttl_s": 600,
        "cache_size_gib": 20,
        "cache_max_size_gib": 200,
        "volume_type": "gp2",
        "warm_ttl_s": 1800,
        "recycle_machines": None,
        "accept_recycled": None,
    }
    assert json.loads(changed.stdout) == expected

    got = warmswarm("groups", "get", group, "--json", env=env)
    assert json.loads(got.stdout) == expected
    table = warmswarm("groups", "get", group, env=env)
    assert "ebs_cache_enabled   true" in table.stdout
    assert "cache_ttl_s         600 (10m)" in table.stdout
    assert "cache_max_size_gib  200" in table.stdout


def test_a_refusing_group_wins_until_ops_unset_it(director: tuple[str, str]) -> None:
    url, token = director
    tag = uuid.uuid4().hex[:8]
    vault, lab = f"vault-{tag}", f"lab-{tag}"
    env = {"DIRECTOR_URL": url, "OPS_TOKEN": token}
    refused = warmswarm("groups", "set", vault, "--no-recycle-machines", "--no-accept-recycled", env=env)
    assert refused.returncode == 0, refused.stderr
    assert "accept_recycled     false (refuses: wins over any other group's true)" in refused.stdout
    granted = warmswarm("groups", "set", lab, "--recycle-machines", "--accept-recycled", env=env)
    assert granted.returncode == 0, granted.stderr

    both = warmswarm("groups", "recycling", lab, vault, "--json", env=env)
    assert both.returncode == 0, both.stderr
    assert json.loads(both.stdout) == {
        "recycle_machines": {"value": False, "decided_by": [vault]},
        "accept_recycled": {"value": False, "decided_by": [vault]},
        "without_properties": [],
    }

    unset = warmswarm("groups", "set", vault, "--unset", "accept_recycled", "--json", env=env)
    assert unset.returncode == 0, unset.stderr
    assert (json.loads(unset.stdout)["accept_recycled"], json.loads(unset.stdout)["recycle_machines"]) == (None, False)
    table = warmswarm("groups", "recycling", lab, vault, env=env)
    assert "recycle_machines  false  refused by " + vault in table.stdout
    assert "accept_recycled   true   granted by " + lab in table.stdout


def test_two_operators_setting_one_group_at_once_both_keep_their_change(director: tuple[str, str]) -> None:
    url, token = director
    group = f"g-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "DIRECTOR_URL": url, "OPS_TOKEN": token}
    command = [sys.executable, "-m", "warmswarm_cli", "groups", "set", group]
    for round_number in range(1, 4):
        # Two processes started together, as two operators at two terminals.
        operators = [
            subprocess.Popen([*command, *options], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for options in (["--ttl-s", str(600 * round_number)], ["--warm-ttl-s", str(60 * round_number)])
        ]
        outcomes = [operator.communicate(timeout=60) for operator in operators]
        assert [operator.returncode for operator in operators] == [0, 0], outcomes

        stored = json.loads(warmswarm("groups", "get", group, "--json", env=env).stdout)
        assert (stored["cache_ttl_s"], stored["warm_ttl_s"]) == (600 * round_number, 60 * round_number)


def test_groups_set_with_the_etag_groups_get_showed_applies_once_and_a_stale_one_is_told_to_read_again(
    director: tuple[str, str],
) -> None:
    url, token = director
    group = f"g-{uuid.uuid4().hex[:8]}"
    env = {"DIRECTOR_URL": url, "OPS_TOKEN": token}
    assert warmswarm("groups", "set", group, "--ttl-s", "600", env=env).returncode == 0
    shown = warmswarm("groups", "get", group, env=env)
    etag = shown.stdout.splitlines()[0].split("(etag ")[1].rstrip(")")

    first = warmswarm("groups", "set", group, "--ttl-s", "900", "--if-match", etag, env=env)
    second = warmswarm("groups", "set", group, "--ttl-s", "1200", "--if-match", etag, env=env)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 1
    assert "changed since ETag" in second.stderr
    assert "HTTP 412 from the director" in second.stderr
    assert json.loads(warmswarm("groups", "get", group, "--json", env=env).stdout)["cache_ttl_s"] == 900


def test_groups_set_without_or_with_a_wrong_token_fails_and_changes_nothing(director: tuple[str, str]) -> None:
    url, token = director
    group = f"g-{uuid.uuid4().hex[:8]}"
    stored = warmswarm("groups", "set", group, "--no-cache", env={"DIRECTOR_URL": url, "OPS_TOKEN": token})
    assert stored.returncode == 0, stored.stderr

    for env in ({"DIRECTOR_URL": url}, {"DIRECTOR_URL": url, "OPS_TOKEN": "not-the-token-at-all-0123"}):
        refused = warmswarm("groups", "set", group, "--cache", env=env)
        assert refused.returncode == 1
        assert "HTTP 401 from the director" in refused.stderr
        assert "OPS_TOKEN" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1

    got = warmswarm("groups", "get", group, "--json", env={"DIRECTOR_URL": url, "OPS_TOKEN": token})
    assert json.loads(got.stdout)["ebs_cache_enabled"] is False


def test_volumes_lists_and_its_json_parses(autoscaling_url: str, ops_token: str) -> None:
    env = {"AUTOSCALING_URL": autoscaling_url, "OPS_TOKEN": ops_token}
    # Answered once this replica leads and has observed the volumes (503 before).
    listed = eventually("`warmswarm volumes`", lambda: warmswarm("volumes", env=env), lambda r: r.returncode == 0)
    first = listed.stdout.splitlines()[0]
    assert first == "CACHE VOLUMES: none" or first.startswith("CACHE VOLUMES (")
    if first.startswith("CACHE VOLUMES ("):
        assert listed.stdout.splitlines()[1].split()[:3] == ["VOLUME", "OWNER", "ZONE"]

    raw = warmswarm("volumes", "--json", env=env)
    assert raw.returncode == 0, raw.stderr
    body: dict[str, Any] = json.loads(raw.stdout)
    assert isinstance(body["volumes"], list)

    mine = warmswarm("volumes", "--user", "nobody-has-this-id", env=env)
    assert mine.stdout.strip() == "CACHE VOLUMES: none for user nobody-has-this-id"


def test_expiring_an_unknown_volume_prints_the_servers_message(autoscaling_url: str, ops_token: str) -> None:
    env = {"AUTOSCALING_URL": autoscaling_url, "OPS_TOKEN": ops_token}
    eventually("the leader", lambda: warmswarm("volumes", env=env), lambda r: r.returncode == 0)
    result = warmswarm("volumes", "expire", "vol-0123456789abcdef0", env=env)
    assert result.returncode == 1
    assert "HTTP 404 from the autoscaler" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_expiring_needs_the_ops_token(autoscaling_url: str, ops_token: str) -> None:
    env = {"AUTOSCALING_URL": autoscaling_url}
    with_token = {**env, "OPS_TOKEN": ops_token}
    eventually("the leader", lambda: warmswarm("volumes", env=with_token), lambda r: r.returncode == 0)
    wrong = {"OPS_TOKEN": "not-the-token-at-all-0123"}
    for extra, hint in (({}, "OPS_TOKEN is not set"), (wrong, "the autoscaler refused OPS_TOKEN")):
        result = warmswarm("volumes", "expire", "vol-0123456789abcdef0", env={**env, **extra})
        assert result.returncode == 1
        (line,) = result.stderr.strip().splitlines()
        assert "HTTP 401 from the autoscaler" in line
        assert line.endswith(f"{hint}: set it to the ops token")


@pytest.mark.parametrize("command", [["status"], ["volumes"], ["groups", "get", "lab"]])
def test_reading_without_the_ops_token_is_refused_and_says_to_set_it(
    autoscaling_url: str, director: tuple[str, str], command: list[str]
) -> None:
    url, _ = director
    wrong = {"OPS_TOKEN": "not-the-token-at-all-0123"}
    for extra, hint in (({}, "OPS_TOKEN is not set"), (wrong, "refused OPS_TOKEN")):
        result = warmswarm(*command, env={"AUTOSCALING_URL": autoscaling_url, "DIRECTOR_URL": url, **extra})
        assert result.returncode == 1
        assert result.stdout == ""
        (line,) = result.stderr.strip().splitlines()
        assert "HTTP 401 from the" in line
        assert line.endswith(f"{hint}: set it to the ops token")


def test_an_unreachable_service_is_one_line_not_a_traceback() -> None:
    result = warmswarm("status", env={"AUTOSCALING_URL": "http://127.0.0.1:9"})
    assert result.returncode == 3
    assert result.stderr.startswith("error: cannot reach the autoscaler at http://127.0.0.1:9")
    assert len(result.stderr.strip().splitlines()) == 1
