"""Every Done-when backtest of the demand forecaster, and phase recognition on held-out curves.

Occupancy: each Helios Earth cluster in the shared data whose mean demand is >= 5 GPUs, and
Philly, at 10 min / 1 h / 6 h (rolling origin over the last 30%); as the CLI does, the
history model pools the other CSVs of the same folder, cut at the test window's start time.
Arrivals: Venus over September 2020 at 10 min / 1 h, beside the published Lucid prediction.
Shifted windows (diagnostic only, nothing is chosen on it): at 1 h and 6 h the same fitted
model and baselines on test windows started k/6 of the horizon later, k = 0..5.
Earlier test windows (diagnostic): the same at 1 h and 6 h on each occupancy series cut to its
first 70% and 85%, so the test window (the last 30% of what is left) starts earlier; this is
where the history model's evidence rule was chosen, beside the full series.
Short histories (diagnostic): each series and its siblings cut to two weeks (days 0-14 and
14-28 of its record), as a cluster the tool has not seen for long: every horizon, against the
best baseline.
The hybrid's occupancy forecast blends direct models of its horizon and the shorter ones;
the direct model alone is measured beside it on every window (the blend's baseline).
Prediction intervals: coverage and interval score of the swing-scaled conformal intervals
against the constant-width ones from the same validation residuals (the baseline, same run).
Phases: per-step accuracy on generated curves from seeds never used in development.
A series or cut the backtest refuses (a bad CSV, too short a history, a prediction that misses
the series) is skipped with its reason, as `xds forecast backtest` skips a bad sibling; the exit
status is 2 where no demand backtest could be scored.
Run: python -m benchmarks.bench_forecast_backtest [--out benchmarks/forecast_backtests.md]
[--quick: without the earlier cuts and short histories, the diagnostics]
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from benchmarks._table import print_table
from xdscheduler.errors import UserError
from xdscheduler.forecast import backtest, phases, series
from xdscheduler.forecast.cli import ratio_text, siblings
from xdscheduler.network.measurements import data_file, data_files, shared_data_dir
from xdscheduler.textfile import data_stem

METHODS = ["hybrid", "persistence", "seasonal_naive", "auto_ets", "lucid"]
HELD_OUT = range(1000, 1100)
PHASES = 6  # shifted test windows per horizon (diagnostic)
SHIFTED = ("1h", "6h")
EARLIER = (0.70, 0.85)  # the share of each series kept for the earlier test windows
# Days of each series kept for the short histories: two weeks, as a cluster new to the tool
TWO_WEEKS = ((0, 14), (14, 28))
HELIOS = "helios_earth"
OCCUPANCY = f"{HELIOS}/vc*.csv"  # and Philly's
PHILLY = "philly_node_sequence.csv"
VENUS, LUCID = (
    "venus/venus_cluster_throughput_10min.csv",
    "venus/lucid_venus_prediction_2020-09.csv",
)

log = logging.getLogger(__name__)


def attempt(skipped: list[list], name: str, what: str, fn, *args, **kwargs) -> Any:
    """fn(*args, **kwargs), or None where it refuses its input (a UserError): the reason is
    logged and kept in `skipped` as a row (series, what, reason), for the printed tables."""
    try:
        return fn(*args, **kwargs)
    except UserError as err:
        log.warning("skipped %s %s: %s", name, what, err)
        skipped.append([name, what, str(err)])
        return None


def occupancy_series(
    data: Path, skipped: list[list]
) -> list[tuple[series.Series, list[series.Series]]]:
    """(series, siblings pooled into its training), as `xds forecast backtest` does: every
    Helios virtual cluster of the folder, and Philly's where it is there. One that does not
    load is skipped (`attempt`)."""
    philly = data_file(data / PHILLY)
    helios = data_files(data / HELIOS, "vc*.csv")
    paths = [*helios, *([philly] if philly.is_file() else [])]
    out = []
    for p in paths:
        s = attempt(skipped, data_stem(p), "read", series.load, p, "occupancy")
        if s is not None and s.values.mean() >= 5:  # the Done-when's rule
            out.append((s, siblings(p, s)))
    return out


def occupancy_backtests(
    occupancy: list[tuple[series.Series, list[series.Series]]], skipped: list[list]
) -> list[dict]:
    """Each series at every horizon, the shifted diagnostic at SHIFTED."""
    out = []
    for s, pool in occupancy:
        fitted: dict = {}  # the horizons share their direct models (one training end)
        for h in ("10m", "1h", "6h"):
            shifts = PHASES if h in SHIFTED else 0
            r = attempt(
                skipped, s.name, h, backtest.run, s, h, pool=pool, phases=shifts, fitted=fitted
            )
            out += [r] if r is not None else []
    return out


def arrival_backtests(data: Path, skipped: list[list]) -> list[dict]:
    """Venus arrivals at 10 min and 1 h, against Lucid's published prediction, where both are
    in `data`."""
    venus, lucid = data_file(data / VENUS), data_file(data / LUCID)
    if not (venus.is_file() and lucid.is_file()):
        print(f"no Venus arrivals and Lucid prediction in {venus.parent}: left out")
        return []
    demand = attempt(skipped, data_stem(venus), "read", series.load, venus, "arrivals")
    published = attempt(skipped, data_stem(lucid), "read", series.load_lucid, lucid)
    if demand is None or published is None:
        return []
    runs = [
        attempt(skipped, demand.name, h, backtest.run, demand, h, published) for h in ("10m", "1h")
    ]
    return [r for r in runs if r is not None]


def found(data: Path) -> str:
    """The CSVs the data folder holds, for a message saying what is missing."""
    return ", ".join(str(p.relative_to(data)) for p in sorted(data.rglob("*.csv"))) or "no CSV"


def fail(message: str) -> NoReturn:
    print(f"bench_forecast_backtest: error: {message}", file=sys.stderr)
    sys.exit(2)


def print_skipped(skipped: list[list]) -> None:
    """The series and cuts left out of every table, with the reason; nothing where none was."""
    if skipped:
        print_table("Skipped: not scored", ["series", "what", "reason"], skipped)
        print()


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
        f"{r['direct_model']['wape']:.4f}" if "direct_model" in r else "-",
        f"{r['coverage80']:.2f}/{r['coverage95']:.2f}",
        ratio_text(r),
        verdict,
    ]


def ratios(r: dict, method: str = "hybrid") -> list[float]:
    """A method's WAPE over the best baseline's on each shifted window (< 1: it wins).
    "direct": the hybrid's direct model alone, where the hybrid blends horizons."""
    return [
        float(
            backtest.error_ratio(
                p["wape"][method],
                min(v for k, v in p["wape"].items() if k not in ("hybrid", "direct")),
            )
        )
        for p in r["phases"]
        if method in p["wape"]
    ]


