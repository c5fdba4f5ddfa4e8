"""An EC2 error answer as a value: AWS's code, its message, and the HTTP status AWS answers it with.

AWS, Amazon EC2 API Reference, "Error codes for the Amazon EC2 API"
https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html : client errors (the caller's request,
or the state of what it names) come with HTTP 400, server errors (InsufficientInstanceCapacity among them) with 500.
EC2 answers a throttled request (RequestLimitExceeded, RequestResourceCountExceeded) with 503, which SDKs such as
botocore retry as a throttle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

CLIENT_ERROR_STATUS: Final = 400
SERVER_ERROR_STATUS: Final = 500
THROTTLED_STATUS: Final = 503


@dataclass(frozen=True, slots=True)
class Refusal:
    """What AWS answers instead of doing a call: `code` (e.g. VolumeInUse), `message`, and HTTP `status`."""

    code: str
    message: str
    status: int = CLIENT_ERROR_STATUS


def client_error(code: str, message: str) -> Refusal:
    return Refusal(code, message, CLIENT_ERROR_STATUS)


def instance_not_found(instance_id: str) -> Refusal:
    return client_error("InvalidInstanceID.NotFound", f"The instance ID '{instance_id}' does not exist")


def volume_not_found(volume_id: str) -> Refusal:
    return client_error("InvalidVolume.NotFound", f"The volume '{volume_id}' does not exist.")
