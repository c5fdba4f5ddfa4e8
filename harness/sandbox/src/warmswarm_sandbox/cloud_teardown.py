"""A sandbox's teardown: whether anything it started still runs, and stopping it all and removing its files."""

from __future__ import annotations

import contextlib
from pathlib import Path

from warmswarm_sandbox import host, layout, node, procs
from warmswarm_sandbox.boot_watcher import node_records
from warmswarm_sandbox.layout import Layout

SPAWNED_STOP_GRACE_S = 5.0


def anything_running(lay: Layout) -> bool:
    """True while any process or machine the sandbox in `lay` started is alive."""
    if any(procs.is_alive(p) for p in layout.recorded_procs(lay.procs_dir).values()):
        return True
    machines = [*node_records(lay).values(), *_manager_record(lay)]
    return any(m.is_powered_on() for m in machines)


def tear_down(lay: Layout, state_dir: Path) -> None:
    """Stop every process and machine of the sandbox in `lay` and remove what it wrote; safe to repeat."""
    recorded = layout.recorded_procs(lay.procs_dir)
    # First whatever could still create machines (the boot watcher, services), then the
    # machines, then what they talk to.
    for name, proc in recorded.items():
        if name not in ("moto", "redis"):
            procs.terminate(proc, grace_s=SPAWNED_STOP_GRACE_S)
    for machine in [*node_records(lay).values(), *_manager_record(lay)]:
        node.power_off(machine)
    host.delete_netns(lay.hub_netns)
    # Before their backing files go: a file removed while bound would hold its blocks until the device is released.
    layout.release_disks(lay, lay.run_dir)
    for name in ("redis", "moto"):
        if name in recorded:
            procs.terminate(recorded[name], grace_s=SPAWNED_STOP_GRACE_S)
    # A machine powered on by a watcher that died before recording it still names our run dir.
    # The subnet may have been reclaimed by another sandbox meanwhile: never clear theirs.
    if layout.claimed_by(lay.subnet) == state_dir.resolve():
        layout.clear_run_dir(lay.subnet)
    for entry in lay.owned_entries():
        if entry.is_dir():
            host.remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)
    # Left in place when it holds files that are not ours.
    with contextlib.suppress(OSError):
        state_dir.rmdir()


def _manager_record(lay: Layout) -> list[node.NodeRecord]:
    path = lay.manager_dir / "node.json"
    return [node.NodeRecord.load(path)] if path.exists() else []
