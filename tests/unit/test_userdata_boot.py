"""The rendered user data run on a fake root disk: the per-boot units it installs (the scrub before the cache, both
required by Docker), the scripts and configs they run, and EC2's size limit on user data.

systemctl, udevadm and docker are stand-ins on PATH that record what they are asked; the rest is real sh.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import subprocess
import tomllib
from importlib import resources
from pathlib import Path

from warmswarm_autoscaling.ports import JoinInfo
from warmswarm_autoscaling.userdata import BOOT_SCRIPTS, USER_DATA_LIMIT_BYTES, render_user_data

from .late_metadata import late_metadata_service

JOIN = JoinInfo(manager_addr="10.1.2.3:2377", worker_token="SWMTKN-1-abc-def")
PACKAGE = resources.files("warmswarm_autoscaling")


def first_boot(tmp_path: Path, *, imds_url: str | None = None) -> tuple[Path, list[str]]:
    """The user data run once with the sandbox's variables (its root disk in tmp_path/root); with `imds_url`, its
    instance id from that metadata service as on EC2. The root and what systemctl was asked, in order."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name in ("systemctl", "udevadm", "docker"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    script = tmp_path / "user-data"
    script.write_text(render_user_data(JOIN, cache_path="/srv/warm-cache", device_wait_s=5))
    root = tmp_path / "root"
    sandbox_env = {
        "WARMSWARM_INSTANCE_ID": "i-0abc",
        "WARMSWARM_VOLUME_TAG_FILE": str(tmp_path / "no-volume-tag"),
        "WARMSWARM_SCRUB_TAG_FILE": str(tmp_path / "scrub-tag"),
        "WARMSWARM_RUN_DIR": str(tmp_path / "run"),
        "WARMSWARM_DOCKER_UNIT_SHOW": f"cat {tmp_path / 'docker.service.show'}",
    }
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "WARMSWARM_NODE_ROOT": str(root),
        **sandbox_env,
    }
    if imds_url is not None:
        del env["WARMSWARM_INSTANCE_ID"]
        env["WARMSWARM_IMDS_URL"] = imds_url
    done = subprocess.run(["/bin/sh", str(script)], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    return root, [line for line in calls.read_text().splitlines() if line.startswith("systemctl ")]


def unit_lines(root: Path, unit: str) -> list[str]:
    return (root / "etc" / "systemd" / "system" / unit).read_text().splitlines()


def test_the_scrub_unit_runs_before_docker_and_the_cache_and_is_enabled_first(tmp_path: Path) -> None:
    root, systemctl = first_boot(tmp_path)

    scrub = unit_lines(root, "warmswarm-scrub.service")
    assert "Before=docker.service warmswarm-cache.service" in scrub
    assert "RequiredBy=docker.service" in scrub
    assert "Type=oneshot" in scrub
    etc = root / "etc" / "warmswarm"
    assert f"ExecStart=/bin/sh {etc}/node_scrub.sh {etc}/scrub.conf" in scrub
    assert "RequiredBy=docker.service" in unit_lines(root, "warmswarm-cache.service")
    # Enabled in this order: the sandbox's init runs the units Docker requires as enabled, systemd by Before=.
    enabled = [call.split()[-1] for call in systemctl if call.startswith("systemctl enable")]
    assert enabled == ["warmswarm-scrub.service", "warmswarm-cache.service", "warmswarm-cache-fill.timer"]
    # The first boot has nothing to scrub: the user data does not run the scrub (no proof label appears).
    assert "warmswarm.scrubbed" not in (root / "etc" / "docker" / "daemon.json").read_text()


def test_the_scrub_and_cache_units_wait_for_the_network(tmp_path: Path) -> None:
    """Both read the instance's tags from the metadata service: before the network is up it cannot answer."""
    root, _ = first_boot(tmp_path)

    for unit in ("warmswarm-scrub.service", "warmswarm-cache.service"):
        lines = unit_lines(root, unit)
        assert "After=network-online.target" in lines, unit
        assert "Wants=network-online.target" in lines, unit


def test_the_scrub_config_names_dockers_unit_the_cache_the_tag_answer_and_a_per_boot_run_dir(tmp_path: Path) -> None:
    root, _ = first_boot(tmp_path)

    config = (root / "etc" / "warmswarm" / "scrub.conf").read_text().splitlines()
    assert config == [
        f"node_root='{root}'",
        "cache_path='/srv/warm-cache'",
        f"daemon_json='{root / 'etc' / 'docker' / 'daemon.json'}'",
        f"scrub_tag_file='{tmp_path / 'scrub-tag'}'",
        f"cache_conf='{root / 'etc' / 'warmswarm' / 'cache.conf'}'",
        f"run_dir='{tmp_path / 'run' / 'warmswarm'}'",
        "imds_url='http://169.254.169.254'",
        "imds_wait_s=60",
        f"docker_unit_show='cat {tmp_path / 'docker.service.show'}'",
    ]
    assert not any(line.startswith("data_root=") for line in config), "the data root is Docker's to say"


def test_on_ec2_the_scrub_asks_systemd_for_dockers_unit_keeps_its_marker_in_run_and_asks_the_metadata_service() -> None:
    script = render_user_data(JOIN, cache_path="/srv/warm-cache")
    # Rendered for EC2: no sandbox variable is set there, so the defaults hold.
    show = "systemctl show -p ExecStart -p Environment -p EnvironmentFiles docker.service"
    assert f"docker_unit_show='${{WARMSWARM_DOCKER_UNIT_SHOW:-{show}}}'" in script
    assert "run_dir='${WARMSWARM_RUN_DIR:-/run}/warmswarm'" in script
    assert "scrub_tag_file='${WARMSWARM_SCRUB_TAG_FILE:-}'" in script
    assert 'imds_url="${WARMSWARM_IMDS_URL:-http://169.254.169.254}"' in script
    assert "/var/lib/docker" not in script


def test_a_late_metadata_service_still_gives_the_boot_its_instance_id(tmp_path: Path) -> None:
    with late_metadata_service({"instance-id": "i-0123456789abcdef0"}) as imds:
        root, _ = first_boot(tmp_path, imds_url=imds.url)

    assert imds.hung.is_set()
    cache_conf = (root / "etc" / "warmswarm" / "cache.conf").read_text().splitlines()
    assert "instance_id='i-0123456789abcdef0'" in cache_conf
    assert f"imds_url='{imds.url}'" in cache_conf
    assert f"imds_url='{imds.url}'" in (root / "etc" / "warmswarm" / "scrub.conf").read_text().splitlines()


def test_the_installed_scrub_is_the_packages_without_its_comment_lines(tmp_path: Path) -> None:
    root, _ = first_boot(tmp_path)

    installed = (root / "etc" / "warmswarm" / "node_scrub.sh").read_text().splitlines()
    source = PACKAGE.joinpath("node_scrub.sh").read_text().splitlines()
    assert installed == [line for line in source if not line.lstrip().startswith("#") or line.startswith("#!")]
    assert subprocess.run(["sh", "-n", str(root / "etc" / "warmswarm" / "node_scrub.sh")], check=False).returncode == 0
    # The cache script likewise, byte for byte but its comments.
    cache = (root / "etc" / "warmswarm" / "node_cache.sh").read_text().splitlines()
    cache_source = PACKAGE.joinpath("node_cache.sh").read_text().splitlines()
    assert cache == [line for line in cache_source if not line.lstrip().startswith("#") or line.startswith("#!")]


def test_the_user_data_with_many_images_fits_ec2s_limit() -> None:
    images = tuple(f"registry.example.com:5000/group/image-{n}:1.2.3" for n in range(10))
    script = render_user_data(JOIN, volume_id="vol-0123456789abcdef0", cache_path="/srv/warm-cache", pull_images=images)

    assert len(script.encode()) <= USER_DATA_LIMIT_BYTES
    # What is left for a future boot step, reported so a change that eats it shows in review.
    print(f"user data {len(script.encode())} bytes of {USER_DATA_LIMIT_BYTES}")


def test_the_cache_fill_runs_on_a_timer_and_on_a_grown_disk_and_docker_never_requires_it(tmp_path: Path) -> None:
    root, systemctl = first_boot(tmp_path)

    assert "systemctl enable --now warmswarm-cache-fill.timer" in systemctl
    timer = unit_lines(root, "warmswarm-cache-fill.timer")
    assert {"OnBootSec=10s", "OnUnitActiveSec=10s", "WantedBy=timers.target"} <= set(timer)
    fill = unit_lines(root, "warmswarm-cache-fill.service")
    etc = root / "etc" / "warmswarm"
    assert f"ExecStart=/bin/sh {etc}/node_cache_fill.sh {etc}/cache.conf" in fill
    # A failing fill run must not stop Docker: nothing requires it.
    assert not any(line.startswith(("RequiredBy=", "WantedBy=")) for line in fill)
    rule = (root / "etc" / "udev" / "rules.d" / "91-warmswarm-cache-fill.rules").read_text()
    assert 'ACTION=="change"' in rule
    assert 'RUN+="/usr/bin/systemctl --no-block start warmswarm-cache-fill.service"' in rule
    installed = (etc / "node_cache_fill.sh").read_text().splitlines()
    source = PACKAGE.joinpath("node_cache_fill.sh").read_text().splitlines()
    assert installed == [line for line in source if not line.lstrip().startswith("#") or line.startswith("#!")]


def test_the_cache_fill_period_is_the_settings(tmp_path: Path) -> None:
    script = render_user_data(JOIN, cache_fill_period_s=3)

    assert "OnUnitActiveSec=3s" in script
    assert "OnBootSec=3s" in script


def test_every_boot_script_ships_in_the_autoscalers_package() -> None:
    """The image installs the package, not the checkout: a script the package data leaves out is missing there, and
    the autoscaler cannot even digest its launch settings (node_cache_fill.sh was, and the stack never came up)."""
    pyproject = Path(__file__).resolve().parents[2] / "services" / "autoscaling" / "pyproject.toml"
    patterns = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["warmswarm_autoscaling"]
    for script in BOOT_SCRIPTS:
        assert any(fnmatch.fnmatchcase(script, pattern) for pattern in patterns), script
