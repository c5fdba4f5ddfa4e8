"""How much each assumed number moves the fair comparison: the best policies re-run with one model figure changed.

Every figure of model.toml without a published source is an assumption; each gets a row here (VARIANTS), run on a
held-out seed. T3 instances' CPU credits are not billed by the day's meter (unlimited mode bills only the use above
a type's baseline): `t3_credit_usd` prices them afterwards at a stated average CPU use, a column of every row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from warmswarm_simulator.config import Model
from warmswarm_simulator.fair import Job, class_wait_p50_s, objective_s
from warmswarm_simulator.policies import PolicySpec
from warmswarm_simulator.results import RunResult

# [ec2-burstable] AWS, "Unlimited mode for burstable performance instances": surplus credits cost $0.05 per vCPU-hour
# (Linux); "Key concepts": a T3 type's baseline utilisation per vCPU. The average CPU use of a session machine is
# [assumed] 40 %, applied to every T3 instance-hour (buffers and idle graces included), so the figure is an upper
# bound: an idle machine earns credits instead.
T3_SURPLUS_USD_PER_VCPU_HOUR = 0.05
T3_BASELINE_PER_VCPU = {"t3.medium": 0.20, "t3.large": 0.30, "t3.xlarge": 0.40}
ASSUMED_CPU_USE = 0.40

# osparc's own margin (shared/notes/osparc-baseline.md item 3): room for its sidecar, which the platform does not run.
OSPARC_MARGIN = {"cpu_reserved": 1.4, "memory_share": 0.9, "memory_reserved_gib": 1.0}


def t3_credit_usd(result: RunResult, model: Model, cpu_use: float = ASSUMED_CPU_USE) -> float:
    """What unlimited mode would add to the bill at `cpu_use` average CPU over every T3 instance-hour of the run."""
    total = 0.0
    for instance_type, hours in result.bill.instance_hours_by_type.items():
        baseline = T3_BASELINE_PER_VCPU.get(instance_type)
        if baseline is None:
            continue
        vcpus = model.instance_types[instance_type].vcpus
        total += hours * vcpus * max(0.0, cpu_use - baseline) * T3_SURPLUS_USD_PER_VCPU_HOUR
    return total


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    source: str  # what the reference figure rests on
    model: Callable[[Model], Model]
    baseline_settings: Mapping[str, float] | None = None  # extra knobs for the baseline policy only


def _same(model: Model) -> Model:
    return model


VARIANTS: tuple[Variant, ...] = (
    Variant("reference (model.toml as it is)", "", _same),
    Variant(
        "launch to join 3 min (boot_to_join_s 165 s), not 2",
        "[osparc] 2 min with fast snapshot restore; a report without it took about 3 min",
        lambda m: replace(m, ec2=replace(m.ec2, boot_to_join_s=165.0)),
    ),
    Variant(
        "restart after a stop 80 s, not 40",
        "[assumed] restart_boot_s: the warm tier and warm buffers rest on it",
        lambda m: replace(m, ec2=replace(m.ec2, restart_boot_s=80.0)),
    ),
    Variant(
        "image pull 0 s (baked into the AMI, both policies)",
        "[assumed] image_pull_s 90 s",
        lambda m: replace(m, swarm=replace(m.swarm, image_pull_s=0.0)),
    ),
    Variant(
        "image pull 180 s",
        "[assumed] image_pull_s 90 s; [osparc] up to 5 min on fresh machines",
        lambda m: replace(m, swarm=replace(m.swarm, image_pull_s=180.0)),
    ),
    Variant(
        "download 30 MB/s, not 60",
        "[assumed] download_mb_per_s",
        lambda m: replace(m, download_mb_per_s=30.0),
    ),
    Variant(
        "download 120 MB/s, not 60",
        "[assumed] download_mb_per_s",
        lambda m: replace(m, download_mb_per_s=120.0),
    ),
    Variant(
        "hot mount 3.4 s, not 5 (measured: attach -> node labelled, no container, dockerd restarted)",
        "[assumed] ebs.hot_mount_s 5 s: every hot-buffer claim rests on it",
        lambda m: replace(m, ebs=replace(m.ebs, hot_mount_s=3.4)),
    ),
    Variant(
        "hot mount 20 s, not 5 (containers running: SIGHUP, the agent re-sends node descriptions every 20 s)",
        "[assumed] ebs.hot_mount_s 5 s: every hot-buffer claim rests on it",
        lambda m: replace(m, ebs=replace(m.ebs, hot_mount_s=20.0)),
    ),
    Variant(
        "scrub 60 s, not 5 (a root disk slow to clean: many layers, large logs)",
        "[assumed] ec2.scrub_s 5 s: every recycled machine's scrub boot rests on it (the sandbox's scrub takes 0.1 s)",
        lambda m: replace(m, ec2=replace(m.ec2, scrub_s=60.0)),
    ),
    Variant(
        "sessions write twice as fast to their cache (median 0.6 GB/h, not 0.3)",
        "[assumed] data.write_gb_per_h_median: how fast volumes fill, so when they grow and how often one is full",
        lambda m: replace(m, writes=replace(m.writes, write_gb_per_h_median=2 * m.writes.write_gb_per_h_median)),
    ),
    Variant(
        "the baseline keeps osparc's sidecar margin",
        "[osparc] code default; the simulated platform runs no sidecar",
        _same,
        baseline_settings=OSPARC_MARGIN,
    ),
)


def variant_jobs(variant: Variant, specs: Sequence[PolicySpec], seed: int, model: Model) -> list[Job]:
    """The runs of one row: each policy on `seed` under the variant's model (and the baseline's extra knobs)."""
    jobs = []
    for spec in specs:
        if spec.kind == "baseline" and variant.baseline_settings:
            spec = replace(spec, settings={**spec.settings, **variant.baseline_settings})
        jobs.append(Job(seed, spec, variant.model(model)))
    return jobs


def sensitivity_table(rows: Sequence[tuple[Variant, Sequence[RunResult]]], model: Model) -> str:
    """A row per variant: each policy's cost, p50 / p95, the first sessions' and the returns' p50, and what T3
    credits would add at the stated CPU use."""
    names = [r.name for r in rows[0][1]]
    header = "| variant | reference rests on | " + " | ".join(
        f"{n}: cost, p50 / p95 s, first / returns p50 s, +T3 credits" for n in names
    )
    lines = [header + " |", "|---|---|" + "---:|" * len(names)]
    for variant, results in rows:
        cells = [
            f"${r.bill.total_usd:,.2f}, {r.wait_p50_s:,.0f} / {r.wait_p95_s:,.0f} (p50+p95 {objective_s(r):,.0f}),"
            f" {class_wait_p50_s(r, True):,.0f} / {class_wait_p50_s(r, False):,.0f}, +${t3_credit_usd(r, model):,.2f}"
            for r in results
        ]
        lines.append(f"| {variant.name} | {variant.source or '–'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
