"""EC2's API throttling over the model's bucket sizes: warmswarm_ec2rules' buckets, and whether a call goes ahead."""

from __future__ import annotations

from warmswarm_ec2rules.throttling import Throttle as Ec2Throttle

from warmswarm_simulator.config import Throttling


class Throttle(Ec2Throttle):
    """Admits or refuses each EC2 call (RequestLimitExceeded, RequestResourceCountExceeded); a refused call takes no
    token. Sized by model.toml's [throttling]."""

    def __init__(self, throttling: Throttling) -> None:
        super().__init__(throttling.request, throttling.resource)

    def admit(self, operation: str, now_s: float, instances: int = 0) -> bool:
        """True when the call may go ahead (its tokens are taken), False when AWS would throttle it."""
        return self.refusal(operation, now_s, instances) is None
