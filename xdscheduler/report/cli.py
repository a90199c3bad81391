"""`xds bill` and `xds tenants`: a study's metered usage, priced, and its tenants' figures;
`xds bench job`: the single-job experiment."""

from __future__ import annotations

import json
from pathlib import Path

from xdscheduler.arguments import number
from xdscheduler.errors import UserError

HOURS = number(float, 0, 30 * 24 * 4)  # a study's time, in hours
MAX_REPORT_BYTES = 64 << 20  # report.json: a month's study is a few hundred KB


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bill", help="a tenant's itemised bill from a study's ledger",
        description="Price a tenant's metered usage (accelerator-seconds per domain and class, "
                    "WAN traffic) from the study's append-only ledger, over a window of study "
                    "time: a line per job and item, totals per class, and a CSV.")
    p.add_argument("study", help="the study's --out folder")
    p.add_argument("--tenant", required=True, help="whose bill")
    p.add_argument("--policy", help="under which policy (default: planner, or the only one)")
    p.add_argument("--from", dest="start_h", type=HOURS, default=0.0,
                   help="from this hour of the study (default 0)")
    p.add_argument("--to", dest="end_h", type=HOURS, help="to this hour (default: the end)")
    p.add_argument("--csv", help="where to write the items (default: STUDY/bill-TENANT-"
                                 "POLICY.csv)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_bill)
    q = subparsers.add_parser("tenants", help="quota, use, borrowed and lent per tenant",
                              description="Each tenant's quota, use, borrowed and lent "
                                          "accelerator-hours, jobs admitted and preempted, wait "
                                          "and bill, per policy, from a study's report.json.")
    q.add_argument("study", nargs="?", default="xds-run", help="the study's --out folder")
    q.add_argument("--policy", help="only this policy")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(fn=cmd_tenants)
    b = subparsers.add_parser("bench", help="experiments that print a table with 95%% CIs",
                              description="experiments that print a table with 95% CIs")
    bsub = b.add_subparsers(dest="bench_command", required=True, metavar="ACTION")
    j = bsub.add_parser(
        "job", help="one job too large for a domain under swinging WAN bandwidth, six plans",
        description="The single-job experiment: Llama 3 70B on 4 x 64 H100 and Llama 3.1 405B "
                    "on 8 x 128 H100, links of B0 Gbit/s swinging by up to 30% (RTT 20-100 ms), "
                    "planned six ways (ours re-planned on a bandwidth forecast, Megatron's "
                    "default, FSDP, DiLoCo with H fixed, Sailor-style chosen once, MAST-style "
                    "on the largest domain) and compared in the cost model: T_step mean and "
                    "std, tokens/s, WAN GB a step, communication over computation and its "
                    "overlap, tokens and days to a target loss; 95% CIs over seeds.")
    j.add_argument("--sizes", default="70b,405b", help="job sizes: 70b, 405b (default both)")
    j.add_argument("--gbps", default="10,100",
                   help="the links' bandwidth B0 before the swings, Gbit/s (default 10,100)")
    j.add_argument("--seeds", type=number(int, 2, 1000), default=10,
                   help="seeds 0..N-1, each its own RTTs and swings (default 10)")
    j.add_argument("--hours", type=number(float, 0, 24 * 7.0, above=True), default=24.0,
                   help="hours of swings per seed (default 24)")
    j.add_argument("--out", default="xds-bench-job", help="folder for single_job.{csv,md,png}")
    j.add_argument("--readme", metavar="FILE",
                   help="replace the text between <!-- single-job:begin --> and "
                        "<!-- single-job:end --> in FILE with the table")
    j.add_argument("--json", action="store_true", help="print one JSON object")
    j.set_defaults(fn=cmd_bench_job)


def cmd_bench_job(args) -> None:
    from xdscheduler.report import single_job
    from xdscheduler.report.readme import check_readme, splice_readme

    if args.readme:
        check_readme(Path(args.readme), "single-job")  # before the run, not after it
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    try:
        gbps = [float(x) for x in args.gbps.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--gbps takes comma-separated numbers, got {args.gbps!r}") from None
    if not sizes or not gbps:
        raise UserError("--sizes and --gbps need at least one value each")
    frame = single_job.experiment(sizes, gbps, list(range(args.seeds)), args.hours)
    text = single_job.markdown(frame, args.hours)
    single_job.write(Path(args.out), frame, text)
    if args.readme:
        made = (f"Generated by `xds bench job --sizes {','.join(sizes)} --gbps "
                f"{','.join(f'{x:g}' for x in gbps)} --seeds {args.seeds} --hours "
                f"{args.hours:g} --readme {args.readme}`.")
        splice_readme(Path(args.readme), "single-job", text, made)
    if args.json:
        print(json.dumps({"headline": single_job.headline(frame),
                          "runs": frame.to_dict("records")}, indent=2))
        return
    print(text)
    print(f"files in {args.out}/ (single_job.csv, .md, .png)")


def _policy(asked: str | None, have: list[str]) -> str:
    """The policy asked for, else planner, else the only one the study ran."""
    if asked is not None:
        return asked
    if "planner" in have:
        return "planner"
    if len(have) == 1:
        return have[0]
    raise UserError(f"the study ran {', '.join(have)}: say which with --policy")


def cmd_bill(args) -> None:
    import math

    import pandas as pd

    from xdscheduler.report.bill import bill, render
    from xdscheduler.runtime.ledger import read_ledger
    from xdscheduler.textfile import write_atomic

    records = read_ledger(Path(args.study))
    policy = _policy(args.policy, sorted(records["policy"].unique()))
    end_s = math.inf if args.end_h is None else args.end_h * 3600
    b = bill(records, args.tenant, policy, args.start_h * 3600, end_s)
    csv = Path(args.csv) if args.csv else Path(args.study) / f"bill-{args.tenant}-{policy}.csv"
    total = {"job": "TOTAL", "kind": "", "domain": "", "accelerator": "", "unit": "",
             "quantity": float("nan"), "usd": b.total_usd}
    write_atomic(csv, pd.concat([b.items, pd.DataFrame([total])]).to_csv(index=False),
                 "the bill's CSV")
    if args.json:
        out = b.as_dict()
        out["to_s"] = None if math.isinf(b.end_s) else b.end_s
        print(json.dumps({**out, "csv": str(csv)}, indent=2))
        return
    print(render(b))
    print(f"items in {csv}")


def cmd_tenants(args) -> None:
    from xdscheduler.scenario import validated
    from xdscheduler.sim.records import Report
    from xdscheduler.textfile import read_text

    path = Path(args.study) / "report.json"
    if not path.exists():
        raise UserError(f"{path} not found: run a study with tenants first (xds run "
                        f"scenarios/three_tenants.yaml --out {args.study})")
    try:
        report = json.loads(read_text(path, "study report", MAX_REPORT_BYTES, "JSON"))
    except ValueError as e:
        raise UserError(f"{path} is damaged ({e})") from None
    validated(Report, report, str(path), "study report")  # the shape read below
    policies = report.get("policies", {})
    if args.policy and args.policy not in policies:
        raise UserError(f"no policy {args.policy!r} in {path}; it has {', '.join(policies)}")
    chosen = {p: v.get("tenants") for p, v in policies.items()
              if args.policy in (None, p)}
    if not any(chosen.values()):
        raise UserError(f"{path}: the study's scenario has no tenancy block")
    if args.json:
        print(json.dumps(chosen, indent=2))
        return
    head = (f"{'policy':<24} {'tenant':<14} {'quota':>8} {'use GPU-h':>10} {'borrowed':>9} "
            f"{'lent':>9} {'admitted':>8} {'preempted':>9} {'wait h':>7} {'bill $':>11}")
    print(head)
    for policy, tenants in chosen.items():
        for name, t in (tenants or {}).items():
            quota = t["quota"].get("all", sum(t["quota"].values()))
            wait = "–" if t["mean_wait_s"] is None else f"{t['mean_wait_s'] / 3600:.2f}"
            print(f"{policy:<24} {name:<14} {quota:>8} {t['use_gpu_h']:>10.1f} "
                  f"{t['borrowed_gpu_h']:>9.1f} {t['lent_gpu_h']:>9.1f} {t['admitted']:>8} "
                  f"{t['preempted']:>9} {wait:>7} {t['bill_usd']:>11,.2f}")
