"""`xds serve`: the policy and the forecaster over HTTP."""

from __future__ import annotations

from xdscheduler.arguments import port
from xdscheduler.errors import UserError


def cmd_serve(args) -> None:
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.serving.app import start

    if args.detach and not args.address:
        raise UserError("--detach leaves the app on a Ray cluster that outlives this process: "
                        "give its --address (an embedded Ray ends with this process)")
    scn = load_scenario(args.scenario or default_scenario_path())
    url = start(args.address, args.policy_path, scn, port=args.port)
    print(f"serving POST {url}/policy/act, POST {url}/forecast, GET {url}/healthz, and live "
          f"studies at GET {url}/ (dashboard) and {url}/metrics (scenario {scn.name}); "
          f"`serve shutdown` or Ctrl-C ends it")
    if not args.detach:
        block_until_interrupted()


def block_until_interrupted() -> None:
    """Keep this process (and what it serves) alive until Ctrl-C."""
    import time

    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the policy and the forecaster over HTTP",
                       description="serve the policy and the forecaster over HTTP")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: five_domains)")
    p.add_argument("--policy-path", help="trained policy (default: the shipped one)")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument("--address", help="Ray cluster address (default: an embedded local Ray)")
    p.add_argument("--detach", action="store_true",
                   help="return once serving, leaving the app on the cluster (needs --address: "
                        "an embedded Ray ends with this process); default: serve until Ctrl-C")
    p.set_defaults(fn=cmd_serve)
