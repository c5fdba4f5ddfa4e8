"""The one place a Reconciler is assembled, from the settings and the ports: production, tests, simulator, benchmarks.

A new setting reaches the loop through here and nowhere else; whoever runs the autoscaler (main.py with the real
adapters, the simulator with its modelled AWS, a test with fakes) differs only in the ports and the clock it gives.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from warmswarm_autoscaling.metrics import Metrics
from warmswarm_autoscaling.observe import InstanceCatalogue
from warmswarm_autoscaling.ports import Ec2, ReservationStore, Swarm
from warmswarm_autoscaling.reconciler import LoopTiming, Reconciler
from warmswarm_autoscaling.requests import LaunchTemplate
from warmswarm_autoscaling.settings import AutoscalingSettings


def build_reconciler(
    settings: AutoscalingSettings,
    *,
    swarm: Swarm,
    ec2: Ec2,
    clock: Callable[[], float] = time.time,
    lease_valid: Callable[[], bool] = lambda: True,
    max_plan_age_s: float = float("inf"),
    metrics: Metrics | None = None,
    reservations: ReservationStore | None = None,
    first_cycle_scope: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Reconciler:
    """The reconcile loop over `swarm` and `ec2`, deciding by `settings`, on `clock` (epoch s).

    `lease_valid` is asked right before each mutating call (one replica, no election: always valid); a plan decided
    from a world older than `max_plan_age_s` is not applied (main.py passes the lease's safety margin). `metrics`: a
    registry of the caller's; the loop makes its own otherwise. `reservations`: ops' reservations for known bursts
    (main.py: the autoscaler's Redis); None: none are kept, and the API's reservation routes answer 503.
    `first_cycle_scope`: what the first cycle runs inside (Reconciler).
    """
    policy = settings.policy()
    template = LaunchTemplate(
        cluster=settings.cluster,
        image_id=settings.image_id,
        subnet_ids=dict(settings.subnet_ids),
        security_group_ids=tuple(settings.security_group_ids),
        iam_instance_profile=settings.iam_instance_profile,
        key_name=settings.key_name,
        node_join_addr=settings.node_join_addr,
        node_cache_path=settings.node_cache_path,
        device_wait_s=settings.device_wait_s,
        cache_fill_period_s=settings.cache_fill_period_s,
        buffer_images=tuple(settings.buffer_images),
        launch_settings=settings.launch_settings_digest(),
    )
    timing = LoopTiming(
        resync_interval_s=settings.resync_interval_s,
        busy_resync_interval_s=settings.busy_resync_interval_s,
        debounce_s=settings.debounce_s,
        failure_backoff_s=settings.failure_backoff_s,
    )
    catalogue = InstanceCatalogue(ec2, policy.allowed_instance_types, settings.instance_types_ttl_s)
    return Reconciler(
        swarm,
        ec2,
        policy,
        template,
        catalogue,
        timing,
        clock,
        dry_run=settings.dry_run,
        lease_valid=lease_valid,
        max_plan_age_s=max_plan_age_s,
        metrics=metrics,
        reservations=reservations,
        full_listing_interval_s=settings.ec2_full_listing_interval_s,
        first_cycle_scope=first_cycle_scope,
    )
