"""Demand series from the public traces: Helios (Earth, Venus) and Philly CSV formats."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from xdscheduler.errors import UserError
from xdscheduler.forecast import HORIZONS, TARGETS
from xdscheduler.forecast.csvfile import by_key, numbers, pick, read_csv, timestamps
from xdscheduler.textfile import data_stem

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Series:
    """A regular demand series: `values[i]` at `start + i * step_min` minutes."""

    name: str
    target: str
    values: np.ndarray
    index: pd.DatetimeIndex
    step_min: int

    @property
    def per_day(self) -> int:
        return 1440 // self.step_min

    def steps(self, horizon: str) -> int:
        return parse_horizon(horizon, self.step_min)


def parse_horizon(horizon: str, step_min: int) -> int:
    if horizon not in HORIZONS:
        raise UserError(f"unknown horizon {horizon!r}; use one of {', '.join(HORIZONS)}")
    minutes = HORIZONS[horizon]
    if minutes % step_min:
        raise UserError(f"horizon {horizon} is not a multiple of the series step ({step_min} min)")
    return minutes // step_min


# The demand columns of each format, per target, in the order tried (each with 'time').
COLUMNS = {
    "occupancy": (("running_gpu_num", "pending_gpu_num"), ("active",)),  # Helios, Philly
    "arrivals": (("submit_gpu_num",),),  # Helios Venus
}
MAX_GPUS = 1e9  # one demand value above a billion GPUs is a typo (and would overflow sums)
# Points of the regular grid a series is resampled onto: 1.9 years at one a minute, 19 at ten.
# A mistyped year would otherwise ask for centuries of minutes (gigabytes, then a failure).
MAX_POINTS = 1_000_000
MAX_STEP_MIN = 1440  # the models need at least one point a day
GAP_WARN_SHARE = 0.01  # steps without a row beyond this share are said to be filled


def from_frame(
    df: pd.DataFrame, target: str, name: str = "series", source: str | None = None
) -> Series:
    """Demand from a trace's own columns: occupancy = running + pending (Helios) or active
    (Philly); arrivals = submit_gpu_num (Helios Venus). Rows are sorted by time and rows of one
    time averaged. `source`: where the rows came from, for messages (default `name`)."""
    where = source or name
    cols = pick(df.columns, _needs(target), where)[1:]
    y = np.sum([numbers(df, c, where, high=MAX_GPUS) for c in cols], axis=0)
    s, step_min = regular(timestamps(df, "time", where), y, where)
    # Gaps: occupancy holds its last value; nothing was submitted in a missing bin.
    missing = s.isna()
    if missing.mean() > GAP_WARN_SHARE:
        runs = missing.ne(missing.shift()).cumsum()[missing].value_counts()
        log.warning(
            "%s: %.1f%% of the %d-min steps have no row (the longest gap %s), filled %s and "
            "then forecast and scored as if observed",
            where,
            100 * missing.mean(),
            step_min,
            pd.Timedelta(minutes=step_min * int(runs.max())),
            "with the last value" if target == "occupancy" else "as no arrival",
        )
    s = s.ffill() if target == "occupancy" else s.fillna(0.0)
    return Series(name, target, s.to_numpy(float), s.index, step_min)


def regular(time: pd.DatetimeIndex, values: np.ndarray, where: str) -> tuple[pd.Series, int]:
    """`values` at `time` on a grid of the series' own step, NaN where no row falls, and the
    step in minutes: times snapped to the step counted from the first (a clock a few seconds
    off), on whole minutes, and rows of one step averaged."""
    distinct = time.unique().sort_values()
    if len(distinct) < 3:
        raise UserError(f"{where}: needs at least 3 distinct times, got {len(distinct)}")
    step_min = _step_min(distinct, where)
    _check_span(time, step_min, where)
    step = pd.Timedelta(minutes=step_min)
    steps = np.rint((time - distinct[0]) / step).astype(np.int64)
    snapped = distinct[0].round("min") + steps * step
    s = by_key(snapped, values)
    return s.reindex(pd.date_range(s.index[0], s.index[-1], freq=step)), step_min


def _needs(target: str) -> list[tuple[str, ...]]:
    if target not in TARGETS:
        raise UserError(f"unknown target {target!r}; use occupancy or arrivals")
    return [("time", *cols) for cols in COLUMNS[target]]


def _step_min(index: pd.DatetimeIndex, where: str) -> int:
    """The series' step: the median gap between its times, to the nearest whole minute (at
    least 1: a median of 9 min 58 s is a 10-minute series with a clock a little off)."""
    step = pd.Timedelta(index.to_series().diff().median())
    step_min = max(round(step.total_seconds() / 60), 1)
    if step_min > MAX_STEP_MIN:
        raise UserError(
            f"{where}: times are {step_min:,} min apart (median); steps of 1 to "
            f"{MAX_STEP_MIN} min are read"
        )
    return step_min


def _check_span(time: pd.DatetimeIndex, step_min: int, where: str) -> None:
    """Refuse a span whose grid at `step_min` would exceed MAX_POINTS, naming its end rows."""
    lo, hi = int(time.argmin()), int(time.argmax())
    points = (time[hi] - time[lo]) // pd.Timedelta(minutes=step_min) + 1
    if points > MAX_POINTS:
        raise UserError(
            f"{where}: times run from {time[lo]} (row {lo + 1}) to {time[hi]} (row {hi + 1}), "
            f"{points:,} points at the {step_min}-min step; at most {MAX_POINTS:,} are read "
            f"(a mistyped date? else cut the trace)"
        )


def load(path: str | Path, target: str) -> Series:
    df = read_csv(path, "trace", _needs(target))
    return from_frame(df, target, name=data_stem(path), source=str(path))


def load_lucid(path: str | Path) -> pd.Series:
    """The Lucid project's published 10-minute prediction of GPUs submitted (`pred_gpu_num`;
    a model's output, so negative values occur in it and are kept)."""
    df = read_csv(path, "published prediction", [("time", "pred_gpu_num")])
    where = str(path)
    pred = numbers(df, "pred_gpu_num", where, low=-MAX_GPUS, high=MAX_GPUS)
    return by_key(timestamps(df, "time", where), pred)
