"""Service names as stored facts: today's names do not drift, and old names of ids ending in punctuation are found."""

from __future__ import annotations

import pytest
from warmswarm_director.director import Director
from warmswarm_director.errors import NotFound
from warmswarm_director.placement import MANAGED_BY_DIRECTOR, MANAGED_BY_LABEL, service_name
from warmswarm_models import GroupProperties

from .director_fakes import ALICE, PLACEMENT, FakeAutoscaler, FakeGroups, FakeSwarm, legacy_name


@pytest.mark.parametrize(
    ("node_id", "name"),
    [
        ("n1", "ws-n1"),
        ("a.b.", "ws--a-b-hsl3h2qe4ls36q657s27mx2lifx5wgid"),
        ("trailing_", "ws--trailing-4ugo35xggdflxbjacdtoszrgnr5l4vn3"),
        ("v1.2.3-rc.4", "ws--v1-2-3-rc-4-ckxw2hvmeekqgiillfrkxkcgmca25tuw"),
        # The readable part is cut at 26 characters; a cut that ends on punctuation drops it.
        ("abcdefghijklmnopqrstuvwxy.z", "ws--abcdefghijklmnopqrstuvwxy-3lftnacsazxxm7vau3wxer7eyfa2e66v"),
    ],
)
def test_service_names_do_not_drift(node_id: str, name: str) -> None:
    """A service is found again by its name alone: a director that named ids differently after an upgrade would
    lose every service created before it (and create a second one next to it on a repeat)."""
    assert service_name(node_id) == name


@pytest.mark.parametrize("node_id", ["n1.gpu.", "lab_", "a" * 39 + ".b", "x.-_"])
async def test_a_service_an_earlier_director_named_is_found_for_an_id_ending_in_punctuation(node_id: str) -> None:
    """The earlier names dropped trailing '-' and '_' from their readable part; looking one up must do the same."""
    swarm, groups = FakeSwarm(), FakeGroups()
    groups.stored["lab"] = GroupProperties()
    director = Director(swarm, groups, FakeAutoscaler(), PLACEMENT)
    old = swarm.add(legacy_name(node_id), {**ALICE, "node_id": node_id, MANAGED_BY_LABEL: MANAGED_BY_DIRECTOR})

    status = await director.status(node_id)
    await director.delete_service(node_id)

    assert status.state == "pending"
    assert old.name not in swarm.services
    with pytest.raises(NotFound):
        await director.status(node_id)
