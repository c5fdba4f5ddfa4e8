"""The demo's act 5 reads a recycle's steps from what EC2 and the swarm show: a step missed between two looks is still
narrated, in order, and none before the machine shows it; `--acts` picks the acts played."""

from __future__ import annotations

import pytest
from warmswarm_demos.act_recycle import Seen, newly_reached, recycle_steps
from warmswarm_demos.demo import ACTS, chosen_acts

VOLUME = "vol-ada"
OWNED = {"user_id": "ada", "project_id": "assay", "node_id": "n5a", "warmswarm:recycle": "true"}
STEPS = recycle_steps(VOLUME, generation=1)
# The mark's scrub token <n>.<t>: generation 1, marked at that epoch second.
TOKEN = "1.1765000000"


def marks(seen: Seen, marked: set[str] | None = None) -> list[str]:
    return [step.mark for step in newly_reached(STEPS, marked or set(), seen)]


def test_her_running_machine_shows_no_step_of_a_recycle() -> None:
    assert marks(Seen("running", OWNED, frozenset({VOLUME}), None)) == []


def test_the_mark_and_the_stop_of_one_action_show_in_one_look() -> None:
    seen = Seen("stopped", {**OWNED, "warmswarm:scrub": f"pending-{TOKEN}"}, frozenset({VOLUME}), None)
    assert marks(seen) == ["recycle-marked", "recycle-stopped"]


def test_a_stop_missed_between_two_looks_is_narrated_before_the_step_that_showed() -> None:
    # Seen last as marked; now running again, stripped, for its scrub: the stop, the detach and the strip came and
    # (the stop) went between the two looks.
    stripped = {"warmswarm:scrub": f"pending-{TOKEN}", "warmswarm:buffer": "true", "warmswarm:recycled": "1"}
    seen = Seen("running", stripped, frozenset(), None)
    assert marks(seen, {"recycle-marked"}) == [
        "recycle-stopped",
        "recycle-detached",
        "recycle-stripped",
        "recycle-booted",
    ]


def test_the_scrub_boot_is_a_stripped_machine_running_again_and_the_proof_is_its_own_generations() -> None:
    stripped = {"warmswarm:scrub": f"pending-{TOKEN}", "warmswarm:buffer": "true", "warmswarm:recycled": "1"}
    before = {"recycle-marked", "recycle-stopped", "recycle-detached", "recycle-stripped"}
    assert marks(Seen("running", stripped, frozenset(), None), before) == ["recycle-booted"]
    assert marks(Seen("running", stripped, frozenset(), "0"), before) == ["recycle-booted"]
    # A proof of the same generation marked at another moment (a stale proof) is no proof of this mark.
    assert marks(Seen("running", stripped, frozenset(), "1.1700000000"), before) == ["recycle-booted"]
    assert marks(Seen("running", stripped, frozenset(), TOKEN), before) == ["recycle-booted", "recycle-proven"]


def test_the_machine_is_in_the_buffer_once_marked_scrubbed_running_and_nobodys() -> None:
    done = {"warmswarm:scrub": f"done-{TOKEN}", "warmswarm:buffer": "true", "warmswarm:recycled": "1"}
    assert marks(Seen("running", done, frozenset(), TOKEN))[-1] == "recycle-offered"
    assert "recycle-offered" not in marks(Seen("running", {**done, "user_id": "ben"}, frozenset(), TOKEN))


def test_acts_picks_the_acts_in_the_demos_order_and_refuses_one_it_has_not() -> None:
    assert chosen_acts([]) == ACTS == (1, 2, 3, 4, 5)
    assert chosen_acts(["--acts", "5"]) == (5,)
    assert chosen_acts(["--acts", "5,3"]) == (3, 5)
    for wrong in ("6", "five", ""):
        with pytest.raises(SystemExit):
            chosen_acts(["--acts", wrong])
