"""Armed kills in the sandbox's strict EC2 layer: a process dies right after a matching call's answer has left."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from warmswarm_sandbox.cloud import Endpoints
from warmswarm_sandbox.kill_switch import Target
from warmswarm_sandbox.strict_ec2 import StrictEc2

AMI = "ami-12345678"  # moto accepts any image id
MARKER_KEY = "ws-test.kill"
DEATH_TIMEOUT_S = 10.0


def admin(endpoints: Endpoints, method: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        f"{endpoints.ec2_endpoint_url}/strict/kill",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)


def refused(endpoints: Endpoints, body: dict[str, Any]) -> str:
    with pytest.raises(urllib.error.HTTPError) as error:
        admin(endpoints, "POST", body)
    assert error.value.code == 400
    return str(error.value.read().decode())


def launch(ec2: Any, marker: str | None = None) -> str:
    tags = [] if marker is None else [{"ResourceType": "instance", "Tags": [{"Key": MARKER_KEY, "Value": marker}]}]
    answer = ec2.run_instances(ImageId=AMI, MinCount=1, MaxCount=1, InstanceType="t3.micro", TagSpecifications=tags)
    return str(answer["Instances"][0]["InstanceId"])


def armed_by_id(endpoints: Endpoints, kill_id: str) -> dict[str, Any] | None:
    return next((one for one in admin(endpoints, "GET")["armed"] if one["id"] == kill_id), None)


@pytest.fixture
def kills(endpoints: Endpoints) -> Iterator[None]:
    yield
    admin(endpoints, "DELETE")


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """The throwaway process a kill is armed on."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture
def launched(ec2: Any) -> Iterator[list[str]]:
    """Instances a test launched, terminated after it (each is a machine the boot watcher powers on)."""
    instance_ids: list[str] = []
    yield instance_ids
    if instance_ids:
        ec2.terminate_instances(InstanceIds=instance_ids)


@pytest.mark.usefixtures("kills")
def test_a_kill_on_run_instances_fires_after_the_nth_matching_answer(
    ec2: Any, endpoints: Endpoints, sleeper: subprocess.Popen[bytes], launched: list[str]
) -> None:
    marker = uuid.uuid4().hex
    marked = {"TagSpecification.*.Tag.*.Value": marker}
    armed = admin(endpoints, "POST", {"action": "RunInstances", "params": marked, "pid": sleeper.pid, "after": 2})
    kill_id = armed["id"]
    assert armed_by_id(endpoints, kill_id) == {
        "id": kill_id,
        "when": {"action": "RunInstances", "params": marked},
        "pid": sleeper.pid,
        "signal": "SIGKILL",
        "remaining": 2,
        "ok_only": True,
    }

    # Not counted: a launch without the marker, and a marked one that failed (it took no effect).
    launched.append(launch(ec2))
    urllib.request.urlopen(
        urllib.request.Request(
            f"{endpoints.ec2_endpoint_url}/strict/fail",
            data=json.dumps({"action": "RunInstances", "code": "InvalidParameterValue", "status": 400}).encode(),
            headers={"content-type": "application/json"},
        ),
        timeout=10,
    ).close()
    with pytest.raises(ClientError, match="InvalidParameterValue"):
        launch(ec2, marker)
    # The count is taken before an answer is written, so this is already final.
    assert armed_by_id(endpoints, kill_id)["remaining"] == 2  # type: ignore[index]

    launched.append(launch(ec2, marker))
    assert armed_by_id(endpoints, kill_id)["remaining"] == 1  # type: ignore[index]
    assert sleeper.poll() is None

    instance_id = launch(ec2, marker)  # the client got its id
    launched.append(instance_id)
    assert sleeper.wait(timeout=DEATH_TIMEOUT_S) == -signal.SIGKILL
    [instance] = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"]
    assert {"Key": MARKER_KEY, "Value": marker} in instance["Tags"]
    listing = admin(endpoints, "GET")
    assert armed_by_id(endpoints, kill_id) is None
    [fired] = [one for one in listing["fired"] if one["id"] == kill_id]
    assert fired["call"] == {"action": "RunInstances", "answer": "ok"}
    assert (fired["pid"], fired["signal"], fired["result"], fired["answer_sent"]) == (
        sleeper.pid,
        "SIGKILL",
        "signalled",
        True,
    )


