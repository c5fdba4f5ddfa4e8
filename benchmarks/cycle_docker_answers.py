"""Engine API answers (JSON) for a fleet's nodes, services and tasks, with the members the Engine API reference shows.

Each object is rendered on its own, so a change to one (a task's new version) re-renders that one alone.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Final

from cycle_world import (
    NODE_MEMORY_BYTES,
    NODE_NANO_CPUS,
    TASK_MEMORY_BYTES,
    TASK_NANO_CPUS,
    Machine,
)

API_VERSION: Final = "1.47"
# The CA's certificate every node reports in its TLSInfo (the reference's example has one of this size).
_TRUST_ROOT: Final = (
    "-----BEGIN CERTIFICATE-----\n"
    + "\n".join(
        "MIIBajCCARCgAwIBAgIUbYqrLSOSQHoxD8CwG6Bi2PJi9c8wCgYIKoZIzj0EAwIwEzERMA8GA1UEAxMIc3dhcm0tY2EwHhcN"[:64]
        for _ in range(9)
    )
    + "\n-----END CERTIFICATE-----\n"
)
_CA_PUBLIC_KEY: Final = "".join(
    (
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEmT9XIw9h1qoNclv9VeHmf/Vi6/uI2vFXdBveXTpc",
        "Pjqx6i9wNazchk1XWV/dKTKvSh9xyGKmiIeRcE4OE8+kYg==",
    )
)
_PLUGINS: Final = [
    {"Type": kind, "Name": name}
    for kind, names in (
        ("Log", ("awslogs", "fluentd", "gcplogs", "gelf", "journald", "json-file", "local", "splunk", "syslog")),
        ("Network", ("bridge", "host", "ipvlan", "macvlan", "null", "overlay")),
        ("Volume", ("local",)),
    )
    for name in names
]
_IMAGE: Final = "registry.example.com/warmswarm/session:2.14@sha256:" + "5f0c0ba6" * 8
_OVERLAY: Final = {
    "ID": "4qvuz4ko70xaltuqbt8956gd1",
    "Version": {"Index": 18},
    "CreatedAt": "2026-06-01T09:00:00.000000000Z",
    "UpdatedAt": "2026-06-01T09:00:00.000000000Z",
    "Spec": {
        "Name": "sessions",
        "Labels": {},
        "DriverConfiguration": {"Name": "overlay"},
        "Scope": "swarm",
        "IPAMOptions": {"Driver": {"Name": "default"}, "Configs": [{"Subnet": "10.0.0.0/8", "Gateway": "10.0.0.1"}]},
    },
    "DriverState": {"Name": "overlay", "Options": {"com.docker.network.driver.overlay.vxlanid_list": "4097"}},
    "IPAMOptions": {"Driver": {"Name": "default"}, "Configs": [{"Subnet": "10.0.0.0/8", "Gateway": "10.0.0.1"}]},
}


def docker_time(epoch_s: float) -> str:
    """RFC 3339 with nanoseconds, as the Engine writes its times."""
    moment = datetime.fromtimestamp(int(epoch_s), tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{moment}.{int(epoch_s * 1e9) % 10**9:09d}Z"


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def node(m: Machine) -> bytes:
    joined = docker_time(m.launched_at_s + 40.123)
    return _encode(
        {
            "ID": m.node_id,
            "Version": {"Index": m.node_version},
            "CreatedAt": joined,
            "UpdatedAt": joined,
            "Spec": {"Labels": m.node_labels(), "Role": "worker", "Availability": "active"},
            "Description": {
                "Hostname": m.hostname,
                "Platform": {"Architecture": "x86_64", "OS": "linux"},
                "Resources": {"NanoCPUs": NODE_NANO_CPUS, "MemoryBytes": NODE_MEMORY_BYTES},
                "Engine": {"EngineVersion": "27.3.1", "Labels": m.engine_labels(), "Plugins": _PLUGINS},
                "TLSInfo": {
                    "TrustRoot": _TRUST_ROOT,
                    "CertIssuerSubject": "MBMxETAPBgNVBAMTCHN3YXJtLWNh",
                    "CertIssuerPublicKey": _CA_PUBLIC_KEY,
                },
            },
            "Status": {"State": "ready", "Message": "", "Addr": m.private_ip},
        }
    )


def _task_template(m: Machine) -> dict[str, Any]:
    return {
        "ContainerSpec": {
            "Image": _IMAGE,
            "Labels": {"com.example.session": m.owner.user_id},
            "Env": [f"SESSION_USER={m.owner.user_id}", f"SESSION_PROJECT={m.owner.project_id}", "TZ=UTC"],
            "Privileges": {"CredentialSpec": None, "SELinuxContext": None, "NoNewPrivileges": False},
            "StopGracePeriod": 10_000_000_000,
            "DNSConfig": {},
            "Isolation": "default",
        },
        "Resources": {
            "Limits": {},
            "Reservations": {"NanoCPUs": TASK_NANO_CPUS, "MemoryBytes": TASK_MEMORY_BYTES},
        },
        "RestartPolicy": {"Condition": "any", "Delay": 5_000_000_000, "MaxAttempts": 0},
        "Placement": {
            "Constraints": m.owner.constraints(),
            "Platforms": [{"Architecture": "amd64", "OS": "linux"}],
        },
        "Networks": [{"Target": _OVERLAY["ID"]}],
        "ForceUpdate": 0,
        "Runtime": "container",
    }


def service(m: Machine) -> bytes:
    created = docker_time(m.launched_at_s - 5.5)
    template = _task_template(m)
    return _encode(
        {
            "ID": m.service_id,
            "Version": {"Index": m.service_version},
            "CreatedAt": created,
            "UpdatedAt": created,
            "Spec": {
                "Name": f"session-{m.owner.user_id}",
                "Labels": {"com.example.owner": m.owner.user_id},
                "TaskTemplate": template,
                "Mode": {"Replicated": {"Replicas": 1}},
                "UpdateConfig": {
                    "Parallelism": 1,
                    "FailureAction": "pause",
                    "Monitor": 5_000_000_000,
                    "MaxFailureRatio": 0,
                    "Order": "stop-first",
                },
                "RollbackConfig": {
                    "Parallelism": 1,
                    "FailureAction": "pause",
                    "Monitor": 5_000_000_000,
                    "MaxFailureRatio": 0,
                    "Order": "stop-first",
                },
                "EndpointSpec": {"Mode": "vip"},
            },
            "Endpoint": {
                "Spec": {"Mode": "vip"},
                "VirtualIPs": [
                    {"NetworkID": _OVERLAY["ID"], "Addr": f"10.128.{m.index // 250 % 250}.{m.index % 250}/8"}
                ],
            },
        }
    )


def task(m: Machine, *, touches: int = 0) -> bytes:
    """The machine's one running task; each touch is a change the store recorded (a new version, a new status)."""
    started = m.launched_at_s + 60.25 + touches
    return _encode(
        {
            "ID": m.task_id,
            "Version": {"Index": m.task_version + touches},
            "CreatedAt": docker_time(m.launched_at_s - 5.25),
            "UpdatedAt": docker_time(started),
            "Labels": {},
            "Spec": _task_template(m),
            "ServiceID": m.service_id,
            "Slot": 1,
            "NodeID": m.node_id,
            "Status": {
                "Timestamp": docker_time(started),
                "State": "running",
                "Message": "started",
                "ContainerStatus": {"ContainerID": m.container_id, "PID": 4_000 + touches, "ExitCode": 0},
                "PortStatus": {},
            },
            "DesiredState": "running",
            "NetworksAttachments": [
                {
                    "Network": _OVERLAY,
                    "Addresses": [f"10.{m.index // 62_500 % 250 + 1}.{m.index // 250 % 250}.{m.index % 250 + 2}/8"],
                }
            ],
        }
    )


def version() -> bytes:
    return _encode(
        {
            "Version": "27.3.1",
            "ApiVersion": API_VERSION,
            "MinAPIVersion": "1.24",
            "Os": "linux",
            "Arch": "amd64",
            "KernelVersion": "6.8.0",
        }
    )
