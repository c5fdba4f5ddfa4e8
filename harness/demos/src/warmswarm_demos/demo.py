"""`make demo`: four narrated acts on the local cloud (cold start, cache return, warm resume, hot buffer claim)."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from warmswarm_sandbox.cloud import Sandbox
from warmswarm_sandbox.services import StartedDirector, new_ops_token, start_autoscaler, start_director

from warmswarm_demos.act_buffer import buffer_act, hot_buffer_settings
from warmswarm_demos.act_cache import cache_act
from warmswarm_demos.act_cold import cold_act
from warmswarm_demos.act_warm import warm_act
from warmswarm_demos.narration import DemoFailure, Narrator
from warmswarm_demos.stage import Platform

CLUSTER = "demo"


@asynccontextmanager
async def platform_of(sandbox: Sandbox, director: StartedDirector, say: Narrator) -> AsyncIterator[Platform]:
    # The platform's client: every call to /v1/services presents the director's API token.
    headers = {"Authorization": f"Bearer {director.api_token}"}
    async with httpx.AsyncClient(base_url=director.url, timeout=30, headers=headers) as api:
        yield Platform(api, sandbox.endpoints.sandbox_image, say)


async def acts(sandbox: Sandbox, say: Narrator) -> None:
    say.say("starting the autoscaler and the director as their own processes (no buffer yet)")
    ops_token = new_ops_token()
    url = await asyncio.to_thread(
        start_autoscaler, sandbox, settings={"WARMSWARM_CLUSTER": CLUSTER}, ops_token=ops_token
    )
    director = await asyncio.to_thread(start_director, sandbox, autoscaling_url=url, ops_token=ops_token)
    say.say(f"autoscaler ready at {url}, director at {director.url}")

    print("\n— act 1: a pending service gets a machine (a cold launch), and the machine goes away after —")
    await cold_act(sandbox, url, ops_token, say)
    async with platform_of(sandbox, director, say) as platform:
        print("\n— act 2: a user's data outlives her machine and comes back with her (a cache return) —")
        await cache_act(sandbox, platform, ops_token, say)
        print("\n— act 3: a user's idle machine is kept stopped, and her return starts it again (a warm resume) —")
        await warm_act(sandbox, platform, ops_token, say)

    print("\n— act 4: a machine waits running in the hot buffer, and a first session claims it (a hot claim) —")
    # A buffer from the start would serve acts 1-3 too (their first sessions would claim it): it comes on here.
    settings = {"WARMSWARM_CLUSTER": CLUSTER, **hot_buffer_settings(sandbox)}
    say.say(
        f"ops restart the autoscaler with a hot buffer: AUTOSCALING_HOT_BUFFER={settings['AUTOSCALING_HOT_BUFFER']}"
    )
    say.mark("buffer-on")
    for name in ("director", "autoscaling"):
        sandbox.kill(name)
    url = await asyncio.to_thread(
        start_autoscaler, sandbox, name="autoscaling-hot", settings=settings, ops_token=ops_token
    )
    director = await asyncio.to_thread(
        start_director,
        sandbox,
        name="director-hot",
        autoscaling_url=url,
        ops_token=ops_token,
        api_token=director.api_token,
    )
    async with platform_of(sandbox, director, say) as platform:
        await buffer_act(sandbox, platform, ops_token, say)


def main() -> int:
    say = Narrator()
    print("warmswarm demo: a real swarm on this machine; moto (behind a strict AWS layer) plays EC2\n")
    with tempfile.TemporaryDirectory(prefix="wsdemo-") as state:
        sandbox = Sandbox(Path(state) / "cloud", boot_s=1.0)
        try:
            say.say("starting the local cloud: moto + strict EC2 layer, Redis, a swarm manager, the boot watcher")
            sandbox.start()
            asyncio.run(acts(sandbox, say))
        except DemoFailure as failure:
            print(f"\ndemo failed: {failure}", file=sys.stderr)
            return 1
        except (TimeoutError, OSError, httpx.HTTPError) as error:
            print(f"\ndemo failed: {error}; logs are in {state}/cloud/logs", file=sys.stderr)
            return 1
        finally:
            say.say("stopping everything the demo started")
            sandbox.stop()
    say.say("done: four acts, every start path the one narrated, nothing left running")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
