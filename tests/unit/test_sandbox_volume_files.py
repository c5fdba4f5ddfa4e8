"""The sandbox's volume files are disks: one listing that misses a volume never removes its file."""

from __future__ import annotations

from pathlib import Path

from warmswarm_sandbox.boot_watcher_volumes import VolumeSync
from warmswarm_sandbox.layout import Layout


def _sync_with_volume(tmp_path: Path) -> tuple[VolumeSync, Path]:
    layout = Layout(tmp_path, subnet=250)
    backing = layout.volume_file("vol-0abc")
    backing.parent.mkdir(parents=True)
    backing.write_bytes(b"start\n")  # bound to no loop device: only the listings decide
    return VolumeSync(layout, attach_s=0.0, ec2=None), backing


def test_a_volume_missing_from_one_listing_keeps_its_file(tmp_path: Path) -> None:
    sync, backing = _sync_with_volume(tmp_path)
    sync._remove_deleted(set(), now_s=100.0)  # one listing without it
    sync._remove_deleted(set(), now_s=100.5)
    sync._remove_deleted({"vol-0abc"}, now_s=101.0)  # listed again: the count starts over
    sync._remove_deleted(set(), now_s=110.0)
    sync._remove_deleted(set(), now_s=110.2)
    assert backing.read_bytes() == b"start\n"


def test_a_deleted_volume_s_file_goes_after_several_listings_over_a_few_seconds(tmp_path: Path) -> None:
    sync, backing = _sync_with_volume(tmp_path)
    for now_s in (100.0, 100.2, 100.4):
        sync._remove_deleted(set(), now_s=now_s)
    assert backing.exists(), "three listings within half a second are not enough"
    sync._remove_deleted(set(), now_s=102.5)
    assert not backing.exists()
