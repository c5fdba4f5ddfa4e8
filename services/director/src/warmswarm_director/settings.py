"""The director's settings, read from the environment once, at the wiring point; every knob carries its unit."""

from __future__ import annotations

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from warmswarm_models import DEFAULT_NODE_CACHE_PATH
from warmswarm_runtime.settings import long_enough

ENV_PREFIX = "DIRECTOR_"


def _aliases(name: str) -> AliasChoices:
    # The prefixed name wins over the plain one: it is the more specific of the two when both are set.
    return AliasChoices(f"{ENV_PREFIX}{name}", name)


class DirectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore", populate_by_name=True)

    docker_host: str = Field(
        default="unix:///var/run/docker.sock",
        validation_alias=_aliases("DOCKER_HOST"),
        description="Engine API of a swarm manager.",
    )
    redis_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        validation_alias=_aliases("REDIS_URL"),
        description="Where group properties are kept.",
    )
    redis_timeout_s: float = Field(default=5.0, gt=0)
    ops_token: SecretStr = Field(
        validation_alias=_aliases("OPS_TOKEN"),
        description=(
            "Bearer token ops present to change group properties; the director also shows it to the autoscaler,"
            " whose status (why tasks wait) needs it."
        ),
    )
    # No plain API_TOKEN alias: a name that generic could be another program's in the same environment.
    api_token: SecretStr = Field(
        description="Bearer token the platform presents to create, read and delete users' services.",
    )
    cache_mount_path: str = Field(
        default="/cache",
        validation_alias=_aliases("CACHE_MOUNT_PATH"),
        description="Where a service's container sees its owner's cache.",
    )
    node_cache_path: str = Field(
        default=DEFAULT_NODE_CACHE_PATH,
        validation_alias=_aliases("NODE_CACHE_PATH"),
        description="Where a node mounts its owner's cache volume (the autoscaler's boot script agrees).",
    )
    autoscaling_url: str | None = Field(
        default=None,
        validation_alias=_aliases("AUTOSCALING_URL"),
        description="The autoscaler's API, asked why a task waits; unset: only the swarm's own reason is given.",
    )
    autoscaling_timeout_s: float = Field(default=2.0, gt=0)
    strict_groups: bool = Field(
        default=False,
        description=(
            "Refuse (422) a request naming a group without properties. Off: such a group contributes nothing, and a"
            " request none of whose groups has properties gets the defaults (cache off)."
        ),
    )
    stop_grace_s: float = Field(default=10.0, ge=0, description="Time a container has between SIGTERM and SIGKILL.")
    http_host: str = "0.0.0.0"
    http_port: int = Field(default=8001, ge=0, le=65535)
    log_json: bool = False

    _ops_token_long_enough = field_validator("ops_token")(long_enough)
    _api_token_long_enough = field_validator("api_token")(long_enough)

    @model_validator(mode="after")
    def _tokens_differ(self) -> DirectorSettings:
        # The platform holding the ops token could change every group's cache (and, at the autoscaler, read
        # every owner and expire their volumes): two callers, two tokens.
        if self.api_token.get_secret_value() == self.ops_token.get_secret_value():
            raise ValueError(
                f"{ENV_PREFIX}API_TOKEN must differ from the ops token ({ENV_PREFIX}OPS_TOKEN or OPS_TOKEN):"
                " the platform is not to act as ops"
            )
        return self

    @field_validator("cache_mount_path", "node_cache_path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # Docker rejects a relative bind source or target only when a task starts, long after the request.
        if not value.startswith("/"):
            raise ValueError(f"{value!r} must be an absolute path")
        return value

    @field_validator("autoscaling_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} must start with http:// or https://")
        return value.rstrip("/")
