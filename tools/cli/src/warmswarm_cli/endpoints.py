"""Which API a command talks to: the autoscaler (of several replicas, the leader) and the director, with the ops
token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError
from warmswarm_models.answers import AutoscalerStatusOut

from warmswarm_cli.client import EXIT_UNREACHABLE, Api, CliError


@dataclass(frozen=True, slots=True)
class Endpoints:
    autoscaling_url: str
    director_url: str
    timeout_s: float
    ops_token: str  # "" when OPS_TOKEN is not set: the call goes without, and a 401 says to set it

    def autoscaler(self) -> Api:
        """The autoscaler's API; of several URLs (one per manager, comma-separated), the leader's."""
        urls = [url.strip() for url in self.autoscaling_url.split(",") if url.strip()] or [self.autoscaling_url]
        replicas = [
            Api("autoscaler", url, setting=_AUTOSCALING_SETTING, timeout_s=self.timeout_s, token=self.ops_token)
            for url in urls
        ]
        return replicas[0] if len(replicas) == 1 else _the_leader(replicas)

    def director(self) -> Api:
        return Api(
            "director",
            self.director_url,
            setting="--director-url/DIRECTOR_URL",
            timeout_s=self.timeout_s,
            token=self.ops_token,
        )


_AUTOSCALING_SETTING: Final = "--autoscaling-url/AUTOSCALING_URL"


def _the_leader(replicas: list[Api]) -> Api:
    """The replica whose status says it leads: only the leader observes and acts, a follower knows nothing."""
    heard: list[str] = []
    for replica in replicas:
        try:
            body = replica.call("GET", "/v1/status")
        except CliError as error:
            if error.status_code in (401, 403):
                raise  # a refusal, not an absent replica: every replica has the same token
            heard.append(f"{replica.base_url} did not answer ({error})")
            continue
        # An autoscaler without leader election reports no flag: it is the only one, so it leads.
        if _leads(body):
            return replica
        heard.append(f"{replica.base_url} follows")
    raise CliError(f"none of the autoscalers in {_AUTOSCALING_SETTING} leads: {'; '.join(heard)}", EXIT_UNREACHABLE)


def _leads(body: Any) -> bool:
    try:
        return AutoscalerStatusOut.model_validate(body).leader is not False
    except ValidationError:
        return True  # not a status this CLI can read: the command that asks it says so
