"""Count the planner files a snapshot visits through plan(): distinct files, and returns to a file already left.

Run from the repository root: `.venv/bin/python scripts/plan_walk.py` (the unit tests' factories build the world).
The walk is the sequence of planner source files (services/autoscaling/src/warmswarm_autoscaling/**) entered by
call events under sys.setprofile, consecutive repeats collapsed; a return is an entry into a file that the walk had
already left once. Files outside the package (models, the standard library) are not steps of the walk.
--plan-only: only plan/'s files, comprehension and lambda frames left out (the decisions, not the value types).
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "services/autoscaling/src/warmswarm_autoscaling"
sys.path.insert(0, str(ROOT))

from warmswarm_autoscaling.plan import plan  # noqa: E402
from warmswarm_autoscaling.snapshot import Carried  # noqa: E402
from warmswarm_models import (  # noqa: E402
    BUFFER_KIND_HOT,
    INSTANCE_BUFFER_KIND_TAG,
    INSTANCE_BUFFER_TAG,
)
from warmswarm_models.reservation import Reservation, ReservedSize  # noqa: E402

from tests.unit.factories import (  # noqa: E402
    ALICE_N1,
    NOW,
    ZONE_A,
    ZONE_B,
    cached_task,
    instance,
    make_policy,
    node_of,
    snapshot,
)


def world() -> tuple[Any, Any]:
    """Hot and warm buffers sized by demand, a reservation filling, a cached session to claim a machine."""
    policy = make_policy(
        buffer_sizing="demand",
        hot_buffer={"t3.medium": 2},
        warm_buffer={"t3.medium": 2},
        availability_zones=(ZONE_A, ZONE_B),
        buffer_refill_s=60.0,
        reservation_lead_margin=2.0,
    )
    hot = instance("i-h1", tags={INSTANCE_BUFFER_TAG: "true", INSTANCE_BUFFER_KIND_TAG: BUFFER_KIND_HOT})
    warm = instance("i-w1", state="stopped", tags={INSTANCE_BUFFER_TAG: "true"})
    warm_node = dataclasses.replace(node_of(warm, labelled=False), state="down")
    machines = (hot, warm)
    reserved = Reservation(
        id="resv-000000000001",
        group="class-7b",
        sessions=3,
        resources=ReservedSize(cpus=0.5, memory_bytes=2**28),
        at=NOW + 60,
        zone=ZONE_A,
        created_at=NOW - 600,
    )
    arrivals = {"i-gone": ("t3.medium", ZONE_A, NOW - 120.0)}
    base = snapshot(
        instances=machines,
        nodes=(node_of(hot, labelled=False), warm_node),
        tasks=(cached_task("t1", ALICE_N1, cpus=0.5, memory_gib=0.5),),
        carried=Carried(arrivals=arrivals),
    )
    return dataclasses.replace(base, reservations=(reserved,)), policy


def walk(*, plan_only: bool) -> list[str]:
    snap, policy = world()
    files: list[str] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if plan_only and (not path.is_relative_to(PACKAGE / "plan") or frame.f_code.co_name.startswith("<")):
            return
        if path.is_relative_to(PACKAGE) and (not files or files[-1] != str(path)):
            files.append(str(path))

    sys.setprofile(profile)
    try:
        result = plan(snap, policy)
    finally:
        sys.setprofile(None)
    assert result.actions, "the world should make the planner act"
    return [str(Path(f).relative_to(PACKAGE)) for f in files]


def main() -> None:
    steps = walk(plan_only="--plan-only" in sys.argv)
    left: set[str] = set()
    returns = 0
    for before, step in itertools.pairwise(steps):
        left.add(before)
        if step in left:
            returns += 1
    verbose = "-v" in sys.argv
    if verbose:
        print(" -> ".join(steps))
    print(f"files: {len(set(steps))}  returns: {returns}  steps: {len(steps)}")


if __name__ == "__main__":
    main()
