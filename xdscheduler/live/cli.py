"""`xds up`, `xds down`, `xds links probe`, `xds domains`, `xds submit`, `xds jobs`, `xds logs`,
`xds cancel`: the live control plane from the command line."""

from __future__ import annotations

import csv
import io
import json
import logging
import sys
import time
from pathlib import Path

from xdscheduler.arguments import number
from xdscheduler.errors import UserError
from xdscheduler.textfile import output_file, write_atomic

log = logging.getLogger("xdscheduler.live")
CANCEL_WAIT_S = 10.0  # how long `xds cancel` follows a job to its end (it takes < 5 s)


def _state_path(args) -> Path:
    from xdscheduler.live.client import default_state_path

    return Path(args.state) if args.state else default_state_path()


def _with_state(p) -> None:
    p.add_argument(
        "--state",
        metavar="FILE",
        help="the cluster's state file (default: XDS_CLUSTER, else ~/.xds/cluster.json)",
    )


def register(sub) -> None:
    p = sub.add_parser(
        "up",
        help="start a local cluster of labelled Ray nodes for a scenario "
        "(or attach to one with --address)",
        description="Start a Ray head and, per domain of the scenario, Ray nodes "
        "labelled xds.domain=<name> in a network namespace of the domain's own, "
        "with every link shaped to its bandwidth; record it in a state file. "
        "With --address, only attach to a cluster whose nodes carry the labels.",
    )
    p.add_argument("scenario", help="scenario file, e.g. scenarios/local_three_domains.yaml")
    p.add_argument("--address", help="a running Ray cluster (HOST:PORT) to attach to")
    p.add_argument(
        "--wait",
        type=number(float, 0, 86400),
        default=0.0,
        metavar="SECONDS",
        help="with --address: how long to wait for a node of every domain to join "
        "(default 0: refuse at once if one is missing)",
    )
    p.add_argument(
        "--storage",
        help="where jobs checkpoint and the controller keeps its "
        "journal (default: beside the state file)",
    )
    p.add_argument(
        "--profile",
        help="the plain-dp stack's profile from xds calibrate that "
        "jobs are planned with (default: the model's shipped constants), e.g. "
        "scenarios/profiles/local-cpu-plain-dp.yaml",
    )
    p.add_argument(
        "--policy",
        choices=("planner", "ppo"),
        default="planner",
        help="what decides where jobs run: the planner's search, or the trained "
        "agents asked over HTTP (POST /policy/act) among the same candidates",
    )
    p.add_argument(
        "--http-port",
        type=number(int, 1024, 65535),
        help="where the HTTP API (jobs, policy, forecast) answers on the head "
        "(default: a free port; 8000 with --address)",
    )
    p.add_argument(
        "--slower",
        action="append",
        default=[],
        metavar="DOMAIN=FACTOR",
        help="a cluster started here: hold DOMAIN's accelerators to 1/FACTOR (1-100) of "
        "their share of the cores, as slower hardware would run; repeatable. `xds profile` "
        "measures the domains' speeds for the planner",
    )
    _with_state(p)
    p.add_argument("--json", action="store_true", help="print the state as one JSON object")
    p.set_defaults(fn=cmd_up)

    p = sub.add_parser(
        "down", help="stop what `xds up` started (by process id) and remove its namespaces"
    )
    _with_state(p)
    p.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep the Ray temp folder with the nodes' logs (removed by default)",
    )
    p.set_defaults(fn=cmd_down)

    p = sub.add_parser("links", help="the live cluster's WAN links")
    lsub = p.add_subparsers(dest="links_command", required=True, metavar="COMMAND")
    q = lsub.add_parser(
        "probe", help="measure every link through the path jobs use; configured vs measured"
    )
    _with_state(q)
    q.add_argument(
        "--seconds",
        type=number(float, 0.2, 60),
        default=2.0,
        help="how long each direction sends (0.2-60)",
    )
    q.add_argument(
        "--json", action="store_true", help="print one JSON object: a record per link and direction"
    )
    q.set_defaults(fn=cmd_links_probe)
    q = lsub.add_parser(
        "set",
        help="reshape a link of the cluster `xds up` built, as a WAN's "
        "bandwidth swings: the agents report the new rate and the controller "
        "re-plans its jobs with it",
    )
    q.add_argument("src", help="the domain the link leaves")
    q.add_argument("dst", help="the domain it reaches")
    q.add_argument(
        "gbps", type=number(float, 0.0001, 100), help="its goodput from now on, Gbit/s (0.0001-100)"
    )
    q.add_argument("--both", action="store_true", help="both directions")
    _with_state(q)
    q.set_defaults(fn=cmd_links_set)

    p = sub.add_parser(
        "profile",
        help="measure each domain's accelerators (GEMMs per dtype "
        "and size, memory bandwidth) and links; write catalog entries",
    )
    p.add_argument("--domain", action="append", help="profile only this domain (repeatable)")
    p.add_argument(
        "--seconds", type=number(float, 0.05, 10), default=0.3, help="per measurement (0.05-10)"
    )
    p.add_argument("--out", help="write the entries as a catalog file (accelerators: ...)")
    p.add_argument(
        "--runs",
        metavar="CSV",
        help="write the reference trainings as measured "
        "runs on those entries, for xds calibrate --stack plain-dp --accelerators OUT",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="the controller plans from now on with "
        "the measured entries and the plain-dp constants fitted to the reference "
        "trainings (journalled)",
    )
    _with_state(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_profile)

    register_http(sub)


