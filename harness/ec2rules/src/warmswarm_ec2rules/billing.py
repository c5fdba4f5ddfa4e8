"""How AWS bills what a simulation runs: instance-seconds while running with a minimum per running period, and EBS
GB-months of every provisioned disk. The figures (prices, the minimum, the hours of a month) are the caller's.

AWS, "Amazon EC2 On-Demand Pricing" https://aws.amazon.com/ec2/pricing/on-demand/ : Linux instances are billed per
second of running (pending, stopping, stopped and shutting-down are not), with a 60 s minimum each time one starts
running. AWS, "Amazon EBS pricing" https://aws.amazon.com/ebs/pricing/ : volumes are billed per GB-month of
provisioned size, prorated by the second (a month of 730 hours), whether or not attached or their instance runs.
"""

from __future__ import annotations


def billed_s(running_s: float, *, minimum_s: float) -> float:
    """The seconds billed for one running period (from "running" until it leaves it)."""
    return max(running_s, minimum_s)


def instance_usd(billed_seconds: float, price_per_hour: float) -> float:
    return billed_seconds / 3600.0 * price_per_hour


def gib_s(size_gib: float, since_s: float, until_s: float) -> float:
    """A disk's GiB-seconds while it was provisioned, from `since_s` until `until_s`."""
    return size_gib * (until_s - since_s)


def gb_months(gib_seconds: float, *, hours_per_month: float) -> float:
    return gib_seconds / (hours_per_month * 3600.0)


def ebs_usd(gb_month_count: float, price_per_gb_month: float) -> float:
    return gb_month_count * price_per_gb_month
