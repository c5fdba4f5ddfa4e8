"""The sandbox's own EC2 client: botocore against the loopback moto server, with moto's fixed credentials."""

from __future__ import annotations

import base64
from typing import Any

import botocore.session
from botocore.config import Config

# moto accepts any credentials; these are the ones its documentation uses.
ACCESS_KEY_ID = "testing"
SECRET_ACCESS_KEY = "testing"


def ec2_client(endpoint_url: str, region: str) -> Any:
    session = botocore.session.get_session()
    return session.create_client(
        "ec2",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=ACCESS_KEY_ID,
        aws_secret_access_key=SECRET_ACCESS_KEY,
        config=Config(
            # Loopback: a slow answer means moto is busy, a refused one that it is gone; fail fast.
            connect_timeout=2,
            read_timeout=30,
            retries={"mode": "standard", "total_max_attempts": 2},
            # An empty mapping (not None) keeps botocore from taking HTTP(S)_PROXY from the
            # environment: the sandbox talks to loopback only.
            proxies={},
        ),
    )


def all_instances(ec2: Any) -> dict[str, dict[str, Any]]:
    """Every instance moto knows, in any state, by id."""
    found: dict[str, dict[str, Any]] = {}
    for page in ec2.get_paginator("describe_instances").paginate():
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                found[instance["InstanceId"]] = instance
    return found


def all_volumes(ec2: Any) -> dict[str, dict[str, Any]]:
    """Every volume EC2 knows, in any state, by id."""
    found: dict[str, dict[str, Any]] = {}
    for page in ec2.get_paginator("describe_volumes").paginate():
        for volume in page["Volumes"]:
            found[volume["VolumeId"]] = volume
    return found


def user_data_of(ec2: Any, instance_id: str) -> bytes | None:
    answer = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    encoded = answer.get("UserData", {}).get("Value")
    return None if encoded is None else base64.b64decode(encoded)
