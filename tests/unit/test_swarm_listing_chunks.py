"""A listing read from the chunks it arrived in (swarm_listings.elements_in): wherever the chunks are cut, the elements
are those json.loads finds in the whole answer, and an answer that is not a list of swarm objects is refused."""

from __future__ import annotations

import itertools
import json
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from warmswarm_autoscaling.adapters.swarm_answers import SwarmAnswers
from warmswarm_autoscaling.adapters.swarm_listings import Unsplittable, elements, elements_in

# Ids as the Engine makes them; values with what could fool a split: brackets, braces, quotes, backslashes,
# escapes, the separator's own text and multi-byte characters (cut between chunks too).
IDS = st.text(alphabet=string.ascii_lowercase + string.digits, min_size=1, max_size=25)
TEXT = st.lists(st.sampled_from([*'[]{},:"\\/ \n\tIDé€😀ab', '},{"ID":"', "\\u0000"]), max_size=8).map("".join)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
EXTRA = st.dictionaries(TEXT.filter(lambda key: key not in ("ID", "Version")), VALUES, max_size=4)


def _engine_json(values: list[dict[str, Any]]) -> bytes:
    """As the Engine writes a listing: compact, UTF-8, the ID and the version first, a newline after."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _cut(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(set(cuts)), len(body)]
    return [body[start:stop] for start, stop in itertools.pairwise(bounds) if stop > start]


def _read(chunks: list[bytes]) -> list[tuple[str, int | None, Any]]:
    return [(object_id, version, load()) for object_id, version, load in elements_in(chunks)]


OBJECTS = st.lists(st.tuples(IDS, st.integers(0, 10**12), EXTRA), max_size=8, unique_by=lambda o: o[0])


@given(objects=OBJECTS, data=st.data())
def test_wherever_the_chunks_are_cut_the_elements_are_what_json_loads_gives(
    objects: list[tuple[str, int, dict[str, Any]]], data: st.DataObject
) -> None:
    values = [{"ID": object_id, "Version": {"Index": version}, **extra} for object_id, version, extra in objects]
    body = _engine_json(values)
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=12))

    read = _read(_cut(body, cuts))

    assert [raw for _, _, raw in read] == json.loads(body)
    assert [(object_id, version) for object_id, version, _ in read] == [(o[0], o[1]) for o in objects]


@pytest.mark.parametrize("chunks", [[b"[]"], [b"[]\n"], [b"[", b"]"], [b" [", b"", b"]\n"], [b"\n[]"]])
def test_an_empty_listing_has_no_elements(chunks: list[bytes]) -> None:
    assert _read(chunks) == []


def test_one_byte_chunks_read_as_the_whole_answer() -> None:
    body = _engine_json([{"ID": "n1", "Version": {"Index": 3}, "S": "]},{"}, {"ID": "n2", "Version": {"Index": 4}}])

    assert _read([body[i : i + 1] for i in range(len(body))]) == [(o, v, raw) for o, v, raw in _read([body])]
    assert [object_id for object_id, _, _ in elements(body)] == ["n1", "n2"]


@pytest.mark.parametrize(
    ("chunks", "why"),
    [
        ([b'[{"ID":"n1","Version":{"Index":1}},{"ID":'], "does not end as a list"),  # cut short
        ([b'[{"ID":"n1","Version":{"Index":1}},{"ID":"n2"}]'], "does not start with its ID and version"),
        ([b'[{"ID":"n1","Version":{"Index":1}}'], "does not end as a list"),  # no closing bracket
        ([b'[{"ID":"n1","Version":{"Index":1}},', b'{"ID":"n1","Version":{"Index":2}}]'], "comes twice"),
        ([b'[{"Version":{"Index":1},"ID":"n1"}]'], "not a list of swarm objects"),  # another order
        ([b"{}"], "not a list of swarm objects"),
        ([b"[1]"], "not a list of swarm objects"),
        ([b""], "not a list of swarm objects"),
    ],
)
def test_an_answer_that_is_not_a_list_of_swarm_objects_is_refused(chunks: list[bytes], why: str) -> None:
    with pytest.raises(Unsplittable, match=why):
        _read(chunks)


def test_the_answers_read_the_same_from_chunks_as_from_the_whole_bytes() -> None:
    nodes = [
        {
            "ID": f"n{n}",
            "Version": {"Index": n},
            "Spec": {"Labels": {"user_id": f"u{n}"}, "Role": "worker", "Availability": "active"},
            "Description": {"Hostname": f"h{n}", "Resources": {"NanoCPUs": 10**9, "MemoryBytes": 2**30}},
            "Status": {"State": "ready", "Addr": "10.0.0.1"},
        }
        for n in range(20)
    ]
    body = _engine_json(nodes)

    from_chunks = SwarmAnswers().nodes_json(_cut(body, list(range(7, len(body), 13))))

    assert from_chunks == SwarmAnswers().nodes_json(body) == SwarmAnswers().nodes(nodes)


def test_a_garbled_answer_in_chunks_is_a_value_error_that_says_where() -> None:
    with pytest.raises(ValueError, match="Expecting"):
        SwarmAnswers().nodes_json([b'[{"ID":"n1","Version":{"Index":1}},', b'{"ID":'])
