"""The sandbox's loopback ports: a port handed out is not handed out again while its caller may still bind it."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from warmswarm_sandbox.ports import HELD_S, free_port


def kernel_answers(*ports: int) -> Callable[[], int]:
    """The kernel's bind(0) answers, in turn: it may name a port again once its last holder closed it."""
    answers: Iterator[int] = iter(ports)
    return lambda: next(answers)


def test_a_port_the_kernel_names_twice_is_handed_out_once(tmp_path: Path) -> None:
    record = tmp_path / "ports.json"
    first = free_port(record=record, candidate=kernel_answers(40001), now=lambda: 1000.0)
    # Another worker asks before the first caller's service bound it: the kernel names the same port again.
    second = free_port(record=record, candidate=kernel_answers(40001, 40002), now=lambda: 1001.0)
    assert (first, second) == (40001, 40002)


def test_a_port_is_handed_out_again_once_its_hold_ran_out(tmp_path: Path) -> None:
    record = tmp_path / "ports.json"
    free_port(record=record, candidate=kernel_answers(40001), now=lambda: 1000.0)
    again = free_port(record=record, candidate=kernel_answers(40001), now=lambda: 1000.0 + HELD_S)
    assert again == 40001


def test_a_record_cut_short_is_forgotten_not_fatal(tmp_path: Path) -> None:
    record = tmp_path / "ports.json"
    record.write_text('{"40001": 10')
    assert free_port(record=record, candidate=kernel_answers(40001), now=lambda: 20.0) == 40001


def test_the_port_given_is_free_on_loopback(tmp_path: Path) -> None:
    port = free_port(record=tmp_path / "ports.json")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nobody holds it
