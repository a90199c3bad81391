"""`xds serve`: the policy and the forecaster over HTTP."""

from __future__ import annotations

import os
import signal
import sys

from xdscheduler.arguments import number, port
from xdscheduler.errors import UserError
from xdscheduler.serving.gate import TOKEN_ENV, api_token


def cmd_serve(args) -> None:
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import start

    if args.detach and not args.address:
        raise UserError(
            "--detach leaves the app on a Ray cluster that outlives this process: "
            "give its --address (an embedded Ray ends with this process)"
        )
    scn = load_scenario(args.scenario or default_scenario_path())
    token = api_token()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a service manager's stop
    url = start(
        args.address, args.policy_path, scn, port=args.port, token=token, replicas=args.replicas
    )
    print(
        f"serving POST {url}/policy/act, POST {url}/policy/decide, POST {url}/forecast, "
        f"GET {url}/healthz, and live studies at GET {url}/ (dashboard) and {url}/metrics "
        f"(scenario {scn.name}; API documented at {url}/docs); `serve shutdown` or Ctrl-C "
        f"ends it"
    )
    announce_token(url, token)
    if not args.detach:
        block_until_interrupted()


def announce_token(url: str, token: str) -> None:
    """Say once how to authenticate: the token itself only when this process made it up."""
    if os.environ.get(TOKEN_ENV) == token:
        print(
            f"requests need 'Authorization: Bearer ${TOKEN_ENV}'; in a browser open "
            f"{url}/?token=${TOKEN_ENV} once",
            file=sys.stderr,
        )
        return
    print(
        f"API token (shown once; set {TOKEN_ENV} to choose it): {token}\n"
        f"requests need 'Authorization: Bearer {token}'; in a browser open "
        f"{url}/?token={token} once",
        file=sys.stderr,
    )


def block_until_interrupted() -> None:
    """Keep this process (and what it serves) alive until Ctrl-C, or a SIGTERM (a service
    manager's stop), either ending it cleanly with status 0."""
    import time

    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the policy and the forecaster over HTTP",
        description="serve the policy and the forecaster over HTTP",
    )
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: five_domains)")
    p.add_argument("--policy-path", help="trained policy (default: the shipped one)")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument("--address", help="Ray cluster address (default: an embedded local Ray)")
    p.add_argument(
        "--replicas",
        type=number(int, 1, 64),
        default=1,
        help="replicas at most, added while many requests are in flight (default "
        "1: it answers HTTP itself; more: Serve's HAProxy spreads requests over "
        "them, see docs/serving-load.md)",
    )
    p.add_argument(
        "--detach",
        action="store_true",
        help="return once serving, leaving the app on the cluster (needs --address: "
        "an embedded Ray ends with this process); default: serve until Ctrl-C",
    )
    p.set_defaults(fn=cmd_serve)
