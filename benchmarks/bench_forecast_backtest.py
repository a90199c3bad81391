"""Every Done-when backtest of the demand forecaster, and phase recognition on held-out curves.

Occupancy: each Helios Earth cluster in the shared data whose mean demand is >= 5 GPUs, and
Philly, at 10 min / 1 h / 6 h (rolling origin over the last 30%); as the CLI does, the
history model pools the other CSVs of the same folder, cut at the test window's start time.
Arrivals: Venus over September 2020 at 10 min / 1 h, beside the published Lucid prediction.
Shifted windows (diagnostic only, nothing is chosen on it): at 1 h and 6 h the same fitted
model and baselines on test windows started k/6 of the horizon later, k = 0..5.
Phases: per-step accuracy on generated curves from seeds never used in development.
Run: python -m benchmarks.bench_forecast_backtest [--out benchmarks/forecast_backtests.md]
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

from benchmarks._table import print_table
from xdscheduler.forecast import backtest, phases, series
from xdscheduler.forecast.cli import siblings

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "demand"
METHODS = ["hybrid", "persistence", "seasonal_naive", "auto_ets", "lucid"]
HELD_OUT = range(1000, 1100)
PHASES = 6  # shifted test windows per horizon (diagnostic)
SHIFTED = ("1h", "6h")


def occupancy_series() -> list[tuple[series.Series, list[series.Series]]]:
    """(series, siblings pooled into its training), as `xds forecast backtest` does."""
    paths = [*sorted((DATA / "helios_earth").glob("vc*.csv")), DATA / "philly_node_sequence.csv"]
    out = []
    for p in paths:
        s = series.load(p, "occupancy")
        if s.values.mean() >= 5:  # the Done-when's rule
            out.append((s, siblings(p, s)))
    return out


def row(r: dict) -> list:
    wape = {"hybrid": r["wape"], **{k: v["wape"] for k, v in r["baselines"].items()}}
    verdict = (
        "lowest"
        if r["lowest_wape"]
        else ("tie " + "+".join(r["tied_with"]) if r["tied_with"] else "NOT lowest")
    )
    return [
        r["series"],
        r["horizon"],
        r["origins"],
        f"{r['accuracy']:.4f}",
        *[f"{wape[m]:.4f}" if m in wape else "-" for m in METHODS],
        f"{r['coverage80']:.2f}/{r['coverage95']:.2f}",
        verdict,
    ]


def phase_row(r: dict) -> list:
    """Hybrid WAPE over the best baseline's on each shifted window (< 1: the hybrid wins)."""
    ratios = [
        p["wape"]["hybrid"] / min(v for k, v in p["wape"].items() if k != "hybrid")
        for p in r["phases"]
    ]
    wins = sum(p["lowest_wape"] for p in r["phases"])
    shown = " ".join(f"{x:.3f}" for x in ratios)
    return [r["series"], r["horizon"], f"{wins}/{len(ratios)}", shown]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the tables to this markdown file")
    args = parser.parse_args()
    if not DATA.is_dir():
        sys.exit(f"shared demand data not found at {DATA}")
    start = time.perf_counter()
    occupancy = [
        backtest.run(s, h, pool=pool, phases=PHASES if h in SHIFTED else 0)
        for s, pool in occupancy_series()
        for h in ("10m", "1h", "6h")
    ]
    rows = [row(r) for r in occupancy]
    venus = series.load(DATA / "venus" / "venus_cluster_throughput_10min.csv", "arrivals")
    lucid = series.load_lucid(DATA / "venus" / "lucid_venus_prediction_2020-09.csv")
    rows += [row(backtest.run(venus, h, lucid)) for h in ("10m", "1h")]
    acc = phases.accuracy(HELD_OUT)
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_table(
            "Demand backtests: WAPE by method (accuracy = 1 - WAPE of the hybrid)",
            [
                "series",
                "horizon",
                "origins",
                "accuracy",
                *[f"wape {m}" for m in METHODS],
                "in 80%/95% PI",
                "hybrid",
            ],
            rows,
            note="hybrid: lowest = strictly lowest WAPE of all methods; tie = equal to a baseline "
            f"(the model shrank to persistence). ({time.perf_counter() - start:.0f} s)",
        )
        print()
        print_table(
            f"Shifted test windows (diagnostic only): hybrid WAPE / best baseline WAPE, start "
            f"moved by k/{PHASES} of the horizon",
            ["series", "horizon", "hybrid lowest", "ratio per shift k = 0.."],
            [phase_row(r) for r in occupancy if "phases" in r],
        )
        print()
        print_table(
            "Phase recognition on generated curves (held-out seeds)",
            ["curves", "seeds", "per-step accuracy", "target"],
            [
                [
                    len(HELD_OUT),
                    f"{HELD_OUT.start}-{HELD_OUT.stop - 1}",
                    f"{acc:.4f}",
                    "met" if acc >= 0.95 else "NOT met",
                ]
            ],
        )
    print(buf.getvalue(), end="")
    if args.out:
        Path(args.out).write_text(
            "# Forecast backtests\n\nGenerated by "
            "`python -m benchmarks.bench_forecast_backtest --out "
            f"{args.out}`.\n\n```\n{buf.getvalue()}```\n"
        )


if __name__ == "__main__":
    main()