async def test_the_signal_is_sent_once_the_whole_answer_is_in_the_clients_socket(
    ec2: Any,
    endpoints: Endpoints,
    sleeper: subprocess.Popen[bytes],
    launched: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A layer of our own in this process, in front of the sandbox's moto, so the moment of the signal can be
    # watched: at that moment, what has our client's socket received (on loopback, all that was sent)?
    layer = StrictEc2(endpoints.moto_endpoint_url, throttle=False)
    url = await layer.start()
    endpoint = urlsplit(url)
    client = socket.create_connection((str(endpoint.hostname), int(str(endpoint.port))), timeout=10)
    received_at_signal: list[bytes] = []
    send = Target.send

    def peek_then_send(target: Target, signum: signal.Signals) -> str:
        try:
            received_at_signal.append(client.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT))
        except BlockingIOError:
            received_at_signal.append(b"")
        return send(target, signum)

    monkeypatch.setattr(Target, "send", peek_then_send)
    marker = uuid.uuid4().hex
    try:
        layer.kill_after("RunInstances", sleeper.pid, params={"TagSpecification.*.Tag.*.Value": marker})
        client.setblocking(False)
        await asyncio.get_running_loop().sock_sendall(client, signed_run_instances(url, endpoints.aws_region, marker))
        assert await asyncio.to_thread(sleeper.wait, DEATH_TIMEOUT_S) == -signal.SIGKILL
    finally:
        client.close()
        await layer.stop()
    [seen] = received_at_signal
    assert seen.startswith(b"HTTP/1.1 200 ")
    assert seen.rstrip().endswith(b"</RunInstancesResponse>"), seen[-200:]
    found = re.search(rb"<instanceId>(i-[0-9a-f]+)</instanceId>", seen)
    assert found is not None
    launched.append(found.group(1).decode())
    [instance] = ec2.describe_instances(InstanceIds=launched)["Reservations"][0]["Instances"]
    assert instance["Tags"] == [{"Key": MARKER_KEY, "Value": marker}]
    [fired] = layer.kills.fired()
    assert (fired["call"], fired["result"], fired["answer_sent"]) == (
        {"action": "RunInstances", "answer": "ok"},
        "signalled",
        True,
    )


def signed_run_instances(endpoint_url: str, region: str, marker: str) -> bytes:
    """A RunInstances as botocore would send it, as raw HTTP/1.1 bytes."""
    form = urlencode(
        {
            "Action": "RunInstances",
            "Version": "2016-11-15",
            **{"ImageId": AMI, "InstanceType": "t3.micro", "MinCount": "1", "MaxCount": "1"},
            "TagSpecification.1.ResourceType": "instance",
            "TagSpecification.1.Tag.1.Key": MARKER_KEY,
            "TagSpecification.1.Tag.1.Value": marker,
        }
    )
    request = AWSRequest(
        method="POST",
        url=f"{endpoint_url}/",
        data=form,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    SigV4Auth(Credentials("testing", "testing"), "ec2", region).add_auth(request)
    head = ["POST / HTTP/1.1", f"Host: {urlsplit(endpoint_url).netloc}", f"Content-Length: {len(form)}"]
    head += [f"{key}: {value}" for key, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n" + form).encode()


@pytest.mark.usefixtures("kills")
def test_a_kill_is_refused_unless_it_names_one_other_live_process(endpoints: Endpoints) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    run = {"action": "RunInstances"}
    for pid in (0, -1, 1, gone.pid):
        refused(endpoints, {**run, "pid": pid})
    assert "pid" in refused(endpoints, {**run, "pid": "123"})
    assert "signal" in refused(endpoints, {**run, "pid": os.getpid(), "signal": "SIGNOPE"})
    assert "after" in refused(endpoints, {**run, "pid": os.getpid(), "after": 0})
    assert "action" in refused(endpoints, {"pid": os.getpid()})
    assert admin(endpoints, "GET") == {"armed": [], "fired": []}


def test_the_layer_never_signals_itself() -> None:
    layer = StrictEc2("http://127.0.0.1:1")  # never started: arming needs no upstream
    with pytest.raises(ValueError, match="cannot be a target"):
        layer.kill_after("RunInstances", os.getpid())
    assert layer.kills.armed() == []


@pytest.mark.usefixtures("kills")
def test_delete_disarms(endpoints: Endpoints, sleeper: subprocess.Popen[bytes]) -> None:
    release = {"Tag.*.Key": "warmswarm:released-at"}
    admin(endpoints, "POST", {"action": "CreateTags", "params": release, "pid": sleeper.pid})
    assert len(admin(endpoints, "GET")["armed"]) == 1
    assert admin(endpoints, "DELETE") == {"armed": [], "fired": []}
