"""GET /metrics's body: valid text format 0.0.4 on every line, and the values of a known cycle."""

from __future__ import annotations

from warmswarm_autoscaling.metrics import CYCLE_BUCKETS_S, VOLUME_EXPIRY_GRACE_S, Metrics
from warmswarm_models import INSTANCE_WARM_UNTIL_TAG, VOLUME_PINNED_TAG, Owner, format_timestamp

from .factories import (
    ALICE,
    BOB,
    NOW,
    attachment,
    foreign_node,
    instance,
    make_policy,
    node_of,
    pending_task,
    running_task,
    volume,
)
from .fakes import Clock, FakeEc2, FakeSwarm, autoscaler, status_json
from .metrics_scrape import parse


def _zero_actions() -> dict[frozenset[tuple[str, str]], float]:
    kinds = [
        "launch",
        "launch_batch",
        "tag_instance",
        "label_node",
        "drain",
        "activate",
        "terminate",
        "stop",
        "start",
        "recycle",
        "strip_owner",
        "remove_node",
        "create_volume",
        "attach_volume",
        "detach_volume",
        "modify_volume",
        "tag_volume",
        "delete_volume",
        "expire_volume",
    ]
    return {frozenset({("action", k), ("outcome", o)}): 0 for k in kinds for o in ("ok", "error")}


def _labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


async def test_metrics_of_a_known_cycle() -> None:
    """One cycle that launches, terminates for both reasons, removes a node and fails a delete."""
    idle = instance("i-idle", ALICE, launched_at=NOW - 3600)
    late = instance("i-late", BOB, launched_at=NOW - 700)  # never joined: max_start_s is 600
    gone = instance("i-gone", ALICE)
    swarm = FakeSwarm(
        nodes=[
            foreign_node("mgr", role="manager"),
            node_of(idle, availability="drain"),  # drained earlier and still idle
            node_of(gone, state="down"),  # its instance is gone
        ],
        tasks=[
            pending_task("t-carol", Owner(user_id="carol")),
            pending_task("t-dave", Owner(user_id="dave"), constraints=["node.role==manager"]),
        ],
    )
    ec2 = FakeEc2(
        instances=[idle, late],
        volumes=[
            volume("vol-expired", released_at=NOW - 7200, expires_at=NOW - 3600),
            volume("vol-used", state="in-use", attached_to=[attachment("i-other")]),
        ],
    )
    ec2.failing["DeleteVolume"] = "VolumeInUse"
    scaler = autoscaler(swarm, ec2, policy=make_policy(idle_grace_s=0.0))

    report = await scaler.cycle()

    assert report.ok
    metrics = parse(scaler.metrics.exposition().decode())
    assert metrics.family("warmswarm_nodes") == {
        _labels(state="ready", availability="active"): 1,
        _labels(state="ready", availability="drain"): 1,
        _labels(state="down", availability="active"): 1,
    }
    assert metrics.family("warmswarm_pending_tasks") == {
        _labels(unschedulable="false"): 1,
        _labels(unschedulable="true"): 1,
    }
    assert metrics.family("warmswarm_volumes") == {_labels(state="available"): 1, _labels(state="in-use"): 1}
    # As observed, before this cycle's terminations: both machines running.
    assert metrics.family("warmswarm_machines") == {
        _labels(tier="hot"): 2,
        _labels(tier="warm"): 0,
        _labels(tier="cold"): 0,
        _labels(tier="buffer"): 0,
    }
    assert metrics.family("warmswarm_launches_total") == {
        _labels(reason="pending_work"): 1,
        _labels(reason="buffer"): 0,
        _labels(reason="hot_buffer"): 0,
    }
    assert metrics.family("warmswarm_terminations_total") == {
        _labels(reason="idle"): 1,
        _labels(reason="start_timeout"): 1,
        _labels(reason="node_down"): 0,
        _labels(reason="stopped"): 0,
        _labels(reason="warm_expired"): 0,
        _labels(reason="start_failed"): 0,
        _labels(reason="volume_missing"): 0,
        _labels(reason="outgrown"): 0,
        _labels(reason="buffer_surplus"): 0,
        _labels(reason="scrub_unproven"): 0,
        _labels(reason="stale"): 0,
    }
    expected_actions = _zero_actions()
    expected_actions[_labels(action="launch_batch", outcome="ok")] = 1
    expected_actions[_labels(action="terminate", outcome="ok")] = 2
    expected_actions[_labels(action="remove_node", outcome="ok")] = 1
    expected_actions[_labels(action="delete_volume", outcome="error")] = 1
    assert metrics.family("warmswarm_actions_total") == expected_actions
    assert metrics.family("warmswarm_aws_calls_total") == {
        _labels(operation="DescribeInstances", code="ok"): 1,
        # The listing, and the re-read of the expired volume right before its delete.
        _labels(operation="DescribeVolumes", code="ok"): 2,
        _labels(operation="DescribeInstanceTypes", code="ok"): 1,
        _labels(operation="RunInstances", code="ok"): 1,
        _labels(operation="TerminateInstances", code="ok"): 2,
        _labels(operation="DeleteVolume", code="VolumeInUse"): 1,
    }
    assert metrics.family("warmswarm_cycles_total") == {_labels(outcome="ok"): 1, _labels(outcome="error"): 0}
    assert metrics.value("warmswarm_last_success_timestamp_seconds") == NOW
    assert metrics.value("warmswarm_leader") == 1
    assert metrics.value("warmswarm_dry_run") == 0
    assert metrics.types["warmswarm_cycle_duration_seconds"] == "histogram"
    assert metrics.value("warmswarm_cycle_duration_seconds_count") == 1
    assert metrics.value("warmswarm_cycle_duration_seconds_bucket", le="+Inf") == 1
    assert metrics.value("warmswarm_cycle_duration_seconds_sum") == report.duration_s
    buckets = [metrics.value("warmswarm_cycle_duration_seconds_bucket", le=repr(b)) for b in CYCLE_BUCKETS_S]
    assert buckets == sorted(buckets), "buckets are cumulative"
    # What ran is what was counted: the fakes saw the same calls.
    assert sorted(ec2.terminated) == ["i-idle", "i-late"]
    assert swarm.removed == ["node-i-gone"]


