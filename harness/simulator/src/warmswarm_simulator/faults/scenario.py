"""A campaign's setup, decided by its seed: a quick world, the autoscaler's settings, owners, sessions, fault rates.

The world's timings are model.toml's kinds of steps, shortened (a boot of 20 s, not 105 s): 50-60 cycles must hold
several lifecycles (launch, join, idle, stop, resume, release, expiry) and the faults that break them, and the order
of events matters here, not their length. The settings are drawn from small sets that keep the autoscaler's clocks
(grace, start timeout, backoff, tiers, TTLs) in the same proportion to those timings as production's are to AWS's.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Any, Final

from warmswarm_autoscaling.settings import AutoscalingSettings
from warmswarm_models import GroupProperties

from warmswarm_simulator.config import EbsTiming, Ec2Timing, Model, SwarmTiming
from warmswarm_simulator.faults.kinds import NAMES, RECYCLING_KINDS
from warmswarm_simulator.platform import SESSION_IMAGE
from warmswarm_simulator.workload import Session

# A type no AWS region offers (the "unknown-type" fault puts it among the allowed types, priced like a t3.medium).
UNKNOWN_TYPE: Final = "t3.hyper"
ALLOWED_TYPES: Final = ("t3.medium", "t3.large", "m5.large")
# Per chance (a call, a cycle, a decision), at the campaign's intensity 1; each campaign turns on about half its
# enabled kinds, so most failures have few kinds to blame.
BASE_RATES: Final = {
    "capacity": 0.15,
    "throttle": 0.03,
    "state": 0.12,
    "notfound": 0.06,
    "unknown-type": 1.0,
    "idempotent": 0.08,
    "unauthorized": 0.03,
    "lost": 0.08,
    "partial": 0.35,
    "docker": 0.03,
    "clock": 0.06,
    "node": 0.08,
    "device": 0.06,
    "pull": 0.08,
    "foreign": 0.05,
    "leader": 0.05,
    # Per cycle with a machine in its scrub boot (a few cycles a recycle), and per DetachVolume.
    "scrub": 0.3,
    "detach": 0.25,
    # Per cycle with a recycled machine (a count or scrub tag on it); per cycle with a machine that owes its scrub,
    # running; per boot that owes one.
    "tags": 0.1,
    "reboot": 0.2,
    "metadata": 0.4,
}
RECYCLING_SHARE: Final = 0.7  # of campaigns whose owners' groups may recycle or accept recycled machines
# Of those, the share whose buffers leave recycling room (issue 42: in seeds 1-200 only 26 campaigns marked a machine
# and 15 proved a scrub). A machine recycles only into a free buffer place of its type and zone, and the refill fills
# every place at once when max_instances lets it: these campaigns keep two warm t3.medium, a warm t3.large (the type
# a 1.5 CPU / 5 GiB session takes) and a hot t3.medium per zone under a cap of at most 5 machines, so that places
# stay free while owners work, and let 8 machines be stopped (a recycle stops its machine).
RECYCLING_ROOM_SHARE: Final = 0.85
RECYCLING_ROOM: Final = {
    "warm_buffer": {"t3.medium": 2, "t3.large": 1},
    "hot_buffer": {"t3.medium": 1},
    "max_stopped_instances": 8,
}
RECYCLING_ROOM_MAX_INSTANCES: Final = 5
DATA_GB: Final = 0.3  # 5 s of download at the model's 60 MB/s
# A session's (CPUs, memory GiB): the first two fit a t3.medium, the third only a t3.large or an m5.large, so an
# owner who comes back with it outgrows the warm machine their smaller session left (row 29's `outgrown`).
SIZES: Final = ((0.5, 1.0), (1.0, 2.0), (1.5, 5.0))


@dataclass(frozen=True, slots=True)
class Booking:
    """A reservation the campaign makes: at cycle `made_cycle` (1: before the first), for `sessions` of `size` at
    `after_s` past that moment, in `zone` (None: any), let go `release_after_s` after it."""

    made_cycle: int
    group: str
    sessions: int
    size: tuple[float, float]  # (CPUs, memory GiB) of one session
    after_s: float
    zone: str | None
    release_after_s: int


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    cycles: int
    calm_from: int  # the first cycle with no fault: faults strike in cycles 1 .. calm_from - 1
    liveness_cycles: int  # K: by the last cycle, calm for K cycles, every owned pending task runs or says why
    model: Model
    settings: AutoscalingSettings
    groups: dict[str, GroupProperties]
    sessions: tuple[Session, ...]
    rates: dict[str, float]  # the fault kinds on in this campaign, and their rates
    notes: tuple[str, ...]  # the setup in words, for the history
    bookings: tuple[Booking, ...] = ()  # the reservations made, in the order they are made
    # The lease's safety margin (lease.py: a fifth of the lock's ttl), passed as production's main.py passes it.
    max_plan_age_s: float = float("inf")

    @property
    def busy_s(self) -> float:
        return float(self.settings.busy_resync_interval_s)

    @property
    def max_warm_ttl_s(self) -> int:
        return max((g.warm_ttl_s for g in self.groups.values()), default=0)


def quick_model(model: Model) -> Model:
    """model.toml's world with shorter steps (and no scheduled outages: capacity is the campaign's to refuse)."""
    return replace(
        model,
        ec2=Ec2Timing(
            pending_s=5.0,
            boot_to_join_s=20.0,
            start_pending_s=5.0,
            restart_boot_s=10.0,
            scrub_s=model.ec2.scrub_s,
            stop_s=10.0,
            shutdown_s=10.0,
            root_volume_gib=model.ec2.root_volume_gib,
        ),
        ebs=EbsTiming(create_s=5.0, attach_s=3.0, detach_s=5.0, mount_s=2.0),
        swarm=SwarmTiming(
            scheduler_delay_s=model.swarm.scheduler_delay_s,
            node_down_after_s=10.0,
            image_pull_s=15.0,
            container_start_s=2.0,
            node_memory_share=model.swarm.node_memory_share,
        ),
        outages=(),
    )


def liveness_bound(model: Model, settings: AutoscalingSettings) -> int:
    """K, in cycles: the longest a task may still wait, through no fault, once the faults stop.

    The worst path: a machine lost just before the calm (its node gone for good) waits `max_start_s` to be given up,
    is shut down and seen down; or its offering was refused and is avoided `capacity_backoff_s`; then a cold start
    (the owner's volume created, a launch, pending, the attach, the boot and mount, the label, the image pull, the
    start and the download), a busy resync between each step the loop takes. Cycles are at least a busy resync
    apart while anything waits; five more for the few shorter gaps a deadline causes.
    """
    busy = float(settings.busy_resync_interval_s)
    ec2, ebs, swarm = model.ec2, model.ebs, model.swarm
    given_up_s = max(
        float(settings.max_start_s) + ec2.shutdown_s + swarm.node_down_after_s,
        float(settings.capacity_backoff_s),
        # A claimed hot machine whose node never says the owner's volume is mounted is terminated after this.
        float(settings.hot_attach_s) + ec2.shutdown_s + swarm.node_down_after_s,
    )
    download_s = DATA_GB * 1000.0 / model.download_mb_per_s
    cold_s = (
        ebs.create_s
        + busy
        + model.api.run_instances_s
        + ec2.pending_s
        + busy
        + max(ec2.boot_to_join_s, ebs.attach_s)
        + ebs.mount_s
        + busy
        + swarm.image_pull_s
        + swarm.container_start_s
        + download_s
    )
    return math.ceil((given_up_s + cold_s) / busy) + 5


def draw(seed: int, cycles: int, enabled: tuple[str, ...], base: Model, *, recycling: bool | None = None) -> Scenario:
    """The campaign of `seed`: the same seed and kinds, the same campaign. `recycling`: whether its owners' groups may
    recycle or accept recycled machines (None: as the seed draws it; False: the campaign as drawn before recycling
    was, for the tests that chose a seed for its other draws)."""
    rng = random.Random(seed)
    # Recycling's draws come from a stream of their own, so that each seed's other draws are those it had before
    # recycling was drawn (the rows of docs/reliability.md replay as they were, recycling aside).
    recycling_rng = random.Random(f"recycling {seed}")
    drawn_recycling = recycling_rng.random() < RECYCLING_SHARE
    recycling = drawn_recycling if recycling is None else recycling
    model = quick_model(base)
    intensity = rng.choice((0.5, 1.0, 2.0))
    older = tuple(k for k in enabled if k not in RECYCLING_KINDS)
    on = [k for k in older if rng.random() < 0.5] or ([rng.choice(older)] if older else [])
    if recycling:
        on += [k for k in enabled if k in RECYCLING_KINDS and recycling_rng.random() < 0.5]
    room = recycling and recycling_rng.random() < RECYCLING_ROOM_SHARE
    rates = {k: min(1.0, BASE_RATES[k] * (1.0 if k == "unknown-type" else intensity)) for k in NAMES if k in on}
    warm_buffer = rng.choice(({}, {"t3.medium": 1}))
    hot_buffer = rng.choice(({}, {"t3.medium": 1}))
    sizing = rng.choice(("fixed", "demand"))
    if recycling and not warm_buffer and not hot_buffer:
        # A recycled machine goes to a buffer with room for its type (plan/recycle.py): without one, none recycles.
        warm_buffer = {"t3.medium": 1}
    allowed = (*ALLOWED_TYPES, UNKNOWN_TYPE) if "unknown-type" in rates else ALLOWED_TYPES
    prices = {t: p for t, p in base.price_per_hour.items() if t in ALLOWED_TYPES}
    prices[UNKNOWN_TYPE] = prices["t3.medium"]
    values: dict[str, Any] = {
        "image_id": "ami-0simulated0000000",
        "allowed_instance_types": list(allowed),
        "price_per_hour": prices,
        "max_instances": rng.choice((3, 5, 12)),
        "max_stopped_instances": rng.choice((1, 2, 8)),
        "warm_buffer": warm_buffer,
        "hot_buffer": hot_buffer,
        "buffer_images": [SESSION_IMAGE] if warm_buffer or hot_buffer else [],
        # Demand sizing: the buffers' sizes above are each type's most per zone, the arrivals of a window set them.
        "buffer_sizing": sizing,
        "buffer_window_s": rng.choice((300.0, 900.0)),
        # A buffer machine's launch, boot, pull and join in the quick world (about 45 s), a reservation's lead / 2.
        "buffer_refill_s": 60.0,
        "hot_attach_s": rng.choice((30.0, 60.0)),
        "idle_grace_s": rng.choice((20.0, 60.0)),
        "max_start_s": rng.choice((60.0, 90.0)),
        "capacity_backoff_s": rng.choice((30.0, 60.0)),
        "attach_timeout_s": 30.0,
        "device_wait_s": 20,
        "busy_resync_interval_s": rng.choice((10.0, 15.0)),
        "resync_interval_s": rng.choice((30.0, 60.0)),
    }
    if room:
        values.update(RECYCLING_ROOM, max_instances=min(values["max_instances"], RECYCLING_ROOM_MAX_INSTANCES))
        values["buffer_images"] = [SESSION_IMAGE]
    settings = AutoscalingSettings.model_construct(**values)
    # lease.py's margin over the default lock ttl, as main.py passes it: a plan older is not applied.
    max_plan_age_s = settings.leader_lock_ttl_s * 0.2
    k = liveness_bound(model, settings)
    calm_from = max(cycles // 3, cycles - k + 1)
    groups: dict[str, GroupProperties] = {}
    sessions: list[Session] = []
    notes = [
        f"intensity {intensity}, kinds on: {', '.join(rates) or 'none'}"
        + (", buffers that leave recycling room" if room else ""),
        "settings: "
        + ", ".join(f"{key}={values[key]}" for key in sorted(values) if key not in ("image_id", "price_per_hour")),
    ]
    # Sessions arrive while faults strike (a cycle lasts a busy resync at least), and may end, return, or still run.
    arrivals_until_s = 0.6 * (calm_from - 1) * settings.busy_resync_interval_s
    for number in range(1, rng.randint(2, 4) + 1):
        cache = rng.random() < 0.6
        group = f"g{number}"
        groups[group] = GroupProperties(
            ebs_cache_enabled=cache,
            cache_ttl_s=rng.choice((60, 180)),
            cache_size_gib=10,
            # 1800 s outlasts the calm: a warm machine that keeps its owner's volume must give it back, not wait it out.
            warm_ttl_s=rng.choice((0, 0, 60, 240, 1800)),
            # Drawn per owner (one owner per group), so that owners who recycle meet owners who accept or refuse.
            recycle_machines=recycling and (number == 1 or recycling_rng.random() < 0.8),
            accept_recycled=recycling and recycling_rng.random() < 0.6,
        )
        at_s = rng.uniform(0.0, arrivals_until_s * 0.5)
        for _ in range(rng.randint(1, 3)):
            duration_s = rng.uniform(30.0, 120.0)
            cpus, memory_gib = rng.choice(SIZES)
            sessions.append(
                Session(at_s, f"u{number}", f"p{number}", f"n{number}", cpus, memory_gib, 0, duration_s, group, DATA_GB)
            )
            at_s += duration_s + rng.uniform(10.0, 120.0)
            if at_s > arrivals_until_s:
                break
        g = groups[group]
        kept = f"on, ttl {g.cache_ttl_s} s" if cache else "off"
        sizes = ", ".join(f"{s.cpus:g} CPU / {s.memory_gib:g} GiB" for s in sessions if s.group == group)
        recycles = f", recycles {'yes' if g.recycle_machines else 'no'}, accepts {'yes' if g.accept_recycled else 'no'}"
        notes.append(
            f"owner u{number}/p{number}/n{number}: cache {kept}, warm tier {g.warm_ttl_s} s"
            + (recycles if recycling else "")
            + f", sessions {sizes}"
        )
    bookings = _bookings(rng, sorted(groups), calm_from, settings, arrivals_until_s, base.availability_zones[0])
    for booking in bookings:
        when = "before the first cycle" if booking.made_cycle == 1 else f"at cycle {booking.made_cycle}"
        notes.append(
            f"reservation made {when} for group {booking.group}: {booking.sessions} session(s) of"
            f" {booking.size[0]:g} CPU / {booking.size[1]:g} GiB {booking.after_s:.0f} s later, zone"
            f" {booking.zone or 'any'}, released {booking.release_after_s} s after"
        )
    return Scenario(
        seed,
        cycles,
        calm_from,
        k,
        model,
        settings,
        groups,
        tuple(sessions),
        rates,
        tuple(notes),
        bookings,
        max_plan_age_s,
    )


def owner_text(owner: tuple[str, str, str]) -> str:
    """An owner as whose_instance names it (Owner's str), from a session's (user, project, node)."""
    return ",".join(f"{k}={v}" for k, v in zip(("user_id", "project_id", "node_id"), owner, strict=True))


def _bookings(
    rng: random.Random,
    groups: list[str],
    calm_from: int,
    settings: AutoscalingSettings,
    arrivals_until_s: float,
    zone: str,
) -> tuple[Booking, ...]:
    """None, one made before the first cycle, one made mid-campaign (while faults strike), or both."""
    lead_s = settings.buffer_refill_s * settings.reservation_lead_margin
    made = [c for c in (1, rng.randint(2, max(2, calm_from - 1))) if rng.random() < 0.5]
    return tuple(
        Booking(
            made_cycle=cycle,
            group=rng.choice(groups),
            sessions=rng.randint(1, 2),
            size=rng.choice(SIZES[:2]),
            # Inside its lead time or past it, while sessions still come.
            after_s=rng.uniform(0.5 * lead_s, max(lead_s, 0.5 * arrivals_until_s)),
            zone=rng.choice((None, zone)),
            release_after_s=rng.choice((60, 240)),
        )
        for cycle in made
    )