def phase_row(r: dict) -> list:
    wins = sum(p["lowest_wape"] for p in r["phases"])
    shown = " ".join(f"{x:.3f}" for x in ratios(r))
    return [r["series"], r["horizon"], f"{wins}/{len(r['phases'])}", shown]


def earlier(
    occupancy: list[tuple[series.Series, list[series.Series]]], skipped: list[list]
) -> list[tuple]:
    """(share kept, backtest) with the shifted diagnostic, on each series cut short; its
    siblings need no cut: training stops at the (earlier) test window's start anyway. A cut
    too short for a backtest is skipped (`attempt`)."""
    out = []
    for s, pool in occupancy:
        for share in EARLIER:
            n = int(share * len(s.values))
            cut = replace(s, values=s.values[:n], index=s.index[:n])
            fitted: dict = {}
            for h in SHIFTED:
                what = f"{h}, first {share:.0%} kept"
                r = attempt(
                    skipped,
                    s.name,
                    what,
                    backtest.run,
                    cut,
                    h,
                    pool=pool,
                    phases=PHASES,
                    fitted=fitted,
                )
                out += [(share, r)] if r is not None else []
    return out


def days(s: series.Series, first: int, last: int) -> series.Series:
    """The series from day `first` to day `last` of its own record."""
    start = s.index[0]
    keep = (s.index >= start + pd.Timedelta(days=first)) & (
        s.index < start + pd.Timedelta(days=last)
    )
    return replace(s, values=s.values[keep], index=s.index[keep])