async def test_the_gauges_the_alerts_read_of_a_known_cycle() -> None:
    """The oldest waiting task's age, the volumes the janitor should have deleted, the stopped machines and their
    cap: each from a world where a nearby value would count if the rule were off by one case."""
    mgr = foreign_node("mgr", role="manager")
    warm = {**ALICE.labels(), INSTANCE_WARM_UNTIL_TAG: format_timestamp(NOW + 600)}
    swarm = FakeSwarm(
        nodes=[mgr],
        tasks=[
            pending_task("t-old", Owner(user_id="carol"), created_at=NOW - 900),
            pending_task("t-new", Owner(user_id="dave"), created_at=NOW - 60),
            pending_task("t-unread", Owner(user_id="erin")),  # its CreatedAt unreadable: left out
            # Running for longer than any of them, on the manager: it waits for nothing.
            running_task("t-running", mgr, created_at=NOW - 5000),
        ],
    )
    grace = VOLUME_EXPIRY_GRACE_S
    ec2 = FakeEc2(
        instances=[
            instance("i-warm", ALICE, state="stopped", tags=warm),
            instance("i-stopping", BOB, state="stopping", tags=warm),
            instance("i-hot", BOB),
        ],
        volumes=[
            volume("vol-late", released_at=NOW - 7200, expires_at=NOW - grace - 1),
            volume("vol-just", released_at=NOW - 7200, expires_at=NOW - grace + 60),  # within the grace
            volume("vol-pinned", released_at=NOW - 7200, expires_at=NOW - 3600, tags={VOLUME_PINNED_TAG: "true"}),
            volume("vol-ahead", released_at=NOW - 60, expires_at=NOW + 3600),
            volume("vol-used", state="in-use", attached_to=[attachment("i-other")], expires_at=NOW - 3600),
        ],
    )
    ec2.failing["DeleteVolume"] = "VolumeInUse"  # what the alert is for: the janitor tries and fails
    scaler = autoscaler(swarm, ec2, policy=make_policy(max_stopped_instances=2))

    assert (await scaler.cycle()).ok

    metrics = parse(scaler.metrics.exposition().decode())
    assert metrics.value("warmswarm_pending_task_oldest_age_seconds") == 900
    assert metrics.value("warmswarm_volumes_past_expiry") == 1
    assert metrics.value("warmswarm_stopped_instances") == 2
    assert metrics.value("warmswarm_max_stopped_instances") == 2


async def test_nothing_waiting_is_an_age_of_zero_and_nothing_late_is_zero_volumes() -> None:
    scaler = autoscaler(FakeSwarm(tasks=[pending_task("t-unread")]), FakeEc2(volumes=[volume("vol-1")]))

    assert (await scaler.cycle()).ok

    metrics = parse(scaler.metrics.exposition().decode())
    # A task waits, but nobody knows since when: 0, not a made-up age.
    assert metrics.value("warmswarm_pending_task_oldest_age_seconds") == 0
    assert metrics.value("warmswarm_volumes_past_expiry") == 0
    assert metrics.value("warmswarm_stopped_instances") == 0


