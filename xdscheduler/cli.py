"""The `xds` command: every group of commands, and `xds run` (a study with its report)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from xdscheduler import model_cli
from xdscheduler.arguments import Parser, as_command, number, port, run, seed
from xdscheduler.costmodel import cli as costmodel_cli
from xdscheduler.errors import Interrupted, UserError
from xdscheduler.faults import cli as faults_cli
from xdscheduler.forecast import cli as forecast_cli
from xdscheduler.live import cli as live_cli
from xdscheduler.live import layers_cli
from xdscheduler.model_cli import commander, print_json
from xdscheduler.report import cli as report_cli
from xdscheduler.rl import cli as rl_cli
from xdscheduler.runtime import cli as runtime_cli
from xdscheduler.serving import cli as serving_cli
from xdscheduler.serving.gate import TOKEN_ENV, api_token
from xdscheduler.sharing import cli as sharing_cli

# ---------------------------------------------------------------- run


# What `xds run` takes when neither the command line nor a resumed study says (None in the
# parser, so that --resume can tell what was given).
RUN_DEFAULTS = {"hours": 24.0, "out": "xds-run", "speed": 1.0}


def fault_scale(text: str) -> float | None:
    """`--faults SCALE`: the published fault rates times SCALE; 0 is no faults at all."""
    return number(float, 0, 1000)(text) or None


def _resume(args):
    """`--resume OUT`: the interrupted study's own parameters, from OUT/study.json, set on
    `args`; returns its scenario. A study folder is data that may come from anyone: the policy
    it names (code) and the endpoint (which would receive the API token) are used only when the
    command line names them again, or, for the policy, when it is what the study began with."""
    from xdscheduler.runtime.folder import SPEC, StudyFolder, trusted
    from xdscheduler.scenario import parse_scenario

    given = [
        f"--{f.replace('_', '-')}"
        for f in (
            "scenario",
            "policies",
            "hours",
            "seed",
            "faults",
            "forecast",
            "local",
            "force",
            "out",
            "realtime",
            "speed",
        )
        if getattr(args, f) is not None and getattr(args, f) is not False
    ]
    if given:
        raise UserError(
            "--resume takes the study's own parameters from its folder: leave out "
            + ", ".join(given)
        )
    spec = StudyFolder(args.resume).spec()
    trusted(spec, args.resume, args.policy_path, args.serve_url)
    args.out, args.hours, args.seed = args.resume, spec.hours, spec.seed
    args.policies, args.faults, args.forecast = ",".join(spec.policies), spec.faults, spec.forecast
    args.realtime, args.speed = spec.realtime, spec.speed
    args.policy_path, args.serve_url = spec.policy_path, spec.serve_url
    return parse_scenario(spec.scenario, f"{args.resume}/{SPEC}")


def _used(args, policies: list[str]) -> None:
    """Refuse options this run would not use: a flag silently ignored is a mistake unseen."""
    if args.local and args.address:
        raise UserError("--address names a Ray cluster and --local runs without Ray: give one")
    if args.policy_path and "ppo" not in policies:
        raise UserError(
            "--policy-path is the trained policy of ppo, which --policies leaves "
            "out: add ppo, or leave --policy-path out"
        )
    forecast = args.forecast or (args.forecast is None and args.faults is not None)
    if args.serve_url and "ppo" not in policies and not forecast:
        raise UserError(
            "--serve-url is where ppo decides and the demand forecast is asked; "
            "this run has neither (add ppo to --policies, or --forecast)"
        )


def _serve(args, scn, token: str) -> str | None:
    """The Serve app this run needs started (for `--serve` or `--dashboard`): its URL."""
    if args.speed != 1.0 and not args.realtime:
        raise UserError("--speed paces a live study: add --realtime")
    if args.dashboard is not None and (not args.realtime or args.local):
        raise UserError("--dashboard shows a live study on Ray: add --realtime, leave out --local")
    if args.serve and not args.serve_url and args.local:
        raise UserError("--serve needs Ray; leave out --local")
    if args.dashboard is None and not (args.serve and not args.serve_url):
        return None
    from xdscheduler.serving.app import start

    url = start(
        args.address,
        args.policy_path,
        scn,
        port=8000 if args.dashboard is None else args.dashboard,
        token=token,
    )
    if args.dashboard is not None:
        print(f"dashboard: {url}/   metrics: {url}/metrics", file=sys.stderr, flush=True)
        serving_cli.announce_token(url, token)
    return url


def _interrupted(out) -> str:
    from xdscheduler.runtime.folder import JOURNAL

    if (out / JOURNAL).exists():
        return f"interrupted; resume with xds run --resume {out}"
    return (
        "interrupted; a study run with --local keeps no journal to resume: run it again "
        "with --force"
    )


def cmd_run(args) -> None:
    from pathlib import Path

    from xdscheduler.registry import parse_policies
    from xdscheduler.report.writer import report_json
    from xdscheduler.runtime.study import run_study
    from xdscheduler.scenario import default_scenario_path, load_scenario
    from xdscheduler.sim.records import Report

    if args.schema:
        print_json(Report.model_json_schema())
        return
    if args.resume:
        scn = _resume(args)
    else:
        scn = load_scenario(args.scenario or default_scenario_path())
        vars(args).update({k: v for k, v in RUN_DEFAULTS.items() if getattr(args, k) is None})
    policies = parse_policies(args.policies)
    _used(args, policies)
    seed = scn.seed if args.seed is None else args.seed
    out = Path(args.out)
    token = api_token()  # the app started here asks for it; one at --serve-url for its own
    started = _serve(args, scn, token)
    serve_url = args.serve_url or (started if args.serve else None)
    options = {
        "policy_path": args.policy_path,
        "serve_url": serve_url,
        "serve_token": os.environ.get(TOKEN_ENV) if args.serve_url else token,
    }
    try:
        report = run_study(
            scn,
            policies,
            args.hours,
            seed,
            out,
            address=args.address,
            local=args.local,
            realtime=args.realtime,
            speed=args.speed,
            policy_options=options,
            faults=args.faults,
            forecast=args.forecast,
            mode="resume" if args.resume else "force" if args.force else "new",
        )
    except KeyboardInterrupt:
        raise Interrupted(_interrupted(out)) from None
    if args.json:
        print_json(report_json(report))
        return
    _print_study(report, scn.name, args.hours, seed, out)
    if args.dashboard is not None and sys.stdin.isatty():  # someone may still be looking
        print("the dashboard shows the study's end until Ctrl-C", file=sys.stderr)
        serving_cli.block_until_interrupted()


def _print_study(report, name: str, hours: float, seed: int, out) -> None:
    """A study's summary on the terminal: every policy's figures, then the fit/giant split."""
    print(
        f"{name}: {report.jobs} jobs over {hours:g} h, seed {seed} "
        f"({report.runtime}); report in {out}/report.html"
    )
    cols = [
        ("mean_jct_s", "mean JCT h", 1 / 3600),
        ("p95_jct_s", "p95 JCT h", 1 / 3600),
        ("useful_utilization", "useful", 1),
        ("mean_queue_s", "queue h", 1 / 3600),
        ("jobs_completed", "done", 1),
        ("cross_domain_gb", "WAN GB", 1),
        ("cross_domain_cost_usd", "WAN $", 1),
        ("decision_ms_p50", "dec ms p50", 1),
        ("jobs_never_started", "never run", 1),
        ("objective_work", "R (work)", 1),
        ("objective", "R (per job)", 1),
    ]
    print(
        f"offered load {report.offered_load:.2f} (other tenants hold "
        f"{report.background_load:.0%}); against {report.comparison.baseline}"
    )
    _print_rows(report.policies, cols, lambda row, key: getattr(row, key))
    first = next(iter(report.policies.values()))
    giants = first.classes["giant"]
    print(
        f"\n{giants.jobs} giants (asking for more than the largest domain's free share, "
        f"{first.free_share_gpus:.0f} accelerators): {giants.gpu_time_share:.0%} of the "
        f"offered GPU-time"
    )
    cols = [
        (f"{c}.{key}", f"{c} {label}", k)
        for c in ("fit", "giant")
        for key, label, k in (
            ("mean_jct_s", "JCT h", 1 / 3600),
            ("never_started", "never run", 1),
            ("unfinished", "unfinished", 1),
            ("crossed", "across", 1),
        )
    ]
    _print_rows(
        report.policies,
        cols,
        lambda row, key: getattr(row.classes[key.split(".")[0]], key.split(".")[1]),
    )


def _print_rows(policies: dict, cols: list[tuple[str, str, float]], get) -> None:
    """A plain table: a row per policy, the figure `get(row, key)` of each column, scaled."""
    widths = [max(12, len(label) + 2) for _, label, _ in cols]
    print(
        f"{'policy':<22}"
        + "".join(f"{label:>{w}}" for (_, label, _), w in zip(cols, widths, strict=True))
    )
    for name, row in policies.items():
        cells = [get(row, key) for key, _, _ in cols]
        print(
            f"{name:<22}"
            + "".join(
                "–".rjust(w) if v is None else f"{v * k:>{w}.3g}"
                for v, (_, _, k), w in zip(cells, cols, widths, strict=True)
            )
        )


# ---------------------------------------------------------------- parser

MAX_HOURS = 24 * 30.0  # a study's arrivals: a month at most
HOURS = number(float, 0, MAX_HOURS, above=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("xdscheduler")
    except PackageNotFoundError:  # run from a source tree that is not installed
        return "(not installed)"


def _add_study_commands(sub) -> None:
    """`run`, `compare`, `bill`, `tenants`, `bench`: studies and what is read from them."""
    command = commander(sub)
    p = command("run", cmd_run, "run a study: every policy over days of jobs, with a report")
    p.add_argument("scenario", nargs="?", help="scenario YAML (default: five_domains)")
    p.add_argument(
        "--policies",
        help="comma-separated (default: all): fifo-single-domain, "
        "backfill-single-domain, gang-single-domain, planner-single-domain, "
        "greedy-cross-domain, planner, ppo (the trained agents)",
    )
    p.add_argument("--policy-path", help="trained policy for ppo (default: the shipped one)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="ppo decides through the Serve endpoint (started here if needed)",
    )
    p.add_argument(
        "--serve-url",
        help="an endpoint already running, e.g. http://127.0.0.1:8000 (implies --serve)",
    )
    p.add_argument(
        "--hours", type=HOURS, help=f"hours of job arrivals, at most {MAX_HOURS:g} (default 24)"
    )
    p.add_argument("--seed", type=seed, help="seed (default: the scenario's)")
    p.add_argument(
        "--out",
        help="folder for the report (default xds-run); "
        "one study at a time, and one that holds a study, or a file of a study's "
        "names, is refused (see --force, --resume)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the study (or the files of its names) the --out folder holds",
    )
    p.add_argument(
        "--resume",
        metavar="OUT",
        help="continue the interrupted study in OUT with its own parameters: each "
        "policy replays its journal and goes on",
    )
    p.add_argument("--address", help="Ray cluster address (default: an embedded local Ray)")
    p.add_argument("--local", action="store_true", help="no Ray: domains as plain objects")
    p.add_argument(
        "--realtime",
        action="store_true",
        help="live service: one simulated second per wall-clock second (see "
        "--speed); its state is on the board the dashboard and /metrics read",
    )
    p.add_argument(
        "--speed",
        type=number(float, 0, 86400, above=True),
        help="with --realtime: simulated seconds per wall-clock second (default 1)",
    )
    p.add_argument(
        "--dashboard",
        type=port,
        metavar="PORT",
        help="with --realtime: serve the live dashboard (GET /) and Prometheus "
        "metrics (GET /metrics) on 127.0.0.1:PORT while the study runs",
    )
    p.add_argument(
        "--faults",
        type=fault_scale,
        metavar="SCALE",
        help="inject node, GPU, domain, link and straggler faults at the published "
        "rates times SCALE (1: as published; 50: a stress test; 0: none, as without "
        "--faults)",
    )
    p.add_argument(
        "--forecast",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="consult the demand forecast every simulated hour: hold accelerators for "
        "the scenario's announced jobs before they arrive and, under --faults, "
        "size the backup pools (default: on under --faults, off otherwise)",
    )
    p.add_argument("--json", action="store_true", help="print report.json's content")
    p.add_argument(
        "--schema",
        action="store_true",
        help="print report.json's JSON Schema (units in the field names) and exit",
    )
    runtime_cli.register(sub)
    report_cli.register(sub)


# Commands in groups (`xds live jobs`, `xds study run`); each is also at the top level under its
# old name (`xds jobs`, `xds run`) for one release.
GROUPS = {
    "study": ("studies in simulation: run, compare, bill, tenants, bench", _add_study_commands),
    "live": (
        "the live control plane: up, down, jobs, submit, logs, cancel, domains, links, profile",
        live_cli.register,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="xds", description="Schedule large-model training across compute domains.")
    parser.add_argument("--version", action="version", version=f"xds {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (text, register) in GROUPS.items():
        group = sub.add_parser(name, help=text, description=text)
        register(group.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND"))
    model_cli.register(sub)
    for add_commands in (
        _add_study_commands,
        live_cli.register,
        forecast_cli.register,
        faults_cli.register,
        rl_cli.register,
        serving_cli.register,
        costmodel_cli.register,
        layers_cli.register,
        sharing_cli.register,
    ):
        add_commands(sub)
    return parser


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever `sys.stderr` is when it writes (a redirection, a capture)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _logging() -> None:
    """Our progress and events on standard error, with a time (what a log file needs); other
    libraries' loggers are left as they are."""
    logger = logging.getLogger("xdscheduler")
    if not logger.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main(argv: list[str] | None = None) -> int:
    _logging()
    return run(build_parser(), argv)


if __name__ == "__main__":
    as_command(main)