def short_histories(occupancy: list[tuple[series.Series, list[series.Series]]]) -> list[list]:
    """Each series and its siblings cut to two weeks, backtested at every horizon: the hybrid's
    WAPE over the best baseline's (where the test window has demand)."""
    out = []
    for s, pool in occupancy:
        for first, last in TWO_WEEKS:
            cut = days(s, first, last)
            fitted: dict = {}
            cells: list[str | float] = []
            siblings_cut = [days(p, first, last) for p in pool]
            for h in ("10m", "1h", "6h"):
                try:
                    r = backtest.run(cut, h, pool=siblings_cut, fitted=fitted)
                except UserError as err:  # an idle test window, a series too short
                    cells.append(f"- ({str(err).split(': ', 1)[-1][:30]})")
                    continue
                best = min(v["wape"] for v in r["baselines"].values())
                cells.append(float(backtest.error_ratio(r["wape"], best)))
            out.append([s.name, f"{first}-{last}", *cells])
    return out


def short_summary(rows: list[list]) -> list[list]:
    """Per horizon: the geometric-mean ratio, the worst, and the cells lost by over 1%."""
    out = []
    for i, h in enumerate(("10m", "1h", "6h")):
        rs = [r[2 + i] for r in rows if isinstance(r[2 + i], float)]
        gm = float(np.exp(np.mean(np.log(rs)))) if rs else float("nan")
        out.append(
            [h, len(rs), f"{gm:.4f}", f"{max(rs, default=0):.3f}", sum(x > 1.01 for x in rs)]
        )
    return out


def earlier_rows(runs: list[tuple]) -> list[list]:
    return [
        [r["series"], f"{share:.0%}", r["horizon"], r["test_start"][:10], *phase_row(r)[2:]]
        for share, r in runs
    ]


def summary_rows(runs: list[dict]) -> list[list]:
    """Per horizon, over every shifted window of every run: geometric-mean ratio, win share
    and the worst ratio, of the hybrid (which blends horizons) and of its direct model alone
    (the baseline of the blend, same windows)."""
    out = []
    for h in SHIFTED:
        row = []
        for method in ("hybrid", "direct"):
            rs = [x for r in runs if r["horizon"] == h for x in ratios(r, method)]
            gm = float(np.exp(np.mean(np.log(rs)))) if rs else float("nan")
            row += [f"{gm:.4f}", f"{sum(x < 1 for x in rs)}/{len(rs)}", f"{max(rs, default=0):.3f}"]
        out.append([h, *row])
    return out


def interval_rows(runs: list[dict]) -> list[list]:
    """Per backtest: coverage and interval score of both intervals, and the score ratio."""
    out = []
    for r in runs:
        flat = r["flat_intervals"]
        cells = []
        for level in (80, 95):
            ours, theirs = r[f"interval_score{level}"], flat[f"interval_score{level}"]
            cells += [
                f"{r[f'coverage{level}']:.2f} / {flat[f'coverage{level}']:.2f}",
                f"{ours:.3f} / {theirs:.3f}",
                f"{ours / max(theirs, 1e-12):.3f}",
            ]
        out.append([r["series"], r["horizon"], *cells])
    return out


