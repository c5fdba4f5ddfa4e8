"""Command line: `up`, `status`, `down` for people and make; `boot-watcher`, `moto-server` for start()."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from warmswarm_sandbox.cloud import Sandbox, SandboxError
from warmswarm_sandbox.services import (
    SANDBOX_CACHE_MOUNT_PATH,
    caller_settings,
    new_ops_token,
    start_autoscaler,
    start_director,
)


def _up(args: argparse.Namespace) -> int:
    sandbox = Sandbox(args.state_dir, boot_s=args.boot_s, start_s=args.start_s)
    sandbox.start()
    if args.with_services:
        try:
            ops_token = new_ops_token()
            # Ops try buffers, recycling or a cap by hand: `AUTOSCALING_HOT_BUFFER='{"t3.medium": 1}' make up`.
            settings, ignored = caller_settings(os.environ)
            if ignored:
                print(f"ignored (the sandbox sets them): {', '.join(ignored)}", file=sys.stderr)
            if settings:
                print(f"the autoscaler takes from your environment: {', '.join(sorted(settings))}", file=sys.stderr)
            autoscaling_url = start_autoscaler(sandbox, settings=settings, ops_token=ops_token)
            sandbox.add_endpoint("AUTOSCALING_URL", autoscaling_url)
            director = start_director(sandbox, autoscaling_url=autoscaling_url, ops_token=ops_token)
            sandbox.add_endpoint("DIRECTOR_URL", director.url)
            sandbox.add_endpoint("OPS_TOKEN", ops_token)
            # What the platform presents to /v1/services (the README's curl examples use it).
            sandbox.add_endpoint("DIRECTOR_API_TOKEN", director.api_token)
            sandbox.add_endpoint("CACHE_MOUNT_PATH", SANDBOX_CACHE_MOUNT_PATH)
        except BaseException:
            sandbox.stop()
            raise
    for key, value in sandbox.endpoints_env().items():
        print(f"{key}={value}")
    return 0


def _status(args: argparse.Namespace) -> int:
    print(json.dumps(Sandbox.attach(args.state_dir).status(), indent=2))
    return 0


def _down(args: argparse.Namespace) -> int:
    # stop() on a dir with no sandbox does nothing: `down` twice is fine.
    Sandbox(args.state_dir).stop()
    return 0


def _boot_watcher(args: argparse.Namespace) -> int:
    from warmswarm_sandbox import boot_watcher

    boot_watcher.main(args.state_dir.absolute())
    return 0


def _moto_server(args: argparse.Namespace) -> int:
    from moto import server

    # werkzeug logs every request (five DescribeInstances a second from the watcher): keep errors.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server.main(["-H", "127.0.0.1", "-p", str(args.port)])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warmswarm_sandbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start the sandbox in the background and print its endpoints")
    up.add_argument("--state-dir", type=Path, required=True)
    up.add_argument("--boot-s", type=float, default=1.0, help="how long an instance takes to boot")
    up.add_argument(
        "--start-s",
        type=float,
        default=None,
        help="how long a stopped instance takes to boot again once started (default: AWS's ratio to --boot-s)",
    )
    up.add_argument("--with-services", action="store_true", help="also start warmswarm's services")
    up.set_defaults(run=_up)

    status = commands.add_parser("status", help="print every instance (and its node) and volume as JSON")
    status.add_argument("--state-dir", type=Path, required=True)
    status.set_defaults(run=_status)

    down = commands.add_parser("down", help="stop everything and remove the state")
    down.add_argument("--state-dir", type=Path, required=True)
    down.set_defaults(run=_down)

    watcher = commands.add_parser("boot-watcher", help="internal: started by up")
    watcher.add_argument("--state-dir", type=Path, required=True)
    watcher.set_defaults(run=_boot_watcher)

    moto = commands.add_parser("moto-server", help="internal: started by up")
    moto.add_argument("--port", type=int, required=True)
    moto.set_defaults(run=_moto_server)

    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
    except SandboxError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
