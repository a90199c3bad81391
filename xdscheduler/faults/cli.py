"""`xds faults bench`: the detectors alone against injected faults."""

from __future__ import annotations

import json

from xdscheduler.arguments import seed
from xdscheduler.errors import UserError

MAX_N = 100_000


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "faults",
        help="fault detection: benchmark the detectors",
        description="fault detection: benchmark the detectors",
    )
    fsub = p.add_subparsers(dest="faults_command", required=True, metavar="ACTION")
    q = fsub.add_parser(
        "bench",
        help="inject N faults into heartbeat and log streams "
        "(±30%% jitter, benign bursts); print precision, recall, detection time",
    )
    q.add_argument("--n", type=int, default=1000, help="faults to inject (default 1000)")
    q.add_argument("--seed", type=seed, default=0)
    q.add_argument(
        "--loss",
        type=float,
        default=0.0,
        help="stress: probability that a heartbeat is lost (default 0)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(fn=cmd_bench)


def cmd_bench(args) -> None:
    from xdscheduler.faults.bench import bench

    if not 1 <= args.n <= MAX_N:
        raise UserError(f"--n takes a number of faults from 1 to {MAX_N}, got {args.n}")
    if args.seed < 0:
        raise UserError(f"--seed must be non-negative, got {args.seed}")
    if not 0 <= args.loss < 0.5:
        raise UserError(f"--loss is a probability below 0.5, got {args.loss}")
    out = bench(args.n, args.seed, loss=args.loss)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(
        f"{out['n_faults']} faults + {out['fault_free_trials']} fault-free trials, seed "
        f"{out['seed']}, heartbeats every {out['heartbeat_period_s']} s ±{out['jitter']:.0%}"
    )
    print(
        f"  precision {out['precision']:.4f}   recall {out['recall']:.4f}   "
        f"false alarms {out['false_alarms']}"
    )
    print(
        f"  detection p50 {out['detection_s_p50']:.2f} s   p99 {out['detection_s_p99']:.2f} s"
        f"   max {out['detection_s_max']:.2f} s"
    )
    print(
        "  recall by kind: " + ", ".join(f"{k} {v:.3f}" for k, v in out["recall_by_kind"].items())
    )
