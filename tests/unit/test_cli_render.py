"""The CLI's tables from fixed JSON: columns line up, reasons are never cut, absent values read as '-'."""

from __future__ import annotations

import re
from typing import Any

from warmswarm_cli import render

from .cli_answers import NOW, STATUS, VOLUMES


def lines_of(text: str, title: str) -> list[str]:
    """The lines of one section: its title down to the blank line after it."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def test_table_aligns_columns_and_leaves_the_last_one_whole() -> None:
    lines = render.table(["A", "LONGER", "REASON"], [["xyz", "1", "short"], ["x", "22", "a much longer reason"]])
    assert lines == [
        "A    LONGER  REASON",
        "xyz  1       short",
        "x    22      a much longer reason",
    ]


def test_status_headline_names_the_cluster_the_role_and_the_last_cycle() -> None:
    headline = render.status(STATUS, NOW).splitlines()[0]
    assert headline == "cluster prod · this replica leads · last cycle 4s ago: ok in 0.21 s, 2 action(s)"


def test_status_headline_says_dry_run_follower_and_failure() -> None:
    body = {**STATUS, "dry_run": True, "leader": False}
    body["last_cycle"] = {"started_at": NOW - 65, "duration_s": 1.0, "ok": False, "error": "EC2 timed out"}
    headline = render.status(body, NOW).splitlines()[0]
    assert "DRY RUN" in headline
    assert "this replica follows" in headline
    assert "last cycle 1m ago FAILED: EC2 timed out" in headline


def test_nodes_table() -> None:
    section = lines_of(render.status(STATUS, NOW), "NODES")
    assert section[0] == "NODES (2)"
    headers = ["HOSTNAME", "ROLE", "STATE", "AVAILABILITY", "OWNER", "INSTANCE", "TYPE", "ZONE", "IDLE"]
    assert section[1].split() == headers
    assert section[2].split() == ["manager-1", "manager", "ready", "active", "-", "-", "-", "-", "-"]
    assert section[3].split() == [
        "ip-10-0-1-17", "worker", "ready", "active", "user=u42,project=p7,node=n1", "i-0abc", "t3.large",
        "eu-central-1a", "2m",
    ]  # fmt: skip
    # Aligned: every column starts where its header does.
    for header in ("OWNER", "IDLE"):
        column = section[1].index(header)
        assert all(line[column - 2 : column] == "  " for line in section[2:])


def test_pending_tasks_say_why_they_wait_in_full() -> None:
    section = lines_of(render.status(STATUS, NOW), "PENDING TASKS")
    assert section[0] == "PENDING TASKS (2)"
    big = next(line for line in section if "ws-big" in line)
    assert "x1y2z3a4b5c6 " in big  # the task id shortened as docker does
    assert "unschedulable" in big
    assert big.endswith(STATUS["pending"][0]["reason"])  # not wrapped, not cut
    assert "no allowed instance type fits" in big
    starting = next(line for line in section if "ws-n2" in line)
    assert "starting" in starting
    assert section[-1].startswith("unschedulable: no launch can place it")


def test_launches_and_decisions() -> None:
    text = render.status(STATUS, NOW)
    launches = lines_of(text, "LAUNCHES IN FLIGHT")
    assert launches[2].split() == [
        "i-0new",
        "t3.medium",
        "eu-central-1b",
        "pending",
        "user=u1,project=p1,node=n2",
        "42s",
    ]
    decisions = lines_of(text, "LAST DECISIONS")
    assert decisions[0] == "LAST DECISIONS (2 of 2, newest first)"
    assert decisions[2].startswith("30s ago")
    assert "ok: i-0new" in decisions[2]
    assert decisions[3].startswith("2h ago")
    assert "FAILED" in decisions[3]
    assert decisions[3].endswith("— failed: UnauthorizedOperation: grant the autoscaler's IAM role this EC2 action")


def test_decisions_are_limited_and_a_dry_run_decision_says_it_was_not_applied() -> None:
    body = {**STATUS, "decisions": [{**STATUS["decisions"][0], "dry_run": True}, STATUS["decisions"][1]]}
    decisions = lines_of(render.status(body, NOW, decisions=1), "LAST DECISIONS")
    assert decisions[0] == "LAST DECISIONS (1 of 2, newest first)"
    assert "not applied (dry run)" in decisions[2]
    assert len(decisions) == 3


def test_an_autoscaler_that_has_not_cycled_yet_shows_empty_sections() -> None:
    body: dict[str, Any] = {
        "cluster": "prod",
        "last_cycle": None,
        "nodes": [],
        "pending": [],
        "launches_in_flight": [],
        "decisions": [],
    }
    assert render.status(body, NOW).splitlines() == [
        "cluster prod · no cycle yet",
        "",
        "NODES: none",
        "",
        "PENDING TASKS: none",
        "",
        "LAUNCHES IN FLIGHT: none",
        "",
        "MACHINES: none",
        "",
        "BUFFERS: none configured",
        "",
        "LAST DECISIONS: none",
    ]


def test_machines_show_their_tier_and_until_when_a_warm_one_is_kept() -> None:
    machine = {
        "instance_id": "i-0abc",
        "instance_type": "t3.medium",
        "availability_zone": "us-east-1a",
        "state": "stopped",
        "owner": {"user_id": "42"},
        "tier": "warm",
        "tier_until": "2026-12-01T15:00:00Z",
        "node_id": "n-1",
    }
    lines = render.status({"cluster": "prod", "instances": [machine]}, NOW).splitlines()
    header = lines.index("MACHINES (1)")
    assert lines[header + 1].split() == ["INSTANCE", "TYPE", "ZONE", "STATE", "OWNER", "TIER", "UNTIL"]
    assert lines[header + 2].split() == [
        "i-0abc",
        "t3.medium",
        "us-east-1a",
        "stopped",
        "user=42",
        "warm",
        "2026-12-01T15:00:00Z",
    ]


def test_volumes_table() -> None:
    lines = render.volumes(VOLUMES, NOW).splitlines()
    assert lines[0] == "CACHE VOLUMES (2)"
    headers = ["VOLUME", "OWNER", "ZONE", "STATE", "SIZE", "TYPE", "ATTACHED TO", "RELEASED", "EXPIRES"]
    assert re.split(r"\s{2,}", lines[1]) == headers
    first = [
        "vol-0aaa",
        "user=u42,project=p7,node=n1",
        "eu-central-1a",
        "in-use",
        "10",
        "GiB",
        "gp3",
        "i-0abc",
        "-",
        "-",
    ]
    assert lines[2].split() == first
    assert "2027-01-15 06:00:00Z (2h ago)" in lines[3]
    assert lines[3].endswith("2027-01-16 06:00:00Z (in 22h)")


def test_no_volumes() -> None:
    assert render.volumes({"volumes": []}, NOW) == "CACHE VOLUMES: none"
    assert render.volumes({"volumes": []}, NOW, user="u42") == "CACHE VOLUMES: none for user u42"


def test_timestamps_as_epoch_seconds_or_iso_and_unreadable_ones_as_they_came() -> None:
    assert render.moment(NOW + 90, NOW) == "2027-01-15 08:01:30Z (in 1m)"
    assert render.moment("2027-01-15T07:00:00+00:00", NOW) == "2027-01-15 07:00:00Z (1h ago)"
    assert render.moment("tomorrow-ish", NOW) == "tomorrow-ish"
    assert render.moment(None, NOW) == "-"


def test_expired_answer() -> None:
    line = render.expired({"volume_id": "vol-0bbb", "expires_at": "2027-01-15T08:00:00Z"}, NOW)
    assert line.startswith("volume vol-0bbb now expires at 2027-01-15 08:00:00Z")


def test_group_properties() -> None:
    properties = {"ebs_cache_enabled": True, "cache_ttl_s": 86400, "cache_size_gib": 20, "volume_type": "gp3"}
    assert render.group("research", properties).splitlines() == [
        "group research",
        "  ebs_cache_enabled  true",
        "  cache_ttl_s        86400 (1d)",
        "  cache_size_gib     20",
        "  volume_type        gp3",
    ]


def test_a_groups_recycling_properties_say_what_each_answer_does() -> None:
    properties = {"recycle_machines": None, "accept_recycled": False}
    assert render.group("vault", properties).splitlines() == [
        "group vault",
        "  recycle_machines  - (no opinion)",
        "  accept_recycled   false (refuses: wins over any other group's true)",
    ]
    granting = render.group("lab", {"accept_recycled": True})
    assert "true (grants, unless another of the user's groups refuses)" in granting


def test_the_buffers_show_what_each_part_holds_against_its_target_and_why() -> None:
    said = "the hot buffer's target for t3.medium in eu-west-1a is 2 = ceil(20.0 arrivals/h × 0.067 h refill × 1.5)"
    body = {
        "cluster": "prod",
        "buffers": [
            {
                "instance_type": "t3.medium",
                "availability_zone": "eu-west-1a",
                "kind": "hot",
                "target": 2,
                "held": 1,
                "said": said,
            },
        ],
    }
    lines = render.status(body, NOW).splitlines()
    start = lines.index("BUFFERS (1)")
    assert lines[start + 1].split()[:5] == ["KIND", "TYPE", "ZONE", "HELD/TARGET", "WHY"]
    assert lines[start + 2].split()[:4] == ["hot", "t3.medium", "eu-west-1a", "1/2"]
    assert lines[start + 2].endswith(said), "the rule's figures are shown whole"
