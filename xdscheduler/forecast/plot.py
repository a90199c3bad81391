"""Demand waveform: the last day, and the forecast mean demand over the next k minutes with
80% and 95% intervals, for leads up to 1 h and up to 24 h."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.forecast.history import min_history, too_short
from xdscheduler.forecast.hybrid import Forecaster
from xdscheduler.forecast.series import Series
from xdscheduler.textfile import output_file, write_atomic

LEADS_1H = (10, 20, 30, 60)  # minutes
LEADS_24H = (60, 180, 360, 720, 1440)


def waveform(series: Series, leads_min, seed: int = 0, fitted: dict | None = None) -> pd.DataFrame:
    """One row per lead: the hybrid forecast of mean demand over the next `lead` minutes.
    `fitted`: history models shared with other calls on the same series."""
    leads = [m for m in leads_min if m % series.step_min == 0]
    if not leads:
        raise UserError(f"no lead in {leads_min} is a multiple of {series.step_min} min")
    try:
        f = Forecaster.fit(
            series.values, series.index, series.step_min, series.target, leads, seed, fitted=fitted
        )
    except UserError as err:  # name the series: the reader has several
        raise UserError(f"{series.name}: {err}") from None
    rows = [fc.__dict__ for fc in f.forecast(series.values, series.index)]
    return pd.DataFrame(rows)


def plot_waveform(series: Series, out: str | Path, seed: int = 0) -> Path:
    out = Path(out)
    if out.suffix.lower() != ".png":
        raise UserError(f"--out must be a .png file, got {out}")
    output_file(out, "plot")  # before the forecasts are fitted
    n, longest = len(series.values), max(LEADS_24H) // series.step_min
    if n < min_history(longest, series.step_min):  # said before any model is fitted
        raise UserError(f"{series.name}: {too_short(n, longest, series.step_min)}")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True)
    hist = series.values[-series.per_day :]
    t_hist = (pd.RangeIndex(-len(hist) + 1, 1) * series.step_min).to_numpy()
    fitted: dict = {}  # both panels forecast the next hour
    for ax, leads, title in ((axes[0], LEADS_1H, "next 1 h"), (axes[1], LEADS_24H, "next 24 h")):
        w = waveform(series, leads, seed, fitted)
        span = max(leads)
        keep = t_hist >= -span
        ax.plot(t_hist[keep], hist[keep], color="k", lw=1, label="observed")
        x = w["horizon_min"].to_numpy()
        ax.fill_between(x, w["lo95"], w["hi95"], alpha=0.2, color="C0", label="95%")
        ax.fill_between(x, w["lo80"], w["hi80"], alpha=0.35, color="C0", label="80%")
        ax.plot(x, w["mean"], "o-", color="C0", label="mean over next k min")
        ax.set_title(f"{series.name} {series.target}: {title}")
        ax.set_xlabel("minutes from now")
    axes[0].set_ylabel("GPUs")
    axes[0].legend(loc="best", fontsize=8)
    fig.tight_layout()
    write_atomic(out, lambda p: fig.savefig(p, dpi=100), "plot")
    plt.close(fig)
    return out
