"""When EBS refuses ModifyVolume, and the states a volume's modification goes through.

AWS, EBS User Guide, "Modify a volume using Amazon EBS Elastic Volumes" and "Monitor the progress of Amazon EBS
volume modifications" (https://docs.aws.amazon.com/ebs/latest/userguide/monitoring-volume-modifications.html), and
the API Reference's ModifyVolume:
- a modification goes "modifying", then "optimizing", then "completed"; a size change takes effect once the volume is
  "optimizing" (the instance sees the larger device then, and its file system can grow into it);
- a volume is modified only while "in-use" or "available", and only once any previous modification has finished;
- after a modification, wait at least six hours before modifying the same volume again;
- EBS volumes only grow: a size below the current one is refused.
The codes are those EC2 answers with (refusals.py): IncorrectModificationState ("cannot be modified in modification
state OPTIMIZING") and VolumeModificationRateExceeded ("You've reached the maximum modification rate per volume
limit. Wait at least 6 hours between modifications per EBS volume."), as AWS's SDK users meet them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from warmswarm_ec2rules.refusals import Refusal, client_error
from warmswarm_ec2rules.volumes import AVAILABLE, IN_USE

MODIFYING: Final = "modifying"
OPTIMIZING: Final = "optimizing"
COMPLETED: Final = "completed"
# AWS's cooldown between two modifications of one volume.
MODIFICATION_COOLDOWN_S: Final = 6 * 3600.0
# gp2/gp3's largest size, GiB (EBS User Guide, "Amazon EBS volume types").
MAX_SIZE_GIB: Final = 16_384


@dataclass(frozen=True, slots=True)
class Modification:
    """A volume's last modification: its sizes and when it was asked for (the caller's clock, seconds)."""

    volume_id: str
    original_size_gib: int
    target_size_gib: int
    started_s: float


@dataclass(frozen=True, slots=True)
class Timing:
    """How long each state lasts (AWS: seconds for a size change, longer to optimize) and the cooldown."""

    modifying_s: float
    optimizing_s: float
    cooldown_s: float = MODIFICATION_COOLDOWN_S


def state_of(modification: Modification, now_s: float, timing: Timing) -> str:
    """The modification's state at `now_s`."""
    elapsed_s = now_s - modification.started_s
    if elapsed_s < timing.modifying_s:
        return MODIFYING
    if elapsed_s < timing.modifying_s + timing.optimizing_s:
        return OPTIMIZING
    return COMPLETED


def progress_percent(modification: Modification, now_s: float, timing: Timing) -> int:
    """DescribeVolumesModifications' Progress: 0 at the start, 100 once completed, linear in between."""
    total_s = timing.modifying_s + timing.optimizing_s
    if total_s <= 0:
        return 100
    return max(0, min(100, int(100 * (now_s - modification.started_s) / total_s)))


def size_seen_gib(modification: Modification | None, size_gib: int, now_s: float, timing: Timing) -> int:
    """The size an instance sees: the target's once the modification is optimizing, the original's before."""
    if modification is None or state_of(modification, now_s, timing) != MODIFYING:
        return size_gib
    return modification.original_size_gib


def modify_refusal(
    volume_id: str,
    volume_state: str,
    size_gib: int,
    target_size_gib: int | None,
    last: Modification | None,
    now_s: float,
    timing: Timing,
) -> Refusal | None:
    """ModifyVolume's refusal, if any, for a size change to `target_size_gib` (None: no size asked for). From what no
    wait can cure (a smaller size) to what time does (a modification still under way, the cooldown)."""
    if target_size_gib is not None and target_size_gib < size_gib:
        return client_error(
            "InvalidParameterValue", f"New size cannot be smaller than existing size ({target_size_gib} < {size_gib})"
        )
    if target_size_gib is not None and target_size_gib > MAX_SIZE_GIB:
        return client_error("InvalidParameterValue", f"Volume of {target_size_gib}GiB is too large; maximum is 16384")
    if volume_state not in (IN_USE, AVAILABLE):
        return client_error(
            "IncorrectState", f"Volume {volume_id} must be in the {AVAILABLE} or {IN_USE} state to be modified."
        )
    if last is None:
        return None
    state = state_of(last, now_s, timing)
    if state != COMPLETED:
        return client_error(
            "IncorrectModificationState", f"Volume {volume_id} cannot be modified in modification state {state.upper()}"
        )
    if now_s - last.started_s < timing.cooldown_s:
        return client_error(
            "VolumeModificationRateExceeded",
            "You've reached the maximum modification rate per volume limit. Wait at least 6 hours between"
            " modifications per EBS volume.",
        )
    return None