# The commands that only ask the live API over HTTP: `xds` runs them without importing the rest
# of the package (`xdscheduler.entry`), and they answer in what Python and one request take.
HTTP_COMMANDS = ("submit", "jobs", "logs", "cancel", "domains")


def register_http(sub) -> None:
    for name, fn, text, job in (
        ("submit", cmd_submit, "submit a training job to the live cluster", True),
        (
            "jobs",
            cmd_jobs,
            "the live cluster's jobs: where, how far, predicted and measured step time",
            False,
        ),
        ("logs", cmd_logs, "a job's decisions, steps and faults, from the journal", True),
        ("cancel", cmd_cancel, "stop a job in any state, and follow it to its end (< 5 s)", True),
    ):
        p = sub.add_parser(name, help=text, description=text)
        if job:
            p.add_argument(
                "job",
                help="job file (YAML), e.g. scenarios/jobs/gpt-small.yaml"
                if name == "submit"
                else "the job's name",
            )
        _with_state(p)
        if name != "cancel":
            p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(fn=fn)
    p = sub.add_parser(
        "domains",
        help="each domain as its agent last reported it: status (up, "
        "suspect, down), nodes, free accelerators, jobs, links, demand forecast",
    )
    _with_state(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_domains)


def http_main(argv: list[str], prog: str = "xds") -> int:
    """`xds COMMAND ...` for the HTTP commands alone, as `xdscheduler.cli.main` runs any."""
    from xdscheduler.arguments import Parser, run

    parser = Parser(prog=prog, description="the live cluster's jobs and domains over HTTP")
    register_http(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return run(parser, argv)


def cmd_up(args) -> None:
    from xdscheduler.live import cluster

    if args.wait and not args.address:
        raise UserError("--wait is for --address: `xds up` waits for the nodes it starts itself")
    path = _state_path(args)
    state, counts = cluster.up(
        args.scenario,
        path,
        address=args.address,
        storage=args.storage,
        profile=args.profile,
        http_port=args.http_port,
        policy=args.policy,
        wait_s=args.wait,
        say=_progress,
        slower=_slower(args.slower),
    )
    cluster.disconnect()
    if args.json:
        print(json.dumps({**state.model_dump(exclude={"token"}), "nodes_per_domain": counts}))
        return
    how = "attached to" if state.attached else "started"
    print(f"{how} a cluster at {state.address} (state in {path})")
    for name, n in counts.items():
        where = f" at {state.domains[name]}" if name in state.domains else ""
        slow = state.slower.get(name)
        held = f", held to 1/{slow:g} of its CPU share" if slow else ""
        print(f"  domain {name}: {n} node(s){where}{held}")
    if state.dashboard:
        print(f"  dashboard and job server: {state.dashboard} (token in the state file)")
    print(
        f"  HTTP API: {state.api}/jobs, {state.api}/policy/act, {state.api}/forecast "
        f"(docs at {state.api}/jobs/docs; bearer token: api_token in the state file)"
    )


def _slower(pairs: list[str]) -> dict[str, float]:
    """`--slower DOMAIN=FACTOR`s as domain -> factor (`cluster.up` checks the factors)."""
    from xdscheduler.live.cluster import SLOWER_FORM

    out: dict[str, float] = {}
    for pair in pairs:
        name, _, factor = pair.partition("=")
        try:
            value: float | None = float(factor)  # no "=" leaves no factor: refused too
        except ValueError:
            value = None
        if not name or value is None:
            raise UserError(f"{SLOWER_FORM}; got {pair!r}")
        out[name] = value
    return out


def _progress(line: str) -> None:
    """A progress line of a long command, on stderr (stdout holds its answer, --json)."""
    print(line, file=sys.stderr, flush=True)


def cmd_down(args) -> None:
    from xdscheduler.live import cluster

    for line in cluster.down(_state_path(args), _progress, args.keep_logs):
        print(line)


def cmd_links_set(args) -> None:
    from xdscheduler.live import cluster

    for line in cluster.reshape(_state_path(args), args.src, args.dst, args.gbps, args.both):
        print(line)


def cmd_links_probe(args) -> None:
    from xdscheduler.live import cluster

    state = cluster.connect(_state_path(args))
    from xdscheduler.live import probe  # imports ray: after connect set its token

    rows = probe.probe_links(cluster.load_scenario(state.scenario), args.seconds, _progress)
    from xdscheduler.live import controller

    controller.ask(controller.controller(state).links_probed, rows)  # the domains' samples
    cluster.disconnect()
    if args.json:
        print(json.dumps({"links": rows}))
        return
    print(f"{'link':<24} {'configured Gbit/s':>18} {'measured Gbit/s':>16} {'error':>8}")
    for r in rows:
        err = r["measured_gbps"] / r["configured_gbps"] - 1
        print(
            f"{r['src'] + ' -> ' + r['dst']:<24} {r['configured_gbps']:>18.3f} "
            f"{r['measured_gbps']:>16.3f} {err:>+8.1%}"
        )


def _api(args):
    """The cluster's HTTP API (`live.client`): no Ray driver, an answer in well under a second.
    Inside a `ray job submit` job (RAY_ADDRESS set, no state file here), the API of the cluster
    the job runs in, as its controller records it."""
    import os

    from xdscheduler.live.client import LiveClient, recorded

    path = _state_path(args)
    if not path.exists() and os.environ.get("RAY_ADDRESS"):
        from xdscheduler.live import cluster

        found = cluster.connect(path)
        cluster.disconnect()
        api, token = found.api, found.api_token
    else:
        try:  # the two fields it needs, without validating the whole file (pydantic's import)
            state = json.loads(recorded(path))
            api, token = state.get("api"), state.get("api_token")
        except (ValueError, AttributeError):
            raise UserError(f"{path} is not a cluster state file") from None
    if not api:
        raise UserError(
            f"the cluster recorded at {path} has no HTTP API: `xds down` and `xds up` it again"
        )
    return LiveClient(api, token)


def cmd_submit(args) -> None:
    from xdscheduler.yamlfile import read_yaml

    spec = read_yaml(args.job, "job")
    if not isinstance(spec, dict):
        raise UserError(
            f"{args.job}: a job file is a mapping of fields (name, model, steps, "
            "...); see scenarios/jobs/"
        )
    row = _api(args).submit(spec, args.job)
    print(json.dumps(row) if args.json else f"submitted {row['job']}: {row['status']}")


def cmd_jobs(args) -> None:
    rows = _api(args).jobs()
    if args.json:
        print(json.dumps({"jobs": rows}))
        return
    print(
        "step times: predicted by the model (pred.), as corrected from the steps seen "
        "(corr.), measured (meas., median), wall seconds a step (wall: with what the run "
        "does between steps)"
    )
    print(
        f"{'job':<20} {'status':<10} {'domains':<22} {'step':>9} {'loss':>7} "
        f"{'pred. s':>8} {'corr. s':>8} {'meas. s':>8} {'wall s':>8} {'start s':>8}"
    )
    for r in rows:
        where = "+".join(f"{d}:{n}" for d, n in r["domains"].items()) or "-"
        print(
            f"{r['job']:<20} {r['status']:<10} {where:<22} "
            f"{r['step']:>4}/{r['steps']:<4} {_num(r['loss'], 3):>7} "
            f"{_num(r['predicted_step_s'], 3):>8} {_num(r['corrected_step_s'], 3):>8} "
            f"{_num(r['measured_step_s'], 3):>8} {_num(r.get('wall_step_s'), 3):>8} "
            f"{_num(r.get('startup_s'), 3):>8}"
        )


def cmd_domains(args) -> None:
    out = _api(args).domains()
    if args.json:
        print(json.dumps(out))
        return
    probed = {(r["src"], r["dst"]): r["measured_gbps"] for r in out["probed"]}
    print(
        f"{'domain':<10} {'status':<8} {'nodes':>5} {'free/CPUs':>10} {'free/GPUs':>10} "
        f"{'held':>5} {'in 10 min':>10} {'in 1 h':>8}  jobs"
    )
    for d in out["domains"]:
        ahead = {h["horizon_min"]: h["mean"] for h in d.get("forecast") or []}
        jobs = ", ".join(f"{j['job']}:{j['workers']}" for j in d.get("jobs", [])) or "-"
        print(
            f"{d['domain']:<10} {d['status']:<8} {_num(d.get('nodes'), 3):>5} "
            f"{_num(d.get('free_cpus'), 4)}/{_num(d.get('cpus'), 4):<5} "
            f"{_num(d.get('free_gpus'), 4):>4}/{_num(d.get('gpus'), 4):<5} "
            f"{_num(d.get('held'), 4):>5} {_num(ahead.get(10), 3):>10} "
            f"{_num(ahead.get(60), 3):>8}  {jobs}"
        )
    print("indicators (as a study's domains report them):")
    for d in out["domains"]:
        shown = ", ".join(f"{k} {_num(v, 3)}" for k, v in d.get("indicators", {}).items())
        print(f"  {d['domain']}: {shown or '-'}")
        for why in d.get("rejected", []):
            print(f"  {d['domain']}: rejected: {why}")
    print("links (Gbit/s): the bucket's rate, the last `xds links probe`, sent in the last report")
    for d in out["domains"]:
        for r in d.get("links", []):
            print(
                f"  {d['domain'] + ' -> ' + r['dst']:<22} rate {r['rate_gbps']:.3f}  probed "
                f"{_num(probed.get((d['domain'], r['dst'])), 4):>6}  sent "
                f"{_num(r['sent_gbps'], 3)}"
            )


def cmd_logs(args) -> None:
    events = _api(args).events(args.job)
    if not events:
        raise UserError(f"no job named {args.job!r}; `xds jobs` lists them")
    if args.json:
        print(json.dumps({"job": args.job, "events": events}))
        return
    import datetime

    for e in events:
        when = datetime.datetime.fromtimestamp(e.pop("time")).strftime("%H:%M:%S.%f")[:-3]
        kind = e.pop("event")
        text = (
            e.get("reason")
            if kind == "placed"
            else ", ".join(f"{k}={_num(v, 4)}" for k, v in e.items())
        )
        print(f"{when} {kind:<10} {text}")


def cmd_cancel(args) -> None:
    """Cancel, then follow the job to its end (a running one stops within CANCEL_GRACE_S)."""
    api = _api(args)
    start = time.monotonic()
    row = api.cancel(args.job)
    if row is None:
        raise UserError(f"no job named {args.job!r}; `xds jobs` lists them")
    while (
        row["status"] not in ("done", "failed", "cancelled")
        and time.monotonic() - start < CANCEL_WAIT_S
    ):
        time.sleep(0.2)
        row = api.job(args.job) or row
    print(f"{args.job}: {row['status']} at step {row['step']} ({time.monotonic() - start:.1f} s)")


def _num(v, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def cmd_profile(args) -> None:
    from xdscheduler.live import cluster

    for path, what in ((args.out, "catalog"), (args.runs, "runs CSV")):
        if path:
            output_file(Path(path), what)  # before the measurements, not after them
    state = cluster.connect(_state_path(args))
    scn = cluster.load_scenario(state.scenario)
    accelerator = {d.name: d.accelerator.name for d in scn.domains}  # of each domain
    for d in args.domain or []:
        if d not in accelerator:
            raise UserError(f"no domain {d!r}; the scenario has {', '.join(accelerator)}")
    import ray  # after connect set its token

    from xdscheduler.live import probe, profile
    from xdscheduler.live.training import trainer_env

    env = trainer_env(state.dashboard, ray.get_runtime_context().gcs_address)
    measured = profile.measure_domains(
        {d.name: d.gpus for d in scn.domains if not args.domain or d.name in args.domain},
        args.seconds,
        state.storage,
        env,
    )
    links = probe.probe_links(scn, 1.0)
    entries = [profile.entry(m, scn, f"{accelerator[m['domain']]}-{m['domain']}") for m in measured]
    rows = [
        row for m, e in zip(measured, entries, strict=True) for row in profile.run_rows(m, e.name)
    ]
    applied = _apply(state, scn, measured, accelerator) if args.apply else None
    cluster.disconnect()
    _write_profile(args, entries, rows)
    if args.json:
        print(
            json.dumps(
                {
                    "domains": measured,
                    "links": links,
                    "applied": applied,
                    "accelerators": [e.model_dump() for e in entries],
                }
            )
        )
        return
    _print_profile(args, measured, entries, links, applied)


def _apply(state, scn, measured: list[dict], accelerator: dict[str, str]) -> dict:
    """Have the controller plan with what was measured: one entry per accelerator type (a
    domain `xds up --slower` holds back counts as a type of its own), the medians over the
    domains that have it (what differs between them is noise of a short measurement, and what
    a domain really does differently the online correction learns), and the plain-dp
    constants fitted to every domain's reference trainings on it. The entries, the constants
    and their held-out error."""
    from xdscheduler import catalog
    from xdscheduler.costmodel.calibration import median_error
    from xdscheduler.live import controller, profile

    by_type: dict[str, list[dict]] = {}
    for m in measured:
        slow = state.slower.get(m["domain"])
        kind = accelerator[m["domain"]] + (f"-slower{slow:g}" if slow else "")
        by_type.setdefault(kind, []).append(m)
    # named apart from any earlier profile's: a name the catalog knows keeps its figures
    stamp = time.strftime("%Y%m%d-%H%M%S")
    adopted: dict[str, dict] = {}  # domain -> its accelerator entry
    rows: list[dict] = []
    for name, group in by_type.items():
        e = profile.entry(profile.pooled(group), scn, f"{name}-profiled-{stamp}")
        catalog.register(e, "xds profile")
        rows += [row for m in group for row in profile.run_rows(m, e.name)]
        adopted |= {m["domain"]: e.model_dump() for m in group}
    fitted = profile.fit_runner(rows)
    controller.ask(controller.controller(state).adopt, adopted, fitted.constants)
    return {
        "entries": adopted,
        "constants": fitted.constants,
        "median_abs_error_held_out": median_error(fitted.held_out),
    }


def _write_profile(args, entries: list, rows: list[dict]) -> None:
    import yaml

    from xdscheduler.live.profile import RUN_COLUMNS

    if args.out:
        write_atomic(
            Path(args.out),
            yaml.safe_dump({"accelerators": [e.model_dump() for e in entries]}, sort_keys=False),
            "catalog",
        )
    if args.runs:
        text = io.StringIO()
        out = csv.DictWriter(text, RUN_COLUMNS)
        out.writeheader()
        out.writerows(rows)
        write_atomic(Path(args.runs), text.getvalue(), "runs CSV")


def _print_profile(
    args, measured: list[dict], entries: list, links: list[dict], applied: dict | None
) -> None:
    for m, e in zip(measured, entries, strict=True):
        steps = ", ".join(
            f"L{t['layers']} H{t['hidden']} b{t['batch']}"
            + (f" mb{t['micro_batch']}" if t["micro_batch"] < t["batch"] else "")
            + f" {t['step_s']:.3f} s"
            for t in m["trainings"]
        )
        print(f"{m['domain']}: reference steps {steps}")
        print(
            f"{m['domain']}: {e.name}: fp32 {e.fp32_tflops:.3f} TFLOP/s, bf16 "
            f"{e.bf16_tflops:.3f} TFLOP/s, copy {e.memory_gbs:.1f} GB/s an accelerator, "
            f"gradient reduction {e.scaleup_gbs:.3f} GB/s bus bandwidth"
        )
    for r in links:
        print(
            f"  link {r['src']} -> {r['dst']}: {r['measured_gbps']:.3f} of "
            f"{r['configured_gbps']:.3f} Gbit/s"
        )
    if args.out:
        print(
            f"wrote {len(entries)} entries to {args.out} (name it in XDS_ACCELERATORS, or "
            "copy them into the scenario's accelerators:)"
        )
    if args.runs:
        print(
            f"wrote {len(measured) * len(measured[0]['trainings'])} reference trainings to "
            f"{args.runs} (xds calibrate {args.runs} --stack plain-dp --accelerators "
            f"{args.out or 'OUT'} --out PROFILE)"
        )
    if applied:
        print(
            f"the controller plans from now on with these entries and the plain-dp "
            f"constants fitted to the reference trainings (held-out median error "
            f"{applied['median_abs_error_held_out']:.1%})"
        )
