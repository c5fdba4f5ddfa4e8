"""The contract both services read (keys, resources, owners); it does no I/O and imports no I/O library."""

from warmswarm_models.keys import (
    CLUSTER_TAG,
    ENGINE_LABEL_INSTANCE_ID,
    LAUNCH_REASON_TAG,
    NODE_LABEL_AVAILABILITY_ZONE,
    NODE_LABEL_INSTANCE_ID,
    NODE_LABEL_INSTANCE_TYPE,
    OWNER_KEYS,
    ROLE_TAG,
    ROLE_WORKER,
)
from warmswarm_models.owner import InvalidOwner, Owner, parse_constraints
from warmswarm_models.resources import GPU, Resources

__all__ = [
    "CLUSTER_TAG",
    "ENGINE_LABEL_INSTANCE_ID",
    "GPU",
    "LAUNCH_REASON_TAG",
    "NODE_LABEL_AVAILABILITY_ZONE",
    "NODE_LABEL_INSTANCE_ID",
    "NODE_LABEL_INSTANCE_TYPE",
    "OWNER_KEYS",
    "ROLE_TAG",
    "ROLE_WORKER",
    "InvalidOwner",
    "Owner",
    "Resources",
    "parse_constraints",
]
