"""The sandbox's decision to grow a volume's file: EC2's size, once its modification is usable, never smaller."""

from __future__ import annotations

from warmswarm_sandbox.boot_watcher_growth import grown_bytes, smaller_than_ec2
from warmswarm_sandbox.disks import GIB


def test_a_file_grows_to_ec2_s_size_from_optimizing_on() -> None:
    assert grown_bytes(2, GIB, "optimizing") == 2 * GIB
    assert grown_bytes(2, GIB, "completed") == 2 * GIB


def test_a_file_waits_while_the_modification_is_modifying_or_unknown() -> None:
    assert grown_bytes(2, GIB, "modifying") is None
    assert grown_bytes(2, GIB, None) is None
    assert grown_bytes(2, GIB, "failed") is None


def test_a_file_never_shrinks_nor_grows_to_its_own_size() -> None:
    assert grown_bytes(1, 2 * GIB, "completed") is None
    assert grown_bytes(2, 2 * GIB, "completed") is None


def test_only_files_smaller_than_ec2_s_size_are_asked_about() -> None:
    sizes_gib = {"vol-1": 2, "vol-2": 1, "vol-3": 4}
    assert smaller_than_ec2(sizes_gib, {"vol-1": GIB, "vol-2": GIB}) == ["vol-1"]  # vol-3: no file yet