async def test_before_the_first_cycle_gauges_are_absent_and_counters_zero() -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2())

    metrics = parse(scaler.metrics.exposition().decode())

    absent = (
        "warmswarm_nodes",
        "warmswarm_pending_tasks",
        "warmswarm_volumes",
        "warmswarm_aws_calls_total",
        "warmswarm_pending_task_oldest_age_seconds",
        "warmswarm_volumes_past_expiry",
        "warmswarm_stopped_instances",
    )
    for name in absent:
        assert metrics.types[name] in ("gauge", "counter")
        assert metrics.family(name) == {}, f"{name}: unknown is not zero"
    # A setting, known without looking: the default policy's cap.
    assert metrics.value("warmswarm_max_stopped_instances") == 20
    assert set(metrics.family("warmswarm_launches_total").values()) == {0}
    assert metrics.value("warmswarm_cycle_duration_seconds_count") == 0
    assert metrics.value("warmswarm_last_success_timestamp_seconds") == 0


async def test_a_failed_observation_counts_as_an_error_cycle_and_its_aws_code() -> None:
    ec2 = FakeEc2()
    ec2.failing["DescribeInstances"] = "RequestLimitExceeded"
    scaler = autoscaler(FakeSwarm(), ec2)

    report = await scaler.cycle()

    assert not report.ok
    metrics = parse(scaler.metrics.exposition().decode())
    assert metrics.value("warmswarm_cycles_total", outcome="error") == 1
    assert metrics.value("warmswarm_cycle_duration_seconds_count") == 1
    assert metrics.value("warmswarm_aws_calls_total", operation="DescribeInstances", code="RequestLimitExceeded") == 1


async def test_label_values_stay_in_their_closed_sets() -> None:
    """A state swarm or EC2 may add later, or an error code that is really a sentence, becomes `other`."""
    swarm = FakeSwarm(nodes=[foreign_node("n1", state="rebooting", availability="paused-ish")])
    ec2 = FakeEc2(volumes=[volume("vol-1", state="optimizing")])
    ec2.call_counts[("DescribeVolumes", 'it said "no"\nthen left')] += 1
    scaler = autoscaler(swarm, ec2)
    await scaler.cycle()

    metrics = parse(scaler.metrics.exposition().decode())

    assert metrics.family("warmswarm_nodes") == {_labels(state="other", availability="other"): 1}
    assert metrics.family("warmswarm_volumes") == {_labels(state="other"): 1}
    assert metrics.value("warmswarm_aws_calls_total", operation="DescribeVolumes", code="other") == 1


async def test_the_leader_flag_is_set_through_the_autoscaler() -> None:
    scaler = autoscaler(FakeSwarm(), FakeEc2(), clock=Clock())
    assert parse(scaler.metrics.exposition().decode()).value("warmswarm_leader") == 1

    scaler.set_leader(False)

    assert not scaler.is_leader
    assert parse(scaler.metrics.exposition().decode()).value("warmswarm_leader") == 0
    assert status_json(scaler)["leader"] is False


def test_an_ec2_port_without_call_counts_exposes_no_aws_calls() -> None:
    metrics = Metrics(aws_calls=None)

    assert "warmswarm_aws_calls_total{" not in metrics.exposition().decode()


def test_the_reader_rejects_what_prometheus_rejects() -> None:
    """The reader above is what makes "every line valid" mean something: it fails on malformed bodies."""
    good = '# HELP m_total A counter.\n# TYPE m_total counter\nm_total{a="x"} 1\n'
    assert parse(good).value("m_total", a="x") == 1
    malformed = [
        good.removesuffix("\n"),  # no final line feed
        good.replace('{a="x"}', "{a=x}"),  # unquoted label value
        good.replace('{a="x"}', '{a="x\ny"}'),  # raw line feed in a label value
        good.replace(" 1\n", " one\n"),  # not a number
        good.replace("# TYPE m_total counter\n", ""),  # a sample without its TYPE
        good + 'm_total{a="x"} 2\n',  # the same series twice
        good + "# TYPE m_total counter\n",  # TYPE twice
    ]
    for body in malformed:
        try:
            parse(body)
        except AssertionError:
            continue
        raise AssertionError(f"accepted a malformed body: {body!r}")
