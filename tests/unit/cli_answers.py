"""The autoscaler's answers the CLI renders, as JSON: a status (two nodes, two waiting tasks, a launch on its way,
two decisions) and a list of cache volumes, both as they stand at NOW."""

from __future__ import annotations

from typing import Any

NOW = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC

STATUS: dict[str, Any] = {
    "cluster": "prod",
    "dry_run": False,
    "leader": True,
    "last_cycle": {"started_at": NOW - 4, "duration_s": 0.21, "ok": True, "error": None, "actions": 2},
    "nodes": [
        {
            "node_id": "mgr1",
            "hostname": "manager-1",
            "role": "manager",
            "state": "ready",
            "availability": "active",
            "owner": {},
            "instance_id": None,
            "instance_type": None,
            "availability_zone": None,
            "idle_s": None,
        },
        {
            "node_id": "wrk1",
            "hostname": "ip-10-0-1-17",
            "role": "worker",
            "state": "ready",
            "availability": "active",
            "owner": {"user_id": "u42", "project_id": "p7", "node_id": "n1"},
            "instance_id": "i-0abc",
            "instance_type": "t3.large",
            "availability_zone": "eu-central-1a",
            "idle_s": 125.0,
        },
    ],
    "pending": [
        {
            "task_id": "x1y2z3a4b5c6d7e8f9",
            "service": "ws-big",
            "owner": {"user_id": "dave"},
            "reason": "needs 512 CPU, 0 B memory but no allowed instance type fits it after the per-node overhead"
            " (0.1 CPU, 256 MiB memory); the largest offers 7.9 CPU, 31.7 GiB memory (m5.2xlarge)",
            "unschedulable": True,
            "starting": False,
        },
        {
            "task_id": "t2",
            "service": "ws-n2",
            "owner": {"user_id": "u1", "project_id": "p1", "node_id": "n2"},
            "reason": "waiting for instance i-0new (t3.medium) to join the swarm",
            "unschedulable": False,
            "starting": True,
        },
    ],
    "launches_in_flight": [
        {
            "instance_id": "i-0new",
            "instance_type": "t3.medium",
            "availability_zone": "eu-central-1b",
            "state": "pending",
            "owner": {"user_id": "u1", "project_id": "p1", "node_id": "n2"},
            "age_s": 42.3,
        }
    ],
    "decisions": [
        {
            "at": NOW - 30,
            "kind": "launch",
            "target": "t3.medium in eu-central-1b",
            "action": "Launch t3.medium in eu-central-1b",
            "reason": "1 pending task(s) of u1/p1/n2 need 1 CPU: t3.medium is the cheapest fit",
            "dry_run": False,
            "error": None,
            "created": "i-0new",
        },
        {
            "at": NOW - 7200,
            "kind": "terminate",
            "target": "i-0old",
            "action": "Terminate i-0old",
            "reason": "node ip-10-0-1-9 is drained and idle for 310 s",
            "dry_run": False,
            "error": "UnauthorizedOperation: grant the autoscaler's IAM role this EC2 action",
            "created": None,
        },
    ],
}


VOLUMES: dict[str, Any] = {
    "volumes": [
        {
            "volume_id": "vol-0aaa",
            "owner": {"user_id": "u42", "project_id": "p7", "node_id": "n1"},
            "availability_zone": "eu-central-1a",
            "state": "in-use",
            "size_gib": 10,
            "volume_type": "gp3",
            "attached_to": "i-0abc",
            "released_at": None,
            "expires_at": None,
        },
        {
            "volume_id": "vol-0bbb",
            "owner": {"user_id": "u1", "project_id": "p1", "node_id": "n9"},
            "availability_zone": "eu-central-1b",
            "state": "available",
            "size_gib": 50,
            "volume_type": "io2",
            "attached_to": None,
            "released_at": "2027-01-15T06:00:00Z",
            "expires_at": "2027-01-16T06:00:00Z",
        },
    ]
}
