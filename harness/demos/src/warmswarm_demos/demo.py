"""`make demo`: five narrated acts on the local cloud (cold start, cache return, warm resume, hot claim, recycling)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import (
    FAST_AUTOSCALING,
    StartedDirector,
    new_ops_token,
    start_autoscaler,
    start_director,
)

from warmswarm_demos.act_buffer import buffer_act, hot_buffer_settings
from warmswarm_demos.act_cache import cache_act
from warmswarm_demos.act_cold import cold_act
from warmswarm_demos.act_recycle import Replica, recycle_act
from warmswarm_demos.act_warm import warm_act
from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_demos.stage import Platform

CLUSTER = "demo"
ACTS = (1, 2, 3, 4, 5)
# Act 5 keeps its own cluster: it starts from an empty buffer whatever act 4 left running.
RECYCLE_CLUSTER_SUFFIX = "-recycle"
# The autoscalers and directors the acts start, by the kind in their names: acts 1-3, act 4, act 5's two replicas.
KINDS = ("", "-hot", "-recycle-1", "-recycle-2")


@dataclass(frozen=True)
class Cast:
    """Who plays: the autoscaler's cluster, a suffix for the process names and the owners' ids (unique in a shared
    sandbox), the acts played, and settings over the sandbox's FAST_AUTOSCALING (a test gives a shorter idle grace)."""

    cluster: str = CLUSTER
    suffix: str = ""
    acts: tuple[int, ...] = ACTS
    settings: Mapping[str, str] = field(default_factory=dict)

    def names(self, kind: str) -> tuple[str, str]:
        """The autoscaler's and the director's process names."""
        return f"autoscaling{kind}{self.suffix}", f"director{kind}{self.suffix}"

    @property
    def recycle_cluster(self) -> str:
        return f"{self.cluster}{RECYCLE_CLUSTER_SUFFIX}"


@asynccontextmanager
async def platform_of(sandbox: Sandbox, director: StartedDirector, say: Narrator) -> AsyncIterator[Platform]:
    # The platform's client: every call to /v1/services presents the director's API token.
    headers = {"Authorization": f"Bearer {director.api_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers) as api:
        yield Platform(api, sandbox.endpoints.sandbox_image, say)


async def start_services(
    sandbox: Sandbox, cast: Cast, kind: str, settings: Mapping[str, str], ops_token: str, api_token: str | None
) -> tuple[str, StartedDirector]:
    """The autoscaler with the cast's settings over `settings`, and a director that asks it."""
    autoscaler_name, director_name = cast.names(kind)
    url = await asyncio.to_thread(
        start_autoscaler,
        sandbox,
        name=autoscaler_name,
        settings={"WARMSWARM_CLUSTER": cast.cluster, **settings, **cast.settings},
        ops_token=ops_token,
    )
    director = await asyncio.to_thread(
        start_director, sandbox, name=director_name, autoscaling_url=url, ops_token=ops_token, api_token=api_token
    )
    return url, director


async def acts(sandbox: Sandbox, say: Narrator, cast: Cast = Cast()) -> None:
    """Play the cast's acts; the processes started for them are stopped on the way out, whatever happened."""
    try:
        await _play(sandbox, say, cast)
    finally:
        for kind in KINDS:
            for name in cast.names(kind)[::-1]:
                sandbox.kill(name)


async def _play(sandbox: Sandbox, say: Narrator, cast: Cast) -> None:
    ops_token = new_ops_token()
    if set(cast.acts) & {1, 2, 3, 4}:
        await _acts_1_to_4(sandbox, say, cast, ops_token)
    if 5 in cast.acts:
        print(
            "\n— act 5: an idle owner's machine is scrubbed and serves the next owner of her group (recycled"
            " machines) —"
        )
        # Act 5 runs on autoscalers of its own: the earlier acts' stop first.
        for kind in KINDS[:2]:
            for name in cast.names(kind)[::-1]:
                sandbox.kill(name)
        await recycle_act(
            sandbox,
            _Replicas(sandbox, say, cast, ops_token),
            ops_token,
            say,
            cluster=cast.recycle_cluster,
            suffix=cast.suffix,
        )


class _Replicas:
    """Act 5's replicas: an autoscaler and a director each, named by the kind `-recycle-<n>` (demo.KINDS)."""

    def __init__(self, sandbox: Sandbox, say: Narrator, cast: Cast, ops_token: str) -> None:
        self.sandbox, self.say, self.cast, self.ops_token = sandbox, say, cast, ops_token
        self.started = 0

    async def start(self, settings: Mapping[str, str]) -> Replica:
        self.started += 1
        kind = f"-recycle-{self.started}"
        url, director = await start_services(self.sandbox, self.cast, kind, settings, self.ops_token, None)
        self.say.say(f"replica {self.started} of act 5: autoscaler ready at {url}, director at {director.url}")
        # The platform's client: every call to /v1/services presents the director's API token.
        headers = {"Authorization": f"Bearer {director.api_token}"}
        api = httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers)
        return Replica(Platform(api, self.sandbox.endpoints.sandbox_image, self.say), url, kind)

    async def stop(self, replica: Replica) -> None:
        await replica.platform.api.aclose()
        for name in self.cast.names(replica.kind)[::-1]:
            await asyncio.to_thread(self.sandbox.kill, name)


