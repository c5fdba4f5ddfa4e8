"""The cycle collector's pause around a first cycle (warmswarm_runtime.memory), each case in a fresh process: a
freeze in the test process would keep the suite's own garbage."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import gc, json, sys
    from warmswarm_runtime.memory import collector_paused

    if sys.argv[1] == "disabled":
        gc.disable()
    frozen_before = gc.get_freeze_count()
    with collector_paused():
        enabled_inside = gc.isenabled()
        collections_before = sum(stat["collections"] for stat in gc.get_stats())
        # Long-lived values the collector tracks (lists always are): enough to run a hundred young collections at
        # Python's default threshold, were the collector on.
        made = [[n] for n in range(100_000)]
        collections_inside = sum(stat["collections"] for stat in gc.get_stats()) - collections_before
    print(json.dumps({
        "enabled_inside": enabled_inside,
        "collections_inside": collections_inside,
        "frozen": gc.get_freeze_count() - frozen_before,
        "enabled_after": gc.isenabled(),
        "made": len(made),
    }))
    """
)


def _run(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, check=True)
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_no_collection_runs_inside_and_what_it_made_is_frozen_after() -> None:
    seen = _run("enabled")
    assert seen["enabled_inside"] is False
    assert seen["collections_inside"] == 0
    assert isinstance(seen["frozen"], int)
    assert seen["frozen"] >= 100_000  # what was made inside, and more
    assert seen["enabled_after"] is True


def test_a_collector_disabled_before_stays_disabled() -> None:
    seen = _run("disabled")
    assert seen["enabled_after"] is False
