"""The two clocks a plan reads, this replica's and AWS's, and which one each kind of moment is taken from."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DeadlineClock:
    """This replica's clock and AWS's at one observation (epoch s).

    A plan keeps time by AWS's clock (`aws`): the stamps AWS writes (a launch, an attach), the deadlines kept in
    AWS's tags for any replica to read (a volume's expiry, a warm-until) and the plan's own clocks carried from
    cycle to cycle (an idle grace, a back-off). AWS's clock does not step: a replica's clock that runs ahead for a
    while and then agrees again would otherwise stretch every back-off it marked meanwhile by as much, and age a
    launch by it. A deadline written into a tag takes the `later` of the two clocks, so that an AWS Date a read's
    latency old does not make it early. The loop sleeps by its own clock: `own_time_of` tells it when.
    """

    own: float
    aws: float  # the Date of AWS's last answer; `own` while no answer is known

    @classmethod
    def of(cls, own: float, aws: float | None) -> DeadlineClock:
        return cls(own, own if aws is None else aws)

    @property
    def later(self) -> float:
        return max(self.own, self.aws)

    def own_time_of(self, aws_moment: float) -> float:
        """When this replica's clock, which the loop sleeps by, reads `aws_moment` of AWS's clock."""
        return aws_moment + (self.own - self.aws)