def interval_summary(runs: list[dict]) -> list[list]:
    """Per horizon: geometric-mean score ratio (swing / flat), the worst, and the lowest
    coverage of each kind of interval."""
    out = []
    for h in ("10m", "1h", "6h"):
        rs = [r for r in runs if r["horizon"] == h]
        if not rs:
            continue
        for level in (80, 95):
            key = f"interval_score{level}"
            ratio = [r[key] / max(r["flat_intervals"][key], 1e-12) for r in rs]
            cover = f"coverage{level}"
            out.append(
                [
                    h,
                    f"{level}%",
                    len(rs),
                    f"{np.exp(np.mean(np.log(ratio))):.3f}",
                    f"{max(ratio):.3f}",
                    f"{min(r[cover] for r in rs):.2f}",
                    f"{min(r['flat_intervals'][cover] for r in rs):.2f}",
                ]
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the tables to this markdown file")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the Done-when backtests, intervals and phases only: no earlier cuts, no short "
        "histories (the diagnostics; about a third of the time)",
    )
    args = parser.parse_args()
    try:  # $XDS_DATA_DIR/demand, else shared/data/demand beside the repository
        data = shared_data_dir("demand", "the Helios, Philly and Venus demand CSVs")
    except UserError as err:
        fail(str(err))
    start = time.perf_counter()
    skipped: list[list] = []
    series_pools = occupancy_series(data, skipped)
    occupancy = occupancy_backtests(series_pools, skipped)
    early = [] if args.quick else earlier(series_pools, skipped)
    short = [] if args.quick else short_histories(series_pools)
    arrivals = arrival_backtests(data, skipped)
    occupancy_needs = f"{OCCUPANCY} or {PHILLY} with a mean demand of 5 GPUs or more"
    listed = found(data)
    if not series_pools:
        print(f"no occupancy series in {data} (found: {listed}); needed: {occupancy_needs}")
    if not occupancy + arrivals:
        print_skipped(skipped)
        fail(
            f"no demand backtest could be scored in {data} (found: {listed}); needed: "
            f"{occupancy_needs}, or {VENUS} with {LUCID}"
        )
    rows = [row(r) for r in occupancy + arrivals]
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
                "direct alone",
                "in 80%/95% PI",
                "hybrid / best (90% CI)",
                "hybrid",
            ],
            rows,
            note="hybrid: lowest = strictly lowest WAPE of all methods; tie = equal to a baseline "
            "(the model shrank to persistence). hybrid / best: WAPE over the best baseline's, "
            "with a 90% moving-block bootstrap interval over the origins. direct alone: the "
            "WAPE of the hybrid's direct model for the horizon without the shorter horizons' "
            "models it blends in (not a baseline). "
            f"({time.perf_counter() - start:.0f} s)",
        )
        print()
        print_skipped(skipped)
        print_table(
            f"Shifted test windows (diagnostic only): hybrid WAPE / best baseline WAPE, start "
            f"moved by k/{PHASES} of the horizon",
            ["series", "horizon", "hybrid lowest", "ratio per shift k = 0.."],
            [phase_row(r) for r in occupancy if "phases" in r],
        )
        print()
        if args.quick:
            print("Earlier test windows and short histories: left out (--quick)\n")
        else:
            print_table(
                "Earlier test windows (diagnostic): each series cut to its first "
                + " / ".join(f"{x:.0%}" for x in EARLIER)
                + ", ratio as above",
                [
                    "series",
                    "kept",
                    "horizon",
                    "test from",
                    "hybrid lowest",
                    "ratio per shift k = 0..",
                ],
                earlier_rows(early),
            )
            print()
        print_table(
            "All shifted windows, the full series and the earlier cuts: WAPE / best baseline "
            "WAPE, of the hybrid (blending horizons) and of its direct model alone",
            [
                "horizon",
                "hybrid: geometric mean",
                "lowest",
                "worst",
                "direct model alone: geometric mean",
                "lowest",
                "worst",
            ],
            summary_rows([r for r in occupancy if "phases" in r] + [r for _, r in early]),
        )
        print()
        if not args.quick:
            print_table(
                "Short histories (diagnostic): each series and its siblings cut to two weeks, "
                "hybrid WAPE / best baseline WAPE",
                ["series", "days", "10m", "1h", "6h"],
                [
                    [*r[:2], *(f"{c:.3f}" if isinstance(c, float) else c for c in r[2:])]
                    for r in short
                ],
            )
            print()
            print_table(
                "Short histories: per horizon over the series and both two-week cuts",
                ["horizon", "backtests", "geometric mean", "worst", "lost by over 1%"],
                short_summary(short),
            )
            print()
        print_table(
            "Prediction intervals: swing-scaled / constant width (the same residuals), "
            "coverage and interval score (over the mean demand; lower is better)",
            ["series", "horizon", "in 80%", "score 80%", "ratio", "in 95%", "score 95%", "ratio"],
            interval_rows(occupancy + arrivals),
        )
        print()
        print_table(
            "Interval score ratio, swing-scaled / constant width, over the full series and the "
            "earlier cuts",
            [
                "horizon",
                "interval",
                "backtests",
                "geometric mean",
                "worst",
                "lowest coverage",
                "lowest (constant)",
            ],
            interval_summary(occupancy + arrivals + [r for _, r in early]),
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
        quick = " --quick" if args.quick else ""
        Path(args.out).write_text(
            "# Forecast backtests\n\nGenerated by "
            f"`python -m benchmarks.bench_forecast_backtest{quick} --out "
            f"{args.out}`.\n\n```\n{buf.getvalue()}```\n"
        )


if __name__ == "__main__":
    main()