async def _acts_1_to_4(sandbox: Sandbox, say: Narrator, cast: Cast, ops_token: str) -> None:
    say.say("starting the autoscaler and the director as their own processes (no buffer yet)")
    url, director = await start_services(sandbox, cast, "", {}, ops_token, None)
    say.say(f"autoscaler ready at {url}, director at {director.url}")

    if 1 in cast.acts:
        print("\n— act 1: a pending service gets a machine (a cold launch), and the machine goes away after —")
        idle_grace_s = {**FAST_AUTOSCALING, **cast.settings}["AUTOSCALING_IDLE_GRACE_S"]
        await cold_act(
            sandbox, url, ops_token, say, cluster=cast.cluster, idle_grace_s=float(idle_grace_s), suffix=cast.suffix
        )
    async with platform_of(sandbox, director, say) as platform:
        if 2 in cast.acts:
            print("\n— act 2: a user's data outlives her machine and comes back with her (a cache return) —")
            await cache_act(sandbox, platform, ops_token, say, suffix=cast.suffix)
        if 3 in cast.acts:
            print("\n— act 3: a user's idle machine is kept stopped, and her return starts it again (a warm resume) —")
            await warm_act(sandbox, platform, ops_token, say, suffix=cast.suffix)
    if 4 not in cast.acts:
        return

    print("\n— act 4: a machine waits running in the hot buffer, and a first session claims it (a hot claim) —")
    # A buffer from the start would serve acts 1-3 too (their first sessions would claim it): it comes on here.
    settings = hot_buffer_settings(sandbox)
    say.say(
        f"ops restart the autoscaler with a hot buffer: AUTOSCALING_HOT_BUFFER={settings['AUTOSCALING_HOT_BUFFER']}"
        " (one machine kept running, joined and idle, for the next first session)"
    )
    say.mark("buffer-on")
    for name in cast.names("")[::-1]:
        sandbox.kill(name)
    url, director = await start_services(sandbox, cast, "-hot", settings, ops_token, director.api_token)
    async with platform_of(sandbox, director, say) as platform:
        await buffer_act(sandbox, platform, ops_token, say, cluster=cast.cluster, suffix=cast.suffix)


def _keep_logs(logs: Path) -> str:
    # The sandbox's teardown removes its state: a failure's logs are copied out first, the one thing it leaves.
    if not logs.is_dir():
        return "the sandbox wrote no logs"
    kept = shutil.copytree(logs, tempfile.mkdtemp(prefix="wsdemo-logs-"), dirs_exist_ok=True)
    return f"the sandbox's logs are kept in {kept}"


def chosen_acts(argv: Sequence[str]) -> tuple[int, ...]:
    """The acts `--acts 2,5` names (all five without it), in the demo's order; an act it does not have is an error."""
    parser = argparse.ArgumentParser(prog="python -m warmswarm_demos.demo", description=__doc__)
    parser.add_argument("--acts", default=",".join(map(str, ACTS)), help="the acts to play, e.g. 5 or 3,4,5")
    named = parser.parse_args(argv).acts
    try:
        wanted = {int(n) for n in named.split(",")}
    except ValueError:
        parser.error(f"--acts {named}: act numbers separated by commas, among {ACTS}")
    if not wanted or not wanted <= set(ACTS):
        parser.error(f"--acts {named}: the demo's acts are {ACTS}")
    return tuple(n for n in ACTS if n in wanted)


def main(argv: Sequence[str] | None = None) -> int:
    played = chosen_acts(sys.argv[1:] if argv is None else argv)
    say = Narrator()
    print("warmswarm demo: a real swarm on this machine; moto (behind a strict AWS layer) plays EC2\n")
    with tempfile.TemporaryDirectory(prefix="wsdemo-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=1.0)
        try:
            say.say("starting the local cloud: moto + strict EC2 layer, Redis, a swarm manager, the boot watcher")
            sandbox.start()
            asyncio.run(acts(sandbox, say, Cast(acts=played)))
        except (DemoFailure, TimeoutError, OSError, httpx.HTTPError) as error:
            print(f"\ndemo failed: {error}; {_keep_logs(Path(state) / 'cloud' / 'logs')}", file=sys.stderr)
            return 1
        finally:
            say.say("stopping everything the demo started")
            sandbox.stop()
    count = "five acts" if played == ACTS else f"act{'s' if len(played) > 1 else ''} {', '.join(map(str, played))}"
    say.say(f"done: {count}, every start path the one narrated, nothing left running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
