"""The strict EC2 layer's link to moto: one call as received, one answer, and the client that forwards and looks up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Any, Final
from xml.etree import ElementTree as ET

import aiohttp
from aiohttp import web
from warmswarm_ec2rules.refusals import Refusal
from yarl import URL

from warmswarm_sandbox.strict_ec2_wire import (
    EC2_API_VERSION,
    XML_CONTENT_TYPE,
    Params,
    XmlAnswer,
    encode_form,
    error_body,
    error_code,
    items,
)

OK: Final = "ok"  # the answer code counted for a call that succeeded
FORM: Final = "application/x-www-form-urlencoded"

# Headers of one hop, or set again by whoever sends the next one (aiohttp: Host, Content-Length).
HOP_HEADERS: Final = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding"}
    | {"upgrade", "host", "content-length"}
)
# aiohttp hands us the answer decompressed, and our server writes its own Date and Server.
_ANSWER_HEADERS_DROPPED: Final = HOP_HEADERS | {"content-encoding", "date", "server"}


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def code(self) -> str:
        return OK if self.ok else (error_code(self.body) or f"HTTP{self.status}")

    def with_xml(self, xml: XmlAnswer) -> Answer:
        return replace(self, body=xml.to_bytes())

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=self.body, headers=list(self.headers))

    @classmethod
    def error(cls, status: int, code: str, message: str) -> Answer:
        return cls(status, error_body(code, message), (("Content-Type", XML_CONTENT_TYPE),))

    @classmethod
    def refused(cls, refusal: Refusal) -> Answer:
        """AWS's answer for one of its rules' refusals (warmswarm_ec2rules), with the HTTP status AWS gives it."""
        return cls.error(refusal.status, refusal.code, refusal.message)


@dataclass(frozen=True)
class Call:
    """One EC2 Query call as received: forwarded byte for byte unless a rule changes its parameters."""

    action: str
    params: Params
    body: bytes
    headers: tuple[tuple[str, str], ...]
    path_qs: str


@dataclass(frozen=True)
class CallMatch:
    """Which calls an armed kill counts: one action, and for each (key glob, value glob) in `params` at least one
    Query parameter matching both, e.g. {"Tag.*.Key": "warmswarm:released-at"} for a CreateTags of that tag."""

    action: str
    params: tuple[tuple[str, str], ...] = ()

    def matches(self, call: Call) -> bool:
        return call.action == self.action and all(
            any(fnmatchcase(key, key_glob) and fnmatchcase(value, value_glob) for key, value in call.params)
            for key_glob, value_glob in self.params
        )

    def as_json(self) -> dict[str, Any]:
        return {"action": self.action, "params": dict(self.params)}


class Upstream:
    """moto, as the layer's rules reach it: calls forwarded for the client, and look-ups of its own; each counted."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.forwarded: Counter[str] = Counter()
        self.lookups: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None

    def open(self) -> None:
        # trust_env=False (the default, said out loud): no proxy from the environment, only the upstream.
        self._session = aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=120))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def forward(self, call: Call, params: Params | None = None) -> Answer:
        """Sends the call upstream: its own body unless `params` replaces it."""
        self.forwarded[call.action] += 1
        body = call.body if params is None else encode_form(params)
        return await self.send("POST", call.path_qs, call.headers, body)

    async def send(self, method: str, path_qs: str, headers: Sequence[tuple[str, str]], body: bytes) -> Answer:
        assert self._session is not None, "StrictEc2.start() first"
        url = URL(self.url + path_qs, encoded=True)
        async with self._session.request(method, url, headers=list(headers), data=body, allow_redirects=False) as got:
            content = await got.read()
            kept = tuple(
                (key, value) for key, value in got.headers.items() if key.lower() not in _ANSWER_HEADERS_DROPPED
            )
            return Answer(got.status, content, kept)

    async def lookup(self, call: Call, action: str, params: Params) -> XmlAnswer | None:
        """A read of moto's view for a rule, outside the client's counts and buckets; None if moto refuses."""
        self.lookups[action] += 1
        # The client's Authorization header carries the account (access key) and region moto keys its state by.
        headers = [(key, value) for key, value in call.headers if key.lower() == "authorization"]
        headers.append(("Content-Type", FORM))
        answer = await self.send(
            "POST", "/", headers, encode_form([("Action", action), ("Version", EC2_API_VERSION), *params])
        )
        return XmlAnswer.parse(answer.body) if answer.ok else None

    async def volume(self, call: Call, volume_id: str) -> ET.Element | None:
        found = await self.lookup(call, "DescribeVolumes", [("VolumeId.1", volume_id)])
        volumes = items(None if found is None else found.root, "volumeSet")
        return volumes[0] if volumes else None

    async def instance(self, call: Call, instance_id: str) -> ET.Element | None:
        found = await self.lookup(call, "DescribeInstances", [("InstanceId.1", instance_id)])
        reservations = items(None if found is None else found.root, "reservationSet")
        instances = items(reservations[0], "instancesSet") if reservations else []
        return instances[0] if instances else None
