"""The EC2 Query wire format for the strict layer: form parameters, filters, XML answers, error bodies; no I/O."""

from __future__ import annotations

import fnmatch
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode
from xml.etree import ElementTree as ET

# The only EC2 API version botocore speaks; a Query call naming it is an EC2 call (other Query services,
# IAM or SQS, carry their own versions).
EC2_API_VERSION: Final = "2016-11-15"
XML_CONTENT_TYPE: Final = "text/xml;charset=UTF-8"

Params = list[tuple[str, str]]

_FILTER_NAME = re.compile(r"^Filter\.(\d+)\.Name$")
_FILTER_VALUE = re.compile(r"^Filter\.(\d+)\.Value\.(\d+)$")


def parse_form(body: bytes) -> Params:
    # Kept as ordered pairs: a body we do not change is forwarded byte for byte, and one we do
    # change keeps every parameter we do not know about.
    return parse_qsl(body.decode("utf-8"), keep_blank_values=True)


def encode_form(params: Params) -> bytes:
    return urlencode(params).encode("ascii")


def param(params: Params, name: str) -> str | None:
    return next((value for key, value in params if key == name), None)


def numbered(params: Params, prefix: str) -> list[str]:
    """The values of a Query list (`InstanceId.1`, `InstanceId.2`, …) in their numbered order."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)$")
    found = [(int(match.group(1)), value) for key, value in params if (match := pattern.match(key))]
    return [value for _, value in sorted(found)]


def with_param(params: Params, name: str, value: str) -> Params:
    return [*((key, old) for key, old in params if key != name), (name, value)]


@dataclass(frozen=True)
class Filter:
    name: str
    values: tuple[str, ...]

    def matches(self, value: str | None) -> bool:
        # EC2 filter values take `*` and `?` wildcards; a resource without the field never matches.
        return value is not None and any(fnmatch.fnmatchcase(value, pattern) for pattern in self.values)


def take_filters(params: Params, names: Iterable[str]) -> tuple[Params, list[Filter]]:
    """Removes the filters named `names` from `params` (renumbering the rest) and returns them."""
    wanted = set(names)
    filter_names: dict[int, str] = {}
    filter_values: dict[int, list[tuple[int, str]]] = {}
    others: Params = []
    for key, value in params:
        if match := _FILTER_NAME.match(key):
            filter_names[int(match.group(1))] = value
        elif match := _FILTER_VALUE.match(key):
            filter_values.setdefault(int(match.group(1)), []).append((int(match.group(2)), value))
        else:
            others.append((key, value))
    filters = [
        Filter(filter_names[index], tuple(value for _, value in sorted(filter_values.get(index, []))))
        for index in sorted(filter_names)
    ]
    taken = [one for one in filters if one.name in wanted]
    kept = [one for one in filters if one.name not in wanted]
    for number, one in enumerate(kept, start=1):
        others.append((f"Filter.{number}.Name", one.name))
        others += [(f"Filter.{number}.Value.{index}", value) for index, value in enumerate(one.values, start=1)]
    return others, taken


def error_body(code: str, message: str) -> bytes:
    """An EC2 error answer, in the shape botocore's EC2 parser reads (`Response/Errors/Error`, `RequestID`)."""
    root = ET.Element("Response")
    error = ET.SubElement(ET.SubElement(root, "Errors"), "Error")
    ET.SubElement(error, "Code").text = code
    ET.SubElement(error, "Message").text = message
    ET.SubElement(root, "RequestID").text = str(uuid.uuid4())
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body


def error_code(body: bytes) -> str | None:
    """The code of an EC2 error answer, or None when the body is not one (moto's HTML crash page)."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    code = root.find("./{*}Errors/{*}Error/{*}Code")
    return code.text if code is not None and code.text else None


@dataclass
class XmlAnswer:
    """A parsed EC2 answer with namespaces taken off the tags, so rewrites can use plain names."""

    root: ET.Element
    namespace: str

    @classmethod
    def parse(cls, body: bytes) -> XmlAnswer:
        root = ET.fromstring(body)
        namespace = root.tag[1 : root.tag.index("}")] if root.tag.startswith("{") else ""
        for element in root.iter():
            element.tag = element.tag.rpartition("}")[2]
        return cls(root, namespace)

    def to_bytes(self) -> bytes:
        if self.namespace:
            self.root.set("xmlns", self.namespace)
        body: bytes = ET.tostring(self.root, encoding="utf-8", xml_declaration=True)
        return body


def items(parent: ET.Element | None, set_name: str) -> list[ET.Element]:
    """The `<item>`s of a Query list element such as `instancesSet`."""
    container = None if parent is None else parent.find(set_name)
    return [] if container is None else container.findall("item")


def text(element: ET.Element | None, path: str) -> str | None:
    found = None if element is None else element.find(path)
    return None if found is None else (found.text or "")


def set_text(element: ET.Element, path: str, value: str) -> None:
    found = element.find(path)
    if found is None:
        found = ET.SubElement(element, path)
    found.text = value


def add_fields(parent: ET.Element, fields: Mapping[str, str]) -> ET.Element:
    item = ET.SubElement(parent, "item")
    for name, value in fields.items():
        ET.SubElement(item, name).text = value
    return item


def remove_items(container: ET.Element, drop: Sequence[ET.Element]) -> None:
    for item in drop:
        container.remove(item)
