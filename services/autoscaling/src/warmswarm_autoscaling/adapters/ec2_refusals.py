"""AWS's refusals as botocore raises them, read into the code and message refusals.py makes our error of."""

from __future__ import annotations

from typing import Final

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from warmswarm_autoscaling.ports import Ec2Error
from warmswarm_autoscaling.refusals import refusal

# The code counted for a call that never got an answer from AWS.
CONNECTION_ERROR: Final = "ConnectionError"


def ec2_error(
    operation: str, error: ClientError | BotoCoreError, endpoint_url: str, *, client_token: str | None = None
) -> Ec2Error:
    """Our error for an AWS error: its code, its message, what to do next, and the port exception the caller acts on
    (`client_token`: the call's, for a refusal that spends it)."""
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        code = str(details.get("Code") or "Unknown")
        message = str(details.get("Message") or error)
    elif isinstance(error, BotoConnectionError | HTTPClientError):
        code = CONNECTION_ERROR
        message = f"{error}; check that the EC2 endpoint {endpoint_url} is reachable (network, proxy, region)"
    else:
        # Credentials missing, a bad parameter caught before sending, ...: no AWS code exists.
        code = type(error).__name__
        message = str(error)
    return refusal(operation, code, message, client_token=client_token)
