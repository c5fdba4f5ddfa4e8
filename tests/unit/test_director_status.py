"""The director's pure status decisions: which task speaks for a service; pending, starting or running, and why."""

from __future__ import annotations

from warmswarm_director.status import (
    AutoscalerView,
    TaskView,
    Waiting,
    current_task,
    needs_autoscaler,
    running_status,
    waiting_status,
)
from warmswarm_models import ENGINE_LABEL_INSTANCE_ID, NODE_LABEL_INSTANCE_ID, NODE_LABEL_VOLUME_ID

SERVICE = "ws-n1"
NO_AUTOSCALER = AutoscalerView(enabled=False)
NO_SUITABLE_NODE = "no suitable node (scheduling constraints not satisfied on 1 node)"


def task(
    state: str = "pending",
    *,
    task_id: str = "t1",
    node_id: str | None = None,
    err: str | None = None,
    created_at: str = "2026-01-01T00:00:00Z",
) -> TaskView:
    return TaskView(task_id, state, node_id, err, None, created_at)


def test_a_running_task_speaks_for_the_service_over_newer_ones() -> None:
    running = task("running", task_id="old", node_id="nodeA", created_at="2026-01-01T00:00:00Z")
    newer = task("pending", task_id="new", created_at="2026-01-02T00:00:00Z")

    assert current_task([newer, running]) == running


def test_a_task_on_a_node_speaks_before_a_waiting_one() -> None:
    preparing = task("preparing", task_id="a", node_id="nodeA", created_at="2026-01-01T00:00:00Z")
    waiting = task("pending", task_id="b", created_at="2026-01-02T00:00:00Z")

    assert current_task([waiting, preparing]) == preparing


def test_otherwise_the_newest_task() -> None:
    old = task(task_id="old", created_at="2026-01-01T00:00:00Z")
    new = task(task_id="new", created_at="2026-01-02T00:00:00Z")

    assert current_task([old, new]) == new
    assert current_task([]) is None


def test_running_reports_node_instance_and_volume_from_the_node_labels() -> None:
    labels = {NODE_LABEL_INSTANCE_ID: "i-0abc", NODE_LABEL_VOLUME_ID: "vol-0def"}

    status = running_status(task("running", node_id="nodeA"), labels, {}, cache_enabled=True)

    assert (status.state, status.node, status.instance_id, status.volume_id) == (
        "running",
        "nodeA",
        "i-0abc",
        "vol-0def",
    )
    assert status.reason is None


def test_running_without_cache_reports_no_volume_even_if_the_node_has_one() -> None:
    labels = {NODE_LABEL_INSTANCE_ID: "i-0abc", NODE_LABEL_VOLUME_ID: "vol-0def"}

    status = running_status(task("running", node_id="nodeA"), labels, {}, cache_enabled=False)

    assert status.volume_id is None


def test_running_on_a_node_not_yet_labelled_takes_the_instance_id_from_its_daemon() -> None:
    status = running_status(
        task("running", node_id="nodeA"), {}, {ENGINE_LABEL_INSTANCE_ID: "i-0abc"}, cache_enabled=True
    )

    assert status.instance_id == "i-0abc"
    assert status.volume_id is None


def test_a_task_preparing_on_a_node_is_starting_there() -> None:
    status = waiting_status(task("preparing", node_id="nodeA"), SERVICE, NO_AUTOSCALER)

    assert status.state == "starting"
    assert status.node == "nodeA"
    assert "preparing" in (status.reason or "")


def test_a_task_the_autoscaler_is_booting_a_machine_for_is_starting() -> None:
    view = AutoscalerView(enabled=True, waiting=[Waiting("t1", SERVICE, "instance i-1 is booting", starting=True)])

    status = waiting_status(task(err=NO_SUITABLE_NODE), SERVICE, view)

    assert (status.state, status.reason) == ("starting", "instance i-1 is booting")


def test_a_pending_task_gets_the_autoscalers_reason_over_the_swarms() -> None:
    view = AutoscalerView(enabled=True, waiting=[Waiting("t1", SERVICE, "no allowed instance type fits", False)])

    status = waiting_status(task(err=NO_SUITABLE_NODE), SERVICE, view)

    assert (status.state, status.reason) == ("pending", "no allowed instance type fits")


def test_the_autoscalers_entry_is_found_by_service_name_when_the_task_was_replaced() -> None:
    view = AutoscalerView(enabled=True, waiting=[Waiting("older-task", SERVICE, "launching m5.large", False)])

    assert waiting_status(task(task_id="t2"), SERVICE, view).reason == "launching m5.large"


def test_another_services_entry_is_not_this_ones() -> None:
    view = AutoscalerView(enabled=True, waiting=[Waiting("t9", "ws-other", "launching m5.large", True)])

    status = waiting_status(task(err=NO_SUITABLE_NODE), SERVICE, view)

    assert (status.state, status.reason) == ("pending", NO_SUITABLE_NODE)


def test_an_unreachable_autoscaler_is_named_in_the_reason_with_the_swarms_own() -> None:
    view = AutoscalerView(enabled=True, problem="the autoscaler at http://127.0.0.1:1 is unreachable")

    status = waiting_status(task(err=NO_SUITABLE_NODE), SERVICE, view)

    assert status.state == "pending"
    assert "unreachable" in (status.reason or "")
    assert NO_SUITABLE_NODE in (status.reason or "")


def test_without_an_autoscaler_the_swarms_reason_is_given() -> None:
    assert waiting_status(task(err=NO_SUITABLE_NODE), SERVICE, NO_AUTOSCALER).reason == NO_SUITABLE_NODE


def test_a_service_without_a_task_yet_is_pending_and_says_so() -> None:
    status = waiting_status(None, SERVICE, NO_AUTOSCALER)

    assert status.state == "pending"
    assert "not created a task" in (status.reason or "")


def test_only_tasks_without_a_node_need_the_autoscaler() -> None:
    assert needs_autoscaler(None)
    assert needs_autoscaler(task("pending"))
    assert not needs_autoscaler(task("running", node_id="nodeA"))
    assert not needs_autoscaler(task("starting", node_id="nodeA"))
