"""The sandbox's volume folders are disks: one listing that misses a volume never removes its folder."""

from __future__ import annotations

from pathlib import Path

from warmswarm_sandbox.boot_watcher_volumes import VolumeSync
from warmswarm_sandbox.layout import Layout


def _sync_with_folder(tmp_path: Path) -> tuple[VolumeSync, Path]:
    layout = Layout(tmp_path, subnet=250)
    folder = layout.volume_dir("vol-0abc")
    folder.mkdir(parents=True)
    (folder / "f").write_text("start\n")
    return VolumeSync(layout, attach_s=0.0, ec2=None), folder


def test_a_volume_missing_from_one_listing_keeps_its_folder(tmp_path: Path) -> None:
    sync, folder = _sync_with_folder(tmp_path)
    sync._remove_deleted(set(), now_s=100.0)  # one listing without it
    sync._remove_deleted(set(), now_s=100.5)
    sync._remove_deleted({"vol-0abc"}, now_s=101.0)  # listed again: the count starts over
    sync._remove_deleted(set(), now_s=110.0)
    sync._remove_deleted(set(), now_s=110.2)
    assert (folder / "f").read_text() == "start\n"


def test_a_deleted_volume_s_folder_goes_after_several_listings_over_a_few_seconds(tmp_path: Path) -> None:
    sync, folder = _sync_with_folder(tmp_path)
    for now_s in (100.0, 100.2, 100.4):
        sync._remove_deleted(set(), now_s=now_s)
    assert folder.exists(), "three listings within half a second are not enough"
    sync._remove_deleted(set(), now_s=102.5)
    assert not folder.exists()
