"""`xds forecast backtest|plot` and `xds phases`: argparse wiring over the forecast package."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from xdscheduler.arguments import seed
from xdscheduler.errors import UserError
from xdscheduler.forecast import HORIZONS, TARGETS

LUCID_NAME = "lucid_venus_prediction_2020-09.csv"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "forecast",
        help="demand forecasts: backtests and plots",
        description="demand forecasts: backtests and plots",
    )
    fsub = p.add_subparsers(dest="forecast_command", required=True, metavar="ACTION")
    q = fsub.add_parser("backtest", help="rolling-origin backtest against baselines")
    q.add_argument(
        "csv",
        help="Helios (time, running_gpu_num, pending_gpu_num | "
        "submit_gpu_num) or Philly (time, active) CSV",
    )
    q.add_argument("--target", choices=TARGETS, default="occupancy")
    q.add_argument("--horizon", default="1h", help=f"one of {', '.join(HORIZONS)}")
    q.add_argument(
        "--lucid",
        help="published prediction CSV (pred_gpu_num); arrivals only. "
        f"Default: {LUCID_NAME} beside CSV when present",
    )
    q.add_argument("--seed", type=seed, default=0)
    q.add_argument(
        "--no-pool",
        action="store_true",
        help="occupancy: do not pool the other CSVs of the same folder (same format) into "
        "training (they are cut at the test window's start time)",
    )
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(fn=cmd_backtest)
    q = fsub.add_parser("plot", help="demand waveform with intervals for the next 1 h and 24 h")
    q.add_argument("csv")
    q.add_argument("--target", choices=TARGETS, default="occupancy")
    q.add_argument("--out", required=True, help="PNG file to write")
    q.add_argument("--seed", type=seed, default=0)
    q.set_defaults(fn=cmd_plot)
    p = subparsers.add_parser(
        "phases",
        help="label a loss curve's training phases",
        description="label each step of a loss curve as warm-up, fast "
        "convergence or stable convergence; a curve that does not fall beyond its noise is "
        "flat (no progress) or diverging (loss rising)",
    )
    p.add_argument("csv", help="CSV with a 'loss' column (optional 'step', 'utilization')")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(fn=cmd_phases)


def _lucid(args):
    from xdscheduler.forecast.series import load_lucid
    from xdscheduler.network.measurements import data_file

    if args.target != "arrivals":
        if args.lucid:
            raise UserError("--lucid applies to --target arrivals only")
        return None
    path = args.lucid or data_file(Path(args.csv).with_name(LUCID_NAME))
    return load_lucid(path) if args.lucid or Path(path).is_file() else None


def cmd_backtest(args) -> None:
    from xdscheduler.forecast import backtest
    from xdscheduler.forecast.series import load, parse_horizon

    series = load(args.csv, args.target)
    parse_horizon(args.horizon, series.step_min)
    pool = [] if args.no_pool or args.target != "occupancy" else siblings(Path(args.csv), series)
    result = backtest.run(series, args.horizon, _lucid(args), seed=args.seed, pool=pool)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    if result["pooled_with"]:
        print(f"history model pooled with: {', '.join(result['pooled_with'])}")
    for name, why in result["not_pooled"].items():
        print(f"not pooled: {name} ({why})")
    print(
        f"{result['series']} {result['target']} {result['horizon']}: "
        f"{result['origins']} origins from {result['test_start']}"
    )
    print(f"  {'method':<15} {'accuracy':>8} {'wape':>8} {'smape':>8}")
    rows = [("hybrid", result), *list(result["baselines"].items())]
    for name, m in rows:
        print(f"  {name:<15} {m['accuracy']:8.4f} {m['wape']:8.4f} {m['smape']:8.4f}")
    if "direct_model" in result:
        steps = ", ".join(str(k) for k in result["blend_horizons"])
        print(
            f"  (the hybrid averages direct models of {steps} steps; the "
            f"{result['blend_horizons'][0]}-step one alone: wape "
            f"{result['direct_model']['wape']:.4f})"
        )
    tie = f" (ties {', '.join(result['tied_with'])})" if result["tied_with"] else ""
    print(f"  hybrid has the lowest wape: {'yes' if result['lowest_wape'] else 'no'}{tie}")
    flat = result["flat_intervals"]
    for level in (80, 95):
        print(
            f"  {level}% interval: covers {result[f'coverage{level}']:.2f}, score "
            f"{result[f'interval_score{level}']:.4f} (one width for every day: covers "
            f"{flat[f'coverage{level}']:.2f}, score {flat[f'interval_score{level}']:.4f})"
        )
    print(f"  wape / {result['vs_best_baseline']['baseline']}'s: {ratio_text(result)}")


def ratio_text(result: dict) -> str:
    """The backtest's WAPE over the best baseline's, with its interval, in words where a
    baseline exact on the test window leaves the ratio without bound."""
    vs = result["vs_best_baseline"]
    if vs["wape_ratio"] is None:
        return f"undefined: {vs['baseline']} is exact on every origin of the test window"
    lo, hi = vs["ratio_ci90"]
    top = "unbounded" if hi is None else f"{hi:.3f}"
    return f"{vs['wape_ratio']:.3f} (90% block-bootstrap interval {lo:.3f}-{top})"


def siblings(path: Path, series) -> list:
    """Other series of the same trace: CSVs beside `path` that read as the same target. One
    that has the columns but fails to load is left out with a warning: only the file named
    on the command line may stop the backtest."""
    from xdscheduler.forecast.csvfile import MissingColumns
    from xdscheduler.forecast.series import load
    from xdscheduler.network.measurements import data_files

    out = []
    for other in data_files(path.resolve().parent, "*.csv"):
        if other == path.resolve():
            continue
        try:
            sib = load(other, series.target)
        except MissingColumns:
            continue  # another format (or not demand at all): not part of the pool
        except UserError as err:
            logging.getLogger("xdscheduler").warning("not pooled: %s", err)
            continue
        out.append(sib)  # one of another step: the backtest says it is not pooled, and why
    return out


def cmd_plot(args) -> None:
    from xdscheduler.forecast.plot import plot_waveform
    from xdscheduler.forecast.series import load

    out = plot_waveform(load(args.csv, args.target), args.out, seed=args.seed)
    print(f"wrote {out}")


def cmd_phases(args) -> None:
    from xdscheduler.forecast.phases import NAMES, label_csv

    result = label_csv(args.csv)
    if args.json:
        json.dump(result, sys.stdout)
        print()
        return
    for seg in result["segments"]:
        print(f"{seg['phase']:<{max(map(len, NAMES))}} steps {seg['start']}–{seg['end']}")
