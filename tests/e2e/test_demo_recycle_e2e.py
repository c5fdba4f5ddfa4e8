"""End to end: `make demo`'s act 5, played alone by the demo's own code in the shared sandbox: ada's idle machine is
recycled step by step and serves ben of her group (the same instance, none of her files on its disk), while cyd, one
of whose groups refuses recycled machines, gets a fresh one; a step that never comes or a machine given to the wrong
owner fails the test as it fails the demo."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from warmswarm_demos.demo import Cast, acts
from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_models import CLUSTER_TAG
from warmswarm_sandbox.cloud import Sandbox

# Played by default: 71 s at load 12 on the 2 shared cores (its second replica starts while the machine recycles; a
# restart between them made it 95 s), about 50 s on a quieter machine, on the worker the demo's other acts do not
# hold. The mechanics are test_recycle_e2e.py's; this file keeps the demo's act (its narration, its checks, a user in
# a refusing group and a recycling one) from rotting. It always plays: WARMSWARM_TEST_DEMO_ACTS chooses the acts of
# test_demo_acts_e2e.py only.
pytestmark = pytest.mark.e2e

CAST = Cast(
    cluster="demo-recycle-e2e",
    suffix=f"-{uuid.uuid4().hex[:6]}",
    acts=(5,),
    # The recycle e2e's pace: an idle machine is recycled 2 s after its session ends (the demo waits 5 s).
    settings={"AUTOSCALING_IDLE_GRACE_S": "2"},
)
# What the act says when each of its steps came as narrated; each line is said only after the act checked it.
SAID = [
    "director's start path: hot_claim (as expected)",
    "marked for its recycle (warmswarm:scrub=pending-1.<t>)",
    "stopped: the OS unmounts her cache volume",
    "detached while stopped",
    "stripped: her labels and tags off, the hot buffer's tag on",
    "started for its scrub",
    "its node proves the scrub (engine label warmswarm.scrubbed=1.<t>, the mark's token)",
    "marked scrubbed (warmswarm:scrub=done-1.<t>): in the hot buffer",
    "audit warmswarm:served-owners='ada",
    "no file; her note stays on her own volume",
    "cyd: director's start path: cold_launch (as expected)",
    "never recycled (no warmswarm:recycled tag), and not to be recycled either",
    "ben: director's start path: hot_claim (as expected)",
    "ben's session runs on the SAME machine",
    "the host finds ada's note nowhere",
    "act 5: recycled machines",
]


@pytest.fixture
def cleaned(ec2: Any) -> Iterator[None]:
    # The act's services stop with it; its machines are the sandbox's until it stops: end them here, so that later
    # tests do not share the machine with them.
    yield
    filters = [{"Name": f"tag:{CLUSTER_TAG}", "Values": [CAST.recycle_cluster]}]
    ids = [i["InstanceId"] for r in ec2.describe_instances(Filters=filters)["Reservations"] for i in r["Instances"]]
    if ids:
        ec2.terminate_instances(InstanceIds=ids)


async def test_act_5_recycles_a_machine_to_the_next_owner_of_its_group_and_a_refusing_user_gets_a_fresh_one(
    sandbox: Sandbox, cleaned: None, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    try:
        await acts(sandbox, Narrator(), CAST)
    except (DemoFailure, TimeoutError) as failure:
        # The session's sandbox (and its logs) is removed after the run: keep the machines' logs for the diagnosis.
        kept = shutil.copytree(
            sandbox.state_dir / "logs", tempfile.mkdtemp(prefix="wsdemo-e2e-logs-"), dirs_exist_ok=True
        )
        raise DemoFailure(f"{failure}; the sandbox's logs are kept in {kept}") from failure
    said = capsys.readouterr().out
    for line in SAID:
        assert line in said, f"act 5 did not say {line!r}:\n{said}"
    print(f"act 5 played in {time.monotonic() - started:.0f} s:\n{said}")
