"""`xds bill` and `xds tenants`: a study's metered usage, priced, and its tenants' figures."""

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
