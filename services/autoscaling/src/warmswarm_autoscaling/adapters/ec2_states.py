"""EC2 calls that change an instance's state: terminate, stop, start (the adapter's part that needs no parsing)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from warmswarm_autoscaling.adapters.ec2_calls import Ec2Calls
from warmswarm_autoscaling.ports import Ec2Error

log = logging.getLogger(__name__)

_NOT_FOUND_CODE: Final = "InvalidInstanceID.NotFound"
# TerminateInstances documents no firm limit, and smaller batches keep one bad id from failing (and then
# serialising) a huge request.
_TERMINATE_MAX_IDS: Final = 100


class Ec2InstanceStates(Ec2Calls):
    async def terminate_instances(self, instance_ids: Sequence[str]) -> None:
        unique = sorted(set(instance_ids))
        for start in range(0, len(unique), _TERMINATE_MAX_IDS):
            await self._terminate(unique[start : start + _TERMINATE_MAX_IDS])

    async def stop_instances(self, instance_ids: Sequence[str]) -> None:
        unique = sorted(set(instance_ids))
        await self._call("StopInstances", "stop_instances", InstanceIds=unique)
        log.info("stopped %s", ", ".join(unique))

    async def start_instances(self, instance_ids: Sequence[str]) -> None:
        unique = sorted(set(instance_ids))
        await self._call("StartInstances", "start_instances", InstanceIds=unique)
        log.info("started %s", ", ".join(unique))

    async def _terminate(self, instance_ids: list[str]) -> None:
        try:
            await self._call("TerminateInstances", "terminate_instances", InstanceIds=instance_ids)
        except Ec2Error as error:
            if error.code != _NOT_FOUND_CODE:
                raise
            # AWS fails the whole request, terminating none, when any one id is unknown;
            # one at a time, the ids that do exist still go.
            if len(instance_ids) > 1:
                for instance_id in instance_ids:
                    await self._terminate([instance_id])
